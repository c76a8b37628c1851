"""Hardware counters per layer from Nsight Compute (`--counters`): measured FLOPs, bytes and intensity.

How: the model is saved to a temporary `.keras` file and a child Python process (this module's
`main`) rebuilds it, warms every layer up, then runs ONE call of each layer inside an NVTX push/pop
range named ``carm:<index>``. The child runs under

    ncu --clock-control none --nvtx --nvtx-include carm:0/ ... --metrics <METRICS> -o report

so only the kernels of those single calls are profiled (warm-up and setup kernels are not), and
``ncu --import report --csv --page raw --print-units base --print-nvtx-rename kernel`` names every
kernel row after its NVTX range: `parse_ncu_csv` sums the rows per layer.

What is counted (1 multiply-add = 2 FLOPs everywhere):
- Tensor Core FLOPs: sm__ops_path_tensor_src_* (already 2 per multiply-add: on the H200 the BF16 count
  of a VGG16 forward equals the analytic FLOPs, see shared/H200_FACTS.md).
- CUDA-core FLOPs: SASS thread instructions, FMA x 2 + ADD + MUL, per precision (the formula of Nsight
  Compute's own roofline sections).
- Bytes the SMs request (the CARM's intensity): sm__sass_data_bytes_mem_{global,local,shared}; and the
  traffic seen at L1 (l1tex__t_bytes), L2 (lts__t_bytes) and HBM (dram__bytes) for per-level AI.
  ncu flushes caches before each profiled kernel by default, so HBM bytes are a cold-cache figure.

Without `ncu` on PATH, `measure_counters` returns None and callers label intensity "analytic".
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from carm_advisor.errors import MeasurementError
from carm_advisor.mapping.given_shapes import build_on_given_shapes, call_shapes_json, given_shapes_json
from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure import backends
from carm_advisor.measure.backends import nvtx_range
from carm_advisor.measure.layers import layer_runner

RANGE_PREFIX = "carm:"

# Tensor Core paths: counter of FLOPs (2 per multiply-add) by input precision.
TENSOR_METRICS: dict[str, str] = {
    "tensor_fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tensor_bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "tensor_tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "tensor_fp8": "sm__ops_path_tensor_src_fp8.sum",
    "tensor_int8": "sm__ops_path_tensor_src_int8.sum",
}

# CUDA-core paths: (SASS op, FLOPs per counted op).
CUDA_CORE_OPS: dict[str, tuple[tuple[str, int], ...]] = {
    "cuda_fp32": (("ffma", 2), ("fadd", 1), ("fmul", 1)),
    # Half-precision SASS ops are packed pairs (HFMA2/HADD2/HMUL2): the counter counts one per pair. Seen
    # on the H200: our fp16x2_fma benchmark (N HFMA2 = 4N FLOPs) counted 0.5x with 2 FLOPs per hfma.
    "cuda_fp16": (("hfma", 4), ("hadd", 2), ("hmul", 2)),
    "cuda_fp64": (("dfma", 2), ("dadd", 1), ("dmul", 1)),
}


def _sass_metric(op: str) -> str:
    return f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"


SM_BYTES_METRICS: dict[str, str] = {
    "global": "sm__sass_data_bytes_mem_global.sum",
    "local": "sm__sass_data_bytes_mem_local.sum",
    "shared": "sm__sass_data_bytes_mem_shared.sum",
}
LEVEL_BYTES_METRICS: dict[str, str] = {
    "l1": "l1tex__t_bytes.sum",
    "l2": "lts__t_bytes.sum",
    "hbm": "dram__bytes.sum",
}
TIME_METRIC = "gpu__time_duration.sum"

METRICS: tuple[str, ...] = (
    *TENSOR_METRICS.values(),
    *(_sass_metric(op) for ops in CUDA_CORE_OPS.values() for op, _ in ops),
    *SM_BYTES_METRICS.values(),
    *LEVEL_BYTES_METRICS.values(),
    TIME_METRIC,
)


@dataclass
class LayerCounters:
    """Counter totals over every kernel of one layer call. Units: FLOPs, bytes, s."""

    name: str
    kernels: int = 0
    flops_by_path: dict[str, float] = field(default_factory=dict)   # "tensor_bf16", "cuda_fp32", ...
    sm_bytes_by_space: dict[str, float] = field(default_factory=dict)  # "global", "local", "shared"
    level_bytes: dict[str, float] = field(default_factory=dict)      # "l1", "l2", "hbm"
    kernel_time_s: float = 0.0
    missing_metrics: list[str] = field(default_factory=list)         # asked for, not in ncu's output

    @property
    def tensor_flops(self) -> float:
        return sum(v for k, v in self.flops_by_path.items() if k.startswith("tensor_"))

    @property
    def cuda_core_flops(self) -> float:
        return sum(v for k, v in self.flops_by_path.items() if k.startswith("cuda_"))

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.cuda_core_flops

    @property
    def sm_bytes(self) -> float:
        """Bytes the SMs' load/store instructions requested: the CARM's denominator."""
        return sum(self.sm_bytes_by_space.values())

    def ai(self, level: str = "sm") -> float | None:
        """FLOPs per byte requested by the SMs ("sm") or moved at "l1", "l2" or "hbm"; None if no bytes."""
        moved = self.sm_bytes if level == "sm" else self.level_bytes.get(level, 0.0)
        return self.flops / moved if moved > 0 else None

    def to_dict(self) -> dict:
        return {
            "source": "ncu",
            "kernels": self.kernels,
            "flops": self.flops,
            "tensor_flops": self.tensor_flops,
            "cuda_core_flops": self.cuda_core_flops,
            "flops_by_path": dict(self.flops_by_path),
            "sm_bytes": self.sm_bytes,
            "sm_bytes_by_space": dict(self.sm_bytes_by_space),
            "l1_bytes": self.level_bytes.get("l1", 0.0),
            "l2_bytes": self.level_bytes.get("l2", 0.0),
            "hbm_bytes": self.level_bytes.get("hbm", 0.0),
            "ai": self.ai("sm"),
            "ai_l1": self.ai("l1"),
            "ai_l2": self.ai("l2"),
            "ai_hbm": self.ai("hbm"),
            "kernel_time_s": self.kernel_time_s,
            "missing_metrics": list(self.missing_metrics),
        }


# ---- parsing ncu's CSV -------------------------------------------------------------------------

_PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_UNITS_S = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9, "us": 1e-6,
                 "ms": 1e-3, "s": 1.0}


def _unit_scale(unit: str) -> float:
    """Factor to base units (bytes, seconds, counts) for a unit string ncu prints."""
    unit = unit.strip()
    if unit in _TIME_UNITS_S:
        return _TIME_UNITS_S[unit]
    match = re.fullmatch(r"([KMGTP]?)i?(byte|B|inst|flop|op)?s?", unit)
    if match and (match.group(1) or match.group(2)):
        return _PREFIXES[match.group(1)]
    return 1.0  # counts ("", "inst", "cycle", ...) and anything unscaled


def _number(cell: str) -> float | None:
    """ncu's cell text as a number; thousands separators dropped; None for 'n/a' and blanks."""
    text = cell.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "(!) n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _layer_index(kernel_name: str) -> int | None:
    match = re.search(re.escape(RANGE_PREFIX) + r"(\d+)", kernel_name)
    return int(match.group(1)) if match else None


