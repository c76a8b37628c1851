"""GPU self-test: build for the visible arch, run every benchmark briefly, print rates beside torch
references. Exploratory numbers (the ceilings runner records the official ones).
Usage (repo root): python3 kernels/selftest.py [--quick]
"""

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The GPU machine has no keras: import only the two measure modules, not the package's __init__.
import types  # noqa: E402

for _name, _sub in (("carm_advisor", "carm_advisor"), ("carm_advisor.measure", "carm_advisor/measure")):
    _m = types.ModuleType(_name)
    _m.__path__ = [os.path.join(ROOT, _sub)]
    sys.modules[_name] = _m

from carm_advisor.measure.build import build_kernels, detect_arch  # noqa: E402
from carm_advisor.measure.kernels import KernelLibrary  # noqa: E402

TARGET_S = float(os.environ.get("CARM_SELFTEST_TARGET_S", "0.05"))


def calibrated(lib, b, **kw):
    r = lib.run(b.name, warmup=1, **kw)
    scale = max(1.0, TARGET_S / max(r.seconds, 1e-6))
    best = None
    for _ in range(2):
        r = lib.run(b.name, iterations=int(r.iterations * scale) if scale > 1 else r.iterations, warmup=0, **kw)
        scale = 1.0
        if best is None or r.seconds / r.work_items < best.seconds / best.work_items:
            best = r
    # the table is the only source of FLOPs and bytes: check the C totals against it
    assert abs(best.flops - best.work_items * b.flops_per_item) <= 1e-6 * max(1, best.flops), b.name
    assert abs(best.bytes - best.work_items * b.bytes_per_item) <= 1e-6 * max(1, best.bytes), b.name
    return best


def torch_refs():
    import torch

    refs = {}
    n = 8192

    def bench(fn, flops):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            fn()
        e.record()
        torch.cuda.synchronize()
        return flops * 10 / (s.elapsed_time(e) * 1e-3)

    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        refs[f"matmul_{name}_tflops"] = bench(lambda: a @ b, 2 * n**3) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    refs["matmul_tf32_tflops"] = bench(lambda: a @ b, 2 * n**3) / 1e12
    try:
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        refs["scaled_mm_fp8_tflops"] = bench(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), 2 * n**3) / 1e12
    except Exception as exc:  # noqa: BLE001
        refs["scaled_mm_fp8_tflops"] = f"failed: {exc}"
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    refs["copy_4gib_tbs"] = bench(lambda: dst.copy_(src), 2 * src.numel()) / 1e12
    del a, b, src, dst
    torch.cuda.empty_cache()
    return refs


def main():
    quick = "--quick" in sys.argv
    t0 = time.time()
    arch = detect_arch() or "sm_90a"
    res = build_kernels(arch=arch, with_tf=False, progress=print,
                        cache_root=__import__("pathlib").Path(os.environ.get("OUT", "/tmp")) / "carm_cache")
    print(f"build {time.time() - t0:.1f}s -> {res.lib_path}")
    lib = KernelLibrary.load(res.lib_path)
    dev = lib.device_info()
    print(dev)
    rows = []
    for b in lib.benchmarks():
        if not b.runs_on(dev.arch) or (quick and b.kind == "mixed"):
            continue
        configs = [2, 3] if "wgmma" in b.name else [0]
        for cfg in configs:
            try:
                r = calibrated(lib, b, config=cfg)
            except Exception as exc:  # noqa: BLE001
                rows.append((b.name, cfg, "ERR", str(exc)[:80]))
                continue
            ai = b.flops_per_byte
            rows.append((b.name, cfg, f"{r.flops_per_s / 1e12:9.2f} TF/s" if b.flops_per_item else "",
                         f"{r.bytes_per_s / 1e12:7.3f} TB/s" if b.bytes_per_item else "",
                         f"AI={ai:.2f}" if ai else "", f"{r.seconds * 1e3:7.2f} ms", f"ws={r.size_bytes / 2**20:.1f}MiB",
                         f"chk={r.checksum:.4g}", f"grid={r.grid_blocks}x{r.block_threads}"))
    try:
        refs = torch_refs()
    except Exception as exc:  # noqa: BLE001
        refs = {"torch": f"failed: {exc}"}
    for row in rows:
        print("  ".join(str(x) for x in row))
    for k, v in refs.items():
        print(f"REF {k}: {v if isinstance(v, str) else f'{v:.1f}' if v > 20 else f'{v:.3f}'}")
    print(f"wall {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
