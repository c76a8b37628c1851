"""Measure the kernel launch + synchronisation floor on the GPU, in one process, within a time budget.

    python benchmarks/launch_floor.py --out benchmarks/results [--repeats 2000] [--budget-s 120]

Two measurements, each many repeats of one call that ends on a synchronisation:
  * ours: the cheapest CUDA-core benchmark of libcarm_bench.so with 1 inner iteration and 1 launch,
    through ctypes (carm_advisor.measure.launch_floor, what `carm-advise ceilings` records): host time
    per call, and its CUDA-event (GPU-side) time;
  * torch: a one-element add on the GPU, host time per call with torch.cuda.synchronize() and
    CUDA-event time; a framework's smallest op, for comparison.
Writes one JSON under --out whose "launch_floor" object merges into a profile with
`benchmarks/embed_profile.py ... --launch-floor FILE`. --dry runs on a CPU with a fake library (tests).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def torch_floor(repeats: int, deadline: float) -> dict:
    import torch

    x = torch.ones(1, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):   # warm-up: allocator and first-launch costs are not the floor
        x.add_(1)
    torch.cuda.synchronize()
    host_s, gpu_s = [], []
    for _ in range(repeats):
        if time.perf_counter() > deadline:
            break
        t0 = time.perf_counter()
        start.record()
        x.add_(1)
        end.record()
        end.synchronize()
        host_s.append(time.perf_counter() - t0)
        gpu_s.append(start.elapsed_time(end) / 1e3)
    return {"value_s": statistics.median(host_s), "gpu_time_s": statistics.median(gpu_s), "repeats": len(host_s),
            "method": "median host time of x.add_(1) on a 1-element CUDA tensor, between CUDA events, "
                      "end.synchronize() each call", "torch": torch.__version__}


class _DryLibrary:
    """A stand-in for libcarm_bench.so on a CPU: each call 'takes' 4 us of host time, 2 us on the GPU."""

    def benchmarks(self):
        from carm_advisor.measure.kernels import BenchmarkInfo

        return [BenchmarkInfo(0, "fp32_fma", "compute", "fp32", "", "chains", "x", "x", 80, 0, 2.0, 0.0, 0.0, False)]

    def run(self, name, **_):
        from carm_advisor.measure.kernels import RunResult

        self.now += 4e-6
        return RunResult(name, 0, 0, 2e-6, 0, 0, 0, 1, 1, 1, 1, 0)

    now = 0.0


def main(argv=None) -> int:
    from _common import result_path, write

    from carm_advisor.measure.launch_floor import measure_launch_floor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--repeats", type=int, default=2000)
    ap.add_argument("--budget-s", type=float, default=120.0, help="stop the torch repeats after this long")
    ap.add_argument("--dry", action="store_true", help="fake library, no GPU, no torch (for tests)")
    args = ap.parse_args(argv)
    deadline = time.perf_counter() + args.budget_s
    if args.dry:
        lib = _DryLibrary()
        ours = measure_launch_floor(lib, repeats=args.repeats, clock=lambda: lib.now)
        doc = {"device": {"name": "dry run"}, "launch_floor": ours, "torch": None}
    else:
        from _common import device_record

        from carm_advisor.measure.build import detect_arch
        from carm_advisor.measure.kernels import KernelLibrary
        from carm_advisor.power.nvml import open_gpu

        lib = KernelLibrary.load(arch=detect_arch())
        dev = lib.device_info(0)
        ours = measure_launch_floor(lib, repeats=args.repeats, arch=dev.arch)
        try:
            reference = torch_floor(args.repeats, deadline)
        except Exception as exc:   # no torch on this machine: ours still stands
            reference = {"skipped": f"{type(exc).__name__}: {exc}"}
        doc = {"device": device_record(open_gpu(0)), "launch_floor": ours, "torch": reference}
    path = write(result_path(args.out, doc["device"]["name"] or "gpu", "launch-floor"), doc)
    print(f"launch floor {ours['value_s'] * 1e6:.2f} us (GPU side {ours['provenance']['gpu_time_s'] * 1e6:.2f} us) "
          f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
