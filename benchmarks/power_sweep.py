"""Power of chosen micro-benchmarks over >= 1 s NVML energy windows, for the sweep power fit.

    python benchmarks/power_sweep.py [--names GLOB,...] [--exclude GLOB,...] [--window-s 1.0] [--budget-s 240] [--out DIR]

The ceilings run times its mixed-intensity sweep in 50 ms calls, too short for NVML's energy counter
(it advances about every 100 ms), so its sweep rows carry no power. This measures the rows named (by
default every mixed row plus every roof row the GPU runs) with `power.energy.measure_energy` windows
of >= --window-s, calls of ~0.1 s each, until --budget-s is spent, and writes
<out>/<gpu>-power-sweep-<date>.json with "device" (idle power, limit, max clock) and "benchmarks" rows
in the ceilings run's format, which carm_advisor.carm.power_fit.records_from_benchmarks and
benchmarks/power_model_validation.py --ceilings read. Measures only; changes no GPU setting.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import device_record, result_path, write  # noqa: E402

CALL_S = 0.1


def _iterations_for(lib, name: str, target_s: float) -> int:
    """Inner iterations so one call lasts about target_s (the library's own first guess, then scaled)."""
    result = lib.run(name, iterations=0, launches=1, warmup=1)
    iterations = max(1, int(result.iterations or 1))
    for _ in range(6):
        if result.seconds >= 0.7 * target_s:
            break
        iterations = max(iterations + 1, int(iterations * min(64.0, target_s / max(result.seconds, 1e-6))))
        result = lib.run(name, iterations=iterations, launches=1, warmup=0)
    return iterations


def idle_power_w(gpu, seconds: float = 1.0, sleep=time.sleep, clock=time.perf_counter) -> float:
    e0, t0 = gpu.total_energy_mj(), clock()
    sleep(seconds)
    e1, t1 = gpu.total_energy_mj(), clock()
    return (e1 - e0) / 1000.0 / (t1 - t0)


def chosen(benchmarks, arch: int, patterns: list[str], exclude: list[str] = ()) -> list:
    runnable = [b for b in benchmarks if b.runs_on(arch) and not any(fnmatch.fnmatchcase(b.name, p) for p in exclude)]
    if not patterns:   # every mixed row, and the roof rows (wgmma only on Hopper, as the ceilings run)
        return [b for b in runnable if b.kind == "mixed" or not (arch >= 90 and b.kind == "compute"
                                                                  and b.instruction.startswith("mma."))]
    return [b for b in runnable if any(fnmatch.fnmatchcase(b.name, p) for p in patterns)]


def sweep(lib, gpu, names: list[str], window_s: float, budget_s: float, clock=time.perf_counter,
          sleep=time.sleep, exclude: list[str] = ()) -> dict:
    from carm_advisor.power.energy import measure_energy

    dev = lib.device_info(0)
    infos = chosen(lib.benchmarks(), 10 * dev.cc_major + dev.cc_minor, names, exclude)
    started = clock()
    idle = idle_power_w(gpu, sleep=sleep, clock=clock)
    rows, skipped = [], []
    for info in infos:
        if clock() - started + 2 * window_s > budget_s:   # one more row would overrun the budget
            skipped.append(info.name)
            continue
        iterations = _iterations_for(lib, info.name, CALL_S)
        last = {}

        def call():
            last["r"] = lib.run(info.name, iterations=iterations, launches=1, warmup=0)

        m = measure_energy(call, gpu, min_window_s=window_s, repeats=1, warmup=1, clock=clock)
        r = last["r"]
        per_call_s = r.seconds   # CUDA-event time of the kernel: its rates; the window's power covers the calls
        flops_per_s, bytes_per_s = r.flops / per_call_s, r.bytes / per_call_s
        rows.append({"name": info.name, "kind": info.kind, "key": info.carm_key, "memory_key": info.memory_key,
                     "variant": info.variant, "rate": bytes_per_s if info.kind == "memory" else flops_per_s,
                     "flops_per_s": flops_per_s, "bytes_per_s": bytes_per_s,
                     "intensity": flops_per_s / bytes_per_s if bytes_per_s and info.kind == "mixed" else None,
                     "power_w": m.power_w, "sm_clock_mhz": m.sm_clock_mhz, "seconds_per_call": per_call_s,
                     "extra": {"iterations": iterations, "window_s": [w.time_s for w in m.windows],
                               "calls": m.windows[0].calls}})
    device = {**device_record(gpu), "idle_power_w": idle, "sm_count": dev.sm_count,
              "compute_capability": f"{dev.cc_major}.{dev.cc_minor}"}
    device["sm_clock_max_mhz"] = device.get("sm_clock_max_mhz")
    return {"device": device, "benchmarks": rows, "skipped_for_budget": skipped, "window_s": window_s,
            "wall_s": clock() - started}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", default="", help="benchmark name globs, comma-separated (default: mixed + roofs)")
    ap.add_argument("--exclude", default="", help="benchmark name globs to leave out, comma-separated")
    ap.add_argument("--window-s", type=float, default=1.0)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    from carm_advisor.measure.build import detect_arch
    from carm_advisor.measure.kernels import KernelLibrary
    from carm_advisor.power.nvml import open_gpu

    lib = KernelLibrary.load(arch=detect_arch())
    gpu = open_gpu(0)
    globs = lambda text: [n.strip() for n in text.split(",") if n.strip()]  # noqa: E731
    doc = sweep(lib, gpu, globs(args.names), args.window_s, args.budget_s, exclude=globs(args.exclude))
    path = write(result_path(args.out, doc["device"].get("name") or "gpu", "power-sweep"), doc)
    print(f"{len(doc['benchmarks'])} rows in {doc['wall_s']:.0f} s ({len(doc['skipped_for_budget'])} skipped for the "
          f"budget); wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
