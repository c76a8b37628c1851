"""Bandwidth of the memory benchmarks over a sweep of working-set sizes, beside torch copy_ of the same
sizes, in one run: the plateaus show where each level ends (L1, the usable L2, HBM), and which L2
benchmark and working set give the L2 roof. Writes benchmarks/results/<gpu>-size-sweep-<date>.json.

    python benchmarks/size_sweep.py [--out DIR] [--rows l2_read_bulk,hbm_read] [--min-mib 1] [--max-mib 512]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import device_record, result_path, write  # noqa: E402

DEFAULT_ROWS = ("l2_read_bulk", "l2_read_partition", "l2_read_partition_u8", "hbm_read")


def sizes_bytes(min_mib: float, max_mib: float) -> list[float]:
    out, s = [], min_mib
    while s <= max_mib:
        out.append(s * 2**20)
        s *= 2
    return out


def sweep_row(lib, name: str, sizes: list[float], call_s: float, repeats: int, progress) -> list[dict]:
    from carm_advisor.measure.ceilings import _calibrate

    points = []
    for size in sizes:
        iterations, first = _calibrate(lib, name, 0, call_s, size)
        rates = [first.bytes / first.seconds]
        for _ in range(repeats - 1):
            r = lib.run(name, size=size, iterations=iterations, warmup=0)
            rates.append(r.bytes / r.seconds)
        points.append({"size_bytes": first.size_bytes, "bytes_per_s": statistics.median(rates),
                       "spread": (max(rates) - min(rates)) / statistics.median(rates), "repeats": len(rates),
                       "grid_blocks": first.grid_blocks, "block_threads": first.block_threads})
        progress()
    return points


def torch_copy(sizes: list[float], call_s: float, repeats: int, progress) -> list[dict]:
    import torch

    points = []
    for size in sizes:
        elems = int(size) // 2 // 4          # the copy's working set: source + destination = size
        src = torch.rand(elems, device="cuda")
        dst = torch.empty_like(src)
        # n copies captured in one CUDA graph: small copies are not timed as Python launch overhead
        n = int(min(2000, max(1, call_s * 3e12 / (2.0 * elems * 4))))
        dst.copy_(src)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        rates = []
        for _ in range(repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            rates.append(2.0 * elems * 4 * n / (start.elapsed_time(stop) * 1e-3))
        points.append({"size_bytes": 2.0 * elems * 4, "bytes_per_s": statistics.median(rates),
                       "spread": (max(rates) - min(rates)) / statistics.median(rates), "repeats": repeats})
        del src, dst, graph
        progress()
    torch.cuda.empty_cache()
    return points


def _cell(point: dict, asked_bytes: float) -> str:
    rate = f"{point['bytes_per_s'] / 1e12:.2f}"
    ran = point["size_bytes"]
    return rate if abs(ran - asked_bytes) <= 0.01 * asked_bytes else f"{rate} ({ran / 2**20:.3g} MiB)"


def main(argv=None) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from carm_advisor.measure.build import detect_arch
    from carm_advisor.measure.kernels import KernelLibrary
    from carm_advisor.power.nvml import open_gpu

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    ap.add_argument("--min-mib", type=float, default=1.0)
    ap.add_argument("--max-mib", type=float, default=512.0)
    ap.add_argument("--call-s", type=float, default=0.05)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    started = time.perf_counter()
    lib = KernelLibrary.load(arch=detect_arch())
    gpu = open_gpu(0)
    sizes = sizes_bytes(args.min_mib, args.max_mib)
    rows = [r for r in args.rows.split(",") if r]
    results, clocks = {}, []
    with Progress() as bar:
        task = bar.add_task("size sweep", total=len(sizes) * (len(rows) + 1))
        for name in rows:
            bar.update(task, description=f"size sweep: {name}")
            results[name] = sweep_row(lib, name, sizes, args.call_s, args.repeats, lambda: bar.advance(task))
            clocks.append(gpu.sm_clock_mhz())
        bar.update(task, description="size sweep: torch copy_")
        try:
            references = {"torch_copy": torch_copy(sizes, args.call_s, args.repeats, lambda: bar.advance(task))}
        except Exception as exc:  # no torch with CUDA here: the sweep stands alone
            references = {"torch_copy": {"error": f"{type(exc).__name__}: {exc}"}}
    table = Table(title="bandwidth by working set (TB/s; in brackets the set a row ran where it is not the one asked)")
    table.add_column("MiB asked", justify="right")
    series = {**results, **{k: v for k, v in references.items() if isinstance(v, list)}}
    for name in series:
        table.add_column(name, justify="right")
    for i, size in enumerate(sizes):
        # a row may run a larger set than asked (ld.global rows round up to one step of every thread)
        table.add_row(f"{size / 2**20:g}", *(_cell(pts[i], size) for pts in series.values()))
    Console().print(table)
    dev = lib.device_info(0)
    best = {name: max(pts, key=lambda p: p["bytes_per_s"]) for name, pts in results.items()}
    path = write(result_path(args.out, dev.name, "size-sweep"), {
        "device": device_record(gpu), "driver": gpu.driver_version(), "l2_bytes": dev.l2_bytes,
        "sm_clock_mhz_after_rows": clocks, "rows": results, "references": references,
        "best": {k: {"size_bytes": v["size_bytes"], "bytes_per_s": v["bytes_per_s"]} for k, v in best.items()},
        "wall_s": time.perf_counter() - started})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
