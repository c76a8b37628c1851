"""What XLA runs for one jitted Keras call (jax): every kernel of ONE call with its GPU time and HBM bytes,
from Nsight Compute, split into matmul-class kernels (cuDNN / cuBLAS / CUTLASS calls) and XLA's own fusions,
beside the CARM bounds of the model's layers (matmul-class and the rest, the rest also with each run of fused
elementwise/normalization layers counted at its largest member: chained_bound_s).

It answers what the whole-model fit (calibration/whole.py, jit: bound / e) cannot tell apart: whether a model
runs faster than its CARM bound because its matmuls beat VGG16's efficiency or because XLA's fusions move less
than the layers' bytes.

    KERAS_BACKEND=jax python benchmarks/xla_kernel_breakdown.py --model resnet50 --precision mixed_bfloat16 \
        --batch-size 256 --out results.json           # on a GPU with ncu on PATH
    python benchmarks/xla_kernel_breakdown.py --summarize results.json   # the table again, from the file

ncu runs with --clock-control none (the GPU's clocks are never set) and --cache-control none (the kernels see
the caches the previous kernel left, as in the unprofiled call); ncu serialises kernels, so the sum of kernel
times is the GPU's work without launch gaps, beside the unprofiled wall time of a call measured first.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RANGE = "xla_call"
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
# Kernel names of library matmul/convolution calls (cuDNN, cuBLAS, cuBLASLt, CUTLASS); XLA's own fusions
# are named after their HLO ("loop_add_fusion", "input_reduce_fusion", "fusion_12", ...).
# XLA's own Triton matmuls are "triton_gemm_*" / "gemm_fusion_*" (matmuls too); "convert" is no convolution.
MATMUL_KERNEL = re.compile(r"gemm|gemv|splitk|cublas|xmma|cutlass|cudnn|convolve|conv2d|depthwise|nvjet|implicit|"
                           r"fprop|wgmma|^sm\d\d_", re.IGNORECASE)


def is_matmul_kernel(name: str) -> bool:
    return bool(MATMUL_KERNEL.search(name))


def parse_kernels(text: str) -> list[dict]:
    """Kernels from `ncu --import R --csv --page raw --print-units base`: name, time_s, dram bytes. ncu's
    ==PROF== lines before the header are skipped; the units row (blank ID) scales each column to seconds and
    bytes (counters._unit_scale)."""
    from carm_advisor.measure.counters import _unit_scale

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit('error: expected ncu raw CSV with a header row starting "ID"; got none')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    col = {name: i for i, name in enumerate(rows[0])}
    missing = [m for m in ("Kernel Name", *METRICS) if m not in col]
    if missing:
        raise SystemExit(f"error: expected ncu columns {missing}; got {rows[0][:8]}")

    body = rows[1:]
    units = body[0] if body and not body[0][col["ID"]].strip() else []
    scale = {m: _unit_scale(units[col[m]]) if col[m] < len(units) else 1.0 for m in METRICS}

    def number(row, metric):
        text = row[col[metric]].strip().replace(",", "")
        try:
            return float(text) * scale[metric]
        except ValueError:
            return 0.0

    out = []
    for row in body:
        if len(row) < len(rows[0]) or not row[col["ID"]].strip():
            continue   # the units row, trailing lines
        out.append({"name": row[col["Kernel Name"]][:160], "time_s": number(row, METRICS[0]),
                    "dram_bytes": number(row, METRICS[1]) + number(row, METRICS[2])})
    return out


def chained_bound_s(rows) -> float:
    """The CARM bound a compiler saves by fusing each run of consecutive elementwise, activation and normalization
    layers (model order) into one kernel: per run, its members' bounds less its largest (the fused kernel reads the
    run's inputs and writes its output once, about its largest member's traffic). An unknown layer neither joins nor
    ends a run."""
    from carm_advisor.calibration import SIMILAR_CLASS, layer_class

    def fusable(layer_type: str) -> bool:
        return layer_class(layer_type) == "elementwise" or "BatchNormalization" in (layer_type,
                                                                                    SIMILAR_CLASS.get(layer_type))

    total, run = 0.0, []
    for r in list(rows) + [None]:
        if r is not None and getattr(r, "known", True) and fusable(r.type) and getattr(r, "predicted_time_s", None):
            run.append(r.predicted_time_s)
            continue
        if r is not None and not getattr(r, "known", True):
            continue
        total += sum(run) - max(run, default=0.0)
        run = []
    return total


def carm_bounds(model_name: str, precision: str, batch_size: int) -> dict:
    """The CARM bounds of the model's layers (the embedded profile, jax's math mode) as the calibration sums
    them: matmul-class, the rest, what fused runs save (chained_bound_s), and the rest's bytes."""
    from carm_advisor.calibration import MATMUL_CLASSES, bound_sums, bounded_rows
    from carm_advisor.carm.placement import DEFAULT_MATH_MODE
    from carm_advisor.models.loader import load_model
    from carm_advisor.predict import Predictor
    
    model, _ = load_model(model_name, precision=precision)
    rows = Predictor(None, DEFAULT_MATH_MODE["jax"], backend="jax").rows(model, batch_size)
    matmul_s, other_s = bound_sums(rows)
    other = [r for r in bounded_rows(rows) if r.type not in MATMUL_CLASSES]
    return {"matmul_bound_s": matmul_s, "other_bound_s": other_s, "chained_saving_s": chained_bound_s(rows),
            "other_bytes": sum(r.bytes or 0 for r in other),
            "matmul_bytes": sum(r.bytes or 0 for r in bounded_rows(rows) if r.type in MATMUL_CLASSES)}