def parse_ncu_csv(text: str, names: Sequence[str]) -> dict[str, LayerCounters]:
    """Per-layer counter totals from `ncu --csv --page raw --print-nvtx-rename kernel` output.

    `names[i]` is the layer measured inside NVTX range ``carm:<i>``. Lines before the CSV header
    (ncu's ==PROF== messages) are skipped; the row after the header holds units when its ID is blank.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise MeasurementError('Expected ncu raw CSV with a header row starting "ID", Received: no such row')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise MeasurementError(f"Expected a 'Kernel Name' column in ncu CSV, Received: columns {header[:12]}")
    scale = [1.0] * len(header)
    body = rows[1:]
    if body and not body[0][col["ID"]].strip():
        scale = [_unit_scale(u) for u in body[0]] + [1.0] * (len(header) - len(body[0]))
        body = body[1:]

    missing = [m for m in METRICS if m not in col]
    results: dict[str, LayerCounters] = {}
    for row in body:
        if len(row) < len(header):
            continue  # a trailing ==PROF== line or an empty line
        index = _layer_index(row[col["Kernel Name"]])
        if index is None:
            raise MeasurementError(
                f"Expected kernels renamed to their NVTX range '{RANGE_PREFIX}<index>' (--print-nvtx-rename "
                f"kernel), Received kernel name: {row[col['Kernel Name']][:80]!r}"
            )
        if index >= len(names):
            raise MeasurementError(f"Expected NVTX range index < {len(names)}, Received: {RANGE_PREFIX}{index}")
        name = names[index]
        entry = results.setdefault(name, LayerCounters(name=name, missing_metrics=list(missing)))

        def value(metric: str, row=row) -> float:
            if metric not in col:
                return 0.0
            number = _number(row[col[metric]])
            return 0.0 if number is None else number * scale[col[metric]]

        entry.kernels += 1
        for path, metric in TENSOR_METRICS.items():
            entry.flops_by_path[path] = entry.flops_by_path.get(path, 0.0) + value(metric)
        for path, ops in CUDA_CORE_OPS.items():
            flops = sum(per_op * value(_sass_metric(op)) for op, per_op in ops)
            entry.flops_by_path[path] = entry.flops_by_path.get(path, 0.0) + flops
        for space, metric in SM_BYTES_METRICS.items():
            entry.sm_bytes_by_space[space] = entry.sm_bytes_by_space.get(space, 0.0) + value(metric)
        for level, metric in LEVEL_BYTES_METRICS.items():
            entry.level_bytes[level] = entry.level_bytes.get(level, 0.0) + value(metric)
        entry.kernel_time_s += value(TIME_METRIC)
    return results


# ---- running ncu -------------------------------------------------------------------------------


def ncu_path() -> str | None:
    return shutil.which("ncu")


def profile_command(ncu: str, report: Path, n_layers: int, child: Sequence[str],
                    metrics: Sequence[str] = METRICS) -> list[str]:
    """The ncu command line that profiles one call per layer (ranges carm:0 .. carm:n-1)."""
    includes = [arg for i in range(n_layers) for arg in ("--nvtx-include", f"{RANGE_PREFIX}{i}/")]
    return [ncu, "--clock-control", "none", "--nvtx", *includes, "--metrics", ",".join(metrics),
            "--export", str(report), "--force-overwrite", *child]


def export_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-nvtx-rename", "kernel"]


def _last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else "(no output)"


def measure_counters(
    model,
    *,
    batch_size: int,
    only: Collection[str] | None = None,
    ncu: str | None = None,
    metrics: Sequence[str] = METRICS,
    timeout_s: float = 900.0,
) -> dict[str, LayerCounters] | None:
    """Counters for one call of every layer (or of `only`), keyed by walker path; None without ncu."""
    import keras

    ncu = ncu or ncu_path()
    if ncu is None:
        return None
    names = [c.path for c in iter_layer_calls(model, batch_size) if only is None or c.path in set(only)]
    if not names:
        return {}
    with tempfile.TemporaryDirectory(prefix="carm-ncu-") as tmp:
        tmpdir = Path(tmp)
        model_path = tmpdir / "model.keras"
        try:
            model.save(model_path)
        except Exception as exc:  # custom layers without get_config cannot be saved
            raise MeasurementError(
                f"Expected a model Keras can save to .keras for the Nsight Compute child process, "
                f"Received {type(exc).__name__}: {exc}"
            ) from exc
        names_path = tmpdir / "layers.json"
        names_path.write_text(json.dumps(names))
        report = tmpdir / "report"
        policy = getattr(getattr(model, "dtype_policy", None), "name", None) or keras.config.dtype_policy().name
        child = [sys.executable, "-m", "carm_advisor.measure.counters", "--model", str(model_path),
                 "--batch-size", str(batch_size), "--layers", str(names_path),
                 "--dtype-policy", policy, "--layout", keras.config.image_data_format()]
        shapes = given_shapes_json(model)   # a subclassed call() of several tensors: the shapes analyze() was given
        if shapes is not None:
            shapes_path = tmpdir / "input_shapes.json"
            shapes_path.write_text(shapes)
            child += ["--input-shapes", str(shapes_path)]
        env = dict(os.environ, KERAS_BACKEND=backends.active_backend())
        profile = subprocess.run(profile_command(ncu, report, len(names), child, metrics), env=env,
                                 capture_output=True, text=True, timeout=timeout_s)
        if profile.returncode != 0:
            raise MeasurementError(
                f"Expected ncu to profile the layers (exit 0), Received exit {profile.returncode}: "
                f"{_last_line(profile.stderr or profile.stdout)}"
            )
        exported = subprocess.run(export_command(ncu, report.with_suffix(".ncu-rep")), capture_output=True,
                                  text=True, timeout=timeout_s)
        if exported.returncode != 0:
            raise MeasurementError(
                f"Expected ncu --import to export CSV (exit 0), Received exit {exported.returncode}: "
                f"{_last_line(exported.stderr)}"
            )
    return parse_ncu_csv(exported.stdout, names)


# ---- the child process (runs under ncu) -------------------------------------------------------


def _child(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one call per layer inside NVTX ranges (under ncu).")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--layers", required=True, help="JSON list of layer paths; index i -> range carm:i")
    parser.add_argument("--dtype-policy", default=None)
    parser.add_argument("--layout", default=None)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--input-shapes", default=None, help="JSON of the call shapes given (walker.given_shapes_json)")
    args = parser.parse_args(argv)

    import keras

    if args.dtype_policy:
        keras.config.set_dtype_policy(args.dtype_policy)
    if args.layout:
        keras.config.set_image_data_format(args.layout)

    framework = backends.get()
    model = keras.saving.load_model(args.model, compile=False)
    names = json.loads(Path(args.layers).read_text())
    shapes = Path(args.input_shapes).read_text() if args.input_shapes else None
    with call_shapes_json(model, shapes):
        build_on_given_shapes(model)   # Keras rebuilt it from the first argument's shape only
        calls = {c.path: c for c in iter_layer_calls(model, args.batch_size)}
    absent = [n for n in names if n not in calls]
    if absent:
        raise MeasurementError(f"Expected the reloaded model to have layers {absent}, Received: {sorted(calls)}")
    with framework.inference_context():
        for index, name in enumerate(names):
            runner = layer_runner(calls[name], training=False, backend=framework.name)
            for _ in range(args.warmup):
                out = runner.fn()
            framework.sync(out if args.warmup else None)
            with nvtx_range(f"{RANGE_PREFIX}{index}"):
                out = runner.fn()
                framework.sync(out)  # the range closes after the layer's kernels were launched and ran
            del runner, out
    return 0


if __name__ == "__main__":
    sys.exit(_child())
