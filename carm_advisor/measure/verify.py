"""Do the hardware counters see what each micro-benchmark claims? (`carm-advise ceilings --verify-counters`)

A child process runs every benchmark once, short, inside an NVTX range ``carm:<i>`` under Nsight
Compute (``ncu --clock-control none``); the FLOPs counted on the intended path (Tensor Core by input
precision, or SASS FMA/ADD/MUL per precision) and the bytes counted at the intended level (shared:
sm__sass_data_bytes_mem_shared; L1: l1tex__t_bytes; L2: lts__t_bytes; HBM: dram__bytes) are compared
with the FLOPs and bytes the benchmark table declares for that run. A ratio far from 1 means the
benchmark does not do what its roof says (dead code, a wrong table entry, traffic at another level).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from carm_advisor.carm.fitting import COUNTER_TOLERANCE
from carm_advisor.errors import MeasurementError
from carm_advisor.measure.backends import nvtx_range
from carm_advisor.measure.counters import export_command, ncu_path, parse_ncu_csv, profile_command
from carm_advisor.measure.kernels import KernelLibrary

# CARM key -> counter path of parse_ncu_csv's flops_by_path
FLOP_COUNTER = {
    "tc_bf16": "tensor_bf16", "tc_fp16": "tensor_fp16", "tc_fp16_f16acc": "tensor_fp16", "tc_tf32": "tensor_tf32",
    "tc_fp8_e4m3": "tensor_fp8", "tc_fp8_e5m2": "tensor_fp8", "tc_int8": "tensor_int8",
    "fp32": "cuda_fp32", "fp64": "cuda_fp64", "fp16x2": "cuda_fp16",
}
TOLERANCE = COUNTER_TOLERANCE   # one tolerance for the check and for the roof selection
CALL_S = 0.002   # each profiled kernel: ncu replays it once per metric pass


def _bytes_at(counters, level: str) -> float:
    if level == "shared":
        return counters.sm_bytes_by_space.get("shared", 0.0)
    return counters.level_bytes.get(level, 0.0)


def compare(infos: dict[str, dict], declared: dict[str, dict], counted: dict) -> list[dict]:
    """One row per benchmark: declared vs counted FLOPs on its path and bytes at its level."""
    rows = []
    for name, info in infos.items():
        c, d = counted.get(name), declared.get(name)
        row = {"name": name, "kind": info["kind"], "key": info["carm_key"], "level": info["memory_key"] or None,
               "flops_ratio": None, "bytes_ratio": None, "ok": False, "note": ""}
        if c is None or d is None:
            row["note"] = "not profiled"
            rows.append(row)
            continue
        if info["kind"] in ("compute", "mixed") and d["flops"]:
            path = FLOP_COUNTER.get(info["carm_key"])
            row["flops_ratio"] = c.flops_by_path.get(path, 0.0) / d["flops"] if path else None
        level = info["carm_key"] if info["kind"] == "memory" else info["memory_key"]
        if level and d["bytes"]:
            row["bytes_ratio"] = _bytes_at(c, level) / d["bytes"]
        ratios = [r for r in (row["flops_ratio"], row["bytes_ratio"]) if r is not None]
        row["ok"] = bool(ratios) and all(abs(r - 1) <= TOLERANCE for r in ratios)
        rows.append(row)
    return rows


def verify_with_counters(library_path: str | Path, names: list[str] | None = None, device: int = 0,
                         ncu: str | None = None, timeout_s: float = 600.0) -> list[dict] | None:
    """Profile each benchmark once under ncu; None when ncu is not installed."""
    ncu = ncu or ncu_path()
    if ncu is None:
        return None
    lib = KernelLibrary.load(path=library_path)
    arch = lib.device_info(device).arch
    infos = {b.name: {"kind": b.kind, "carm_key": b.carm_key, "memory_key": b.memory_key}
             for b in lib.benchmarks() if b.runs_on(arch) and (names is None or b.name in names)}
    order = list(infos)
    with tempfile.TemporaryDirectory(prefix="carm-verify-") as tmp:
        tmpdir = Path(tmp)
        declared_path = tmpdir / "declared.json"
        child = [sys.executable, "-m", "carm_advisor.measure.verify", "--child", "--library", str(library_path),
                 "--names", json.dumps(order), "--device", str(device), "--out", str(declared_path)]
        report = tmpdir / "report"
        done = subprocess.run(profile_command(ncu, report, len(order), child), capture_output=True, text=True,
                              timeout=timeout_s, env=dict(os.environ))
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise MeasurementError(f"ncu could not profile the benchmarks (exit {done.returncode}): {last[0][:300]}")
        exported = subprocess.run(export_command(ncu, report.with_suffix(".ncu-rep")), capture_output=True,
                                  text=True, timeout=timeout_s)
        if exported.returncode != 0:
            raise MeasurementError(f"ncu --import failed (exit {exported.returncode})")
        declared = json.loads(declared_path.read_text())
    counted = parse_ncu_csv(exported.stdout, order)
    return compare(infos, declared, counted)


def _child(argv=None) -> int:
    parser = argparse.ArgumentParser(description="run each benchmark once inside NVTX range carm:<i> (under ncu)")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--library", required=True)
    parser.add_argument("--names", required=True)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    lib = KernelLibrary.load(path=args.library)
    declared = {}
    for index, name in enumerate(json.loads(args.names)):
        first = lib.run(name, device=args.device, iterations=0, launches=1, warmup=1)
        iterations = max(1, int(first.iterations * min(1.0, CALL_S / max(first.seconds, 1e-9))))
        lib.run(name, device=args.device, iterations=iterations, launches=1, warmup=0)
        with nvtx_range(f"carm:{index}"):
            r = lib.run(name, device=args.device, iterations=iterations, launches=1, warmup=0)
        declared[name] = {"flops": r.flops, "bytes": r.bytes, "iterations": iterations}
    Path(args.out).write_text(json.dumps(declared))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