def summary(doc: dict) -> dict:
    kernels = doc["kernels"]
    mm = [k for k in kernels if is_matmul_kernel(k["name"])]
    rest = [k for k in kernels if not is_matmul_kernel(k["name"])]
    out = {"kernels": len(kernels), "matmul_kernels": len(mm), "other_kernels": len(rest),
           "matmul_kernel_time_s": sum(k["time_s"] for k in mm), "other_kernel_time_s": sum(k["time_s"] for k in rest),
           "matmul_kernel_dram_bytes": sum(k["dram_bytes"] for k in mm),
           "other_kernel_dram_bytes": sum(k["dram_bytes"] for k in rest)}
    bounds = doc.get("carm") or {}
    if bounds.get("matmul_bound_s"):
        out["matmul_kernel_time_over_bound"] = out["matmul_kernel_time_s"] / bounds["matmul_bound_s"]
    if bounds.get("other_bound_s"):
        out["other_kernel_time_over_bound"] = out["other_kernel_time_s"] / bounds["other_bound_s"]
        chained = bounds["other_bound_s"] - bounds.get("chained_saving_s", 0.0)
        out["other_kernel_time_over_chained_bound"] = out["other_kernel_time_s"] / chained if chained > 0 else None
    if bounds.get("other_bytes"):
        out["other_kernel_dram_over_carm_bytes"] = out["other_kernel_dram_bytes"] / bounds["other_bytes"]
    return out


def table(doc: dict) -> str:
    s, b = doc["summary"], doc.get("carm") or {}
    ms = lambda x: f"{x * 1e3:.3f} ms" if x is not None else "-"   # noqa: E731
    ratio = lambda x: f"{x:.2f}" if x is not None else "-"   # noqa: E731
    return "\n".join([
        f"{doc['model']} jax {doc['precision']} batch {doc['batch_size']}: one call, unprofiled wall "
        f"{ms(doc.get('wall_s'))} (median of {doc.get('wall_calls', 0)} calls); {s['kernels']} kernels under ncu",
        "| part | kernels | kernel time (measured) | CARM bound | measured / bound | HBM bytes (measured) |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| matmul class | {s['matmul_kernels']} | {ms(s['matmul_kernel_time_s'])} | {ms(b.get('matmul_bound_s'))} | "
        f"{ratio(s.get('matmul_kernel_time_over_bound'))} | {s['matmul_kernel_dram_bytes'] / 1e9:.2f} GB |",
        f"| the rest (XLA fusions) | {s['other_kernels']} | {ms(s['other_kernel_time_s'])} | {ms(b.get('other_bound_s'))} "
        f"(fused runs at their largest: {ms((b.get('other_bound_s') or 0) - (b.get('chained_saving_s') or 0))}) | "
        f"{ratio(s.get('other_kernel_time_over_bound'))} (chained {ratio(s.get('other_kernel_time_over_chained_bound'))}) "
        f"| {s['other_kernel_dram_bytes'] / 1e9:.2f} GB (CARM: {(b.get('other_bytes') or 0) / 1e9:.2f} GB) |",
    ])


