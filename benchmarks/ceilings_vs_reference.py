"""Our CARM ceilings beside the library references, measured in one run on one GPU.

References (PyTorch): matmul 8192^3 in FP16, BF16, TF32 and FP32 (cuBLAS), torch._scaled_mm in FP8
e4m3, and copy_ of 4 GiB (bytes read + written). Each reference is timed over NVML energy windows
of >= 1 s, so its power sits beside the ceilings'. Writes benchmarks/results/<gpu>-ceilings-<date>.json.

    python benchmarks/ceilings_vs_reference.py [--out DIR] [--profile-out FILE] [--skip-quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import device_record, result_path, write  # noqa: E402


def torch_references(gpu, window_s: float = 1.0) -> dict:
    import torch

    from carm_advisor.power.energy import measure_energy

    refs = {}
    n = 8192
    dev = "cuda"

    def record(name, fn, work, unit):
        m = measure_energy(fn, gpu, min_window_s=window_s, repeats=2, sync=torch.cuda.synchronize, warmup=3)
        refs[name] = {"value": work / m.time_per_call_s, "unit": unit, "time_per_call_s": m.time_per_call_s,
                      "spread": m.time_spread_rel, "power_w": m.power_w, "sm_clock_mhz": m.sm_clock_mhz}

    flops = 2.0 * n ** 3
    for name, dtype, tf32 in (("cublas_fp16", torch.float16, False), ("cublas_bf16", torch.bfloat16, False),
                              ("cublas_tf32", torch.float32, True), ("cublas_fp32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        record(name, lambda a=a, b=b: torch.matmul(a, b), flops, "FLOP/s")
        del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()   # column-major second operand
        one = torch.tensor(1.0, device=dev)
        record("scaled_mm_fp8_e4m3",
               lambda a=a, b=b: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
               flops, "FLOP/s")
        del a, b
    except Exception as exc:  # older torch or no FP8 support
        refs["scaled_mm_fp8_e4m3"] = {"error": f"{type(exc).__name__}: {exc}"}
    elems = 4 * 1024 ** 3 // 4
    src = torch.empty(elems, device=dev, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    record("torch_copy_4gib", lambda dst=dst, src=src: dst.copy_(src), 2.0 * elems * 4, "B/s")
    del src, dst
    torch.cuda.empty_cache()
    return refs


def ratios(profile, refs: dict) -> dict:
    from carm_advisor.carm.fitting import per_clock_max

    c = profile.ceilings
    arch = int(str(profile.device.get("compute_capability", "0.0")).replace(".", ""))
    sm = profile.device.get("sm_count") or 0

    def over(key, ref):
        if key in c and ref in refs and refs[ref].get("value"):
            return c[key].value / refs[ref]["value"]
        return None

    def vs_clock(key):
        if key not in c:
            return None
        peak = per_clock_max(key, arch, sm, c[key].sm_clock_mhz)
        return c[key].value / peak if peak else None

    sweep = profile.extra.get("sweep") or {}
    return {
        "bf16_tc_vs_cublas": over("tc_bf16", "cublas_bf16"),
        "fp16_tc_vs_cublas": over("tc_fp16", "cublas_fp16"),
        "tf32_tc_vs_cublas": over("tc_tf32", "cublas_tf32"),
        "fp8_tc_vs_cublas": over("tc_fp8_e4m3", "scaled_mm_fp8_e4m3"),
        "fp32_vs_cublas_fp32": over("fp32", "cublas_fp32"),
        "fp32_vs_per_clock_max": vs_clock("fp32"),
        "shared_vs_per_clock_max": vs_clock("shared"),
        "hbm_vs_torch_copy": over("hbm", "torch_copy_4gib"),
        "l2_tb_per_s": c["l2"].value / 1e12 if "l2" in c else None,
        "sweep_fitness": sweep.get("fitness"),
    }


def main() -> int:
    from carm_advisor.cli import benchmark_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--profile-out", help="also save the measured profile JSON here")
    parser.add_argument("--skip-quick", action="store_true", help="do not time --quick mode")
    parser.add_argument("--verify-counters", action="store_true", help="check each benchmark under Nsight Compute")
    parser.add_argument("--exclude", type=benchmark_names, default=(), help="comma-separated benchmark names not to run")
    args = parser.parse_args()

    from carm_advisor.measure.profile import measure_ceilings
    from carm_advisor.power.nvml import open_gpu

    gpu = open_gpu(0)
    start = time.perf_counter()
    # with --verify-counters the profile leaves out benchmarks the counters contradict (undercounted work)
    exclude = args.exclude
    profile = measure_ceilings(device=0, quick=False, gpu=gpu, verify_counters=args.verify_counters, exclude=exclude,
                               command="carm-advise ceilings" + (" --verify-counters" if args.verify_counters else "")
                               + (f" --exclude {','.join(exclude)}" if exclude else "")
                               + " (via benchmarks/ceilings_vs_reference.py)")
    full_s = profile.provenance["wall_s"]   # measuring alone, without the counter check
    quick_s = None
    if not args.skip_quick:
        t0 = time.perf_counter()
        measure_ceilings(device=0, quick=True, gpu=gpu, progress=False, exclude=exclude)
        quick_s = time.perf_counter() - t0
    refs = torch_references(gpu)
    counter_check = None
    if args.verify_counters:
        counter_check = {"rows": profile.extra.get("counter_check")}
    doc = {
        "device": device_record(gpu),
        "driver": profile.device.get("driver"),
        "ceilings": {k: {**c.to_dict(), "label": c.label} for k, c in profile.ceilings.items()},
        "references": refs,
        "ratios": ratios(profile, refs),
        "ceilings_wall_s": full_s,
        "ceilings_quick_wall_s": quick_s,
        "power_model": profile.to_dict().get("power_model"),
        "sweep": profile.extra.get("sweep"),
        "benchmarks": profile.extra.get("benchmarks"),
        "flags": profile.provenance.get("flags"),
        "counter_check": counter_check,
    }
    doc["wall_s"] = time.perf_counter() - start
    path = write(result_path(args.out, doc["device"]["name"] or "gpu", "ceilings"), doc)
    if args.profile_out:
        profile.save(args.profile_out)
    print(f"wrote {path}")
    for k, v in doc["ratios"].items():
        print(f"  {k:28s} {v if v is None else round(v, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