def child(args) -> int:
    """Warm up; then time `--time-calls` calls (unprofiled), or run one call inside NVTX range RANGE (under ncu)."""
    import keras  # noqa: F401

    from carm_advisor.measure import backends
    from carm_advisor.measure.backends import nvtx_range
    from carm_advisor.measure.execution import inference_fn
    from carm_advisor.measure.inputs import model_inputs
    from carm_advisor.models.loader import load_model

    model, _ = load_model(args.model, precision=args.precision)
    call, _ = inference_fn(model, model_inputs(model, args.batch_size), "jax")
    sync = backends.get("jax").sync
    for _ in range(3):
        out = call()
    sync(out)
    if args.time_calls:
        times = []
        for _ in range(args.time_calls):
            t = time.perf_counter()
            sync(call())
            times.append(time.perf_counter() - t)
        times.sort()
        Path(args.time_out).write_text(json.dumps({"wall_s": times[len(times) // 2], "wall_calls": len(times)}))
        return 0
    with nvtx_range(RANGE):
        out = call()
        sync(out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", help="JSON to write (kernels, CARM bounds, summary)")
    parser.add_argument("--summarize", metavar="FILE", help="print the table of a written file (no GPU)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--time-calls", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--time-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.summarize:
        doc = json.loads(Path(args.summarize).read_text())
        doc["summary"] = summary(doc)
        print(table(doc))
        return 0
    if args.child:
        return child(args)
    if os.environ.get("KERAS_BACKEND") != "jax":
        raise SystemExit("error: run with KERAS_BACKEND=jax (the breakdown is of a jitted call)")
    ncu = __import__("shutil").which("ncu")
    if ncu is None:
        raise SystemExit("error: ncu (Nsight Compute) is not on PATH: the kernel breakdown needs a GPU with it")
    me = [sys.executable, str(Path(__file__).resolve()), "--child", "--model", args.model, "--precision",
          args.precision, "--batch-size", str(args.batch_size)]
    with tempfile.TemporaryDirectory(prefix="xla-ncu-") as tmp:
        timing = Path(tmp) / "wall.json"
        # one persistent compilation cache: the profiled child loads the executable the timed child compiled (its
        # autotuned cuDNN/cuBLAS/Triton kernels), not a fresh compile that may pick others
        env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(Path(tmp) / "jax-cache"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
                   XLA_PYTHON_CLIENT_PREALLOCATE="false")
        run = subprocess.run(me + ["--time-calls", "20", "--time-out", str(timing)], capture_output=True, text=True,
                             env=env)
        if run.returncode:
            raise SystemExit(f"error: the timing child failed: {(run.stderr or run.stdout)[-300:]}")
        report = Path(tmp) / "report"
        run = subprocess.run([ncu, "--clock-control", "none", "--cache-control", "none", "--nvtx", "--nvtx-include",
                              f"{RANGE}/", "--metrics", ",".join(METRICS), "--export", str(report),
                              "--force-overwrite", *me], capture_output=True, text=True, env=env)
        if run.returncode:
            raise SystemExit(f"error: ncu failed (exit {run.returncode}): {(run.stderr or run.stdout)[-300:]}")
        exported = subprocess.run([ncu, "--import", str(report.with_suffix(".ncu-rep")), "--csv", "--page", "raw",
                                   "--print-units", "base", "--print-kernel-base", "demangled"],
                                  capture_output=True, text=True)
        if exported.returncode:
            raise SystemExit(f"error: ncu --import failed (no kernel in range {RANGE}?): {exported.stderr[-300:]}")
        kernels = parse_kernels(exported.stdout)
        if not kernels:
            raise SystemExit(f"error: ncu profiled no kernel inside NVTX range {RANGE} (was the call launched from "
                             "another thread than the range?)")
        doc = {"model": args.model, "precision": args.precision, "batch_size": args.batch_size,
               **json.loads(timing.read_text()), "kernels": kernels,
               "command": " ".join(["KERAS_BACKEND=jax", "python", "benchmarks/xla_kernel_breakdown.py",
                                    *(argv if argv is not None else sys.argv[1:])]),
               "ncu": "--clock-control none --cache-control none, metrics " + ",".join(METRICS)}
    doc["carm"] = carm_bounds(args.model, args.precision, args.batch_size)
    doc["summary"] = summary(doc)
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
