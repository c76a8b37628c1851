"""Which kernels Keras' quantised Dense runs on each backend: the evidence for carm/placement.py QUANTIZED_PATHS.

    python benchmarks/quantized_kernels.py --out benchmarks/results     # on an NVIDIA GPU, with torch and jax
    python benchmarks/quantized_kernels.py --summarize FILE              # the table again, from the file

One Dense (1024 -> 4096, bias) built under mixed_bfloat16 and quantised with `model.quantize(mode)` for mode int8
and float8 (and unquantised, the bfloat16 reference), called on a transformer's 3-D input (8 x 128 x 1024) and on a
2-D one (1024 x 1024: torch calls torch._int_mm for 2-D int8 operands alone), per backend in a child process of
its own (KERAS_BACKEND is read once, at import):
  * torch: the kernels of 5 calls under torch.profiler (CUDA activity), their names, calls and GPU time;
  * jax: the optimised HLO of the jitted call (its GEMM custom calls and Triton GEMM fusions, with their operand
    types), and the kernels of 5 calls under jax.profiler where its trace can be read (tensorboard-plugin-profile
    or xprof installed), else the HLO alone.
Each matmul kernel or GEMM call is classified into the CARM compute path it runs on (kernel_path, hlo_path); the
case's path (its longest matmul kernel's, or its first GEMM call's) is written beside the path QUANTIZED_PATHS
assumes, so an entry can be changed from "assumed: not yet read on a GPU" to "read from the profiler's kernel
names on <GPU> (<file>)". TensorFlow is not needed (nor run). Writes
<gpu>-quantized-kernels-<date>.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from carm_advisor.carm.placement import DEFAULT_MATH_MODE, QUANTIZED_PATHS, quantized_placement

SCHEMA = "carm-advisor/quantized-kernels/1"
BACKENDS = ("torch", "jax")
MODES = (None, "int8", "float8")        # None: the unquantised bfloat16 Dense, the reference
POLICY = "mixed_bfloat16"               # the policy trials/space.py builds the quantised precisions under
UNITS, FEATURES = 4096, 1024
SHAPES = {"3d": (8, 128, FEATURES), "2d": (1024, FEATURES)}
CALLS = 5

# Kernel names -> the CARM compute path, the first pattern that matches (an FP8 or int8 name may also say bf16:
# its output type, so those come first). cuBLAS/CUTLASS name their operand types ("i8i8", "s8s8", "e4m3", "bf16");
# "i16832" / "i8816" are the int8 MMA shapes of Ampere's IMMA kernels, "s1688" / "s16816...tf32" TF32's, "h16816"
# FP16's; "sgemm" is the CUDA-core FP32 GEMM.
_KERNEL_PATHS = (
    ("tc_fp8_e4m3", re.compile(r"e4m3|f8f8|fp8|float8", re.IGNORECASE)),
    ("tc_fp8_e5m2", re.compile(r"e5m2", re.IGNORECASE)),
    ("tc_int8", re.compile(r"i8i8|s8s8|int8|imma|igemm|i16832|i8816|_i8_|_s8_", re.IGNORECASE)),
    ("tc_bf16", re.compile(r"bf16|bfloat16", re.IGNORECASE)),
    ("tc_tf32", re.compile(r"tf32|s1688|s16816", re.IGNORECASE)),
    ("tc_fp16", re.compile(r"f16|fp16|h1688|h16816|half", re.IGNORECASE)),
    ("fp32", re.compile(r"sgemm|gemv|f32f32_f32f32", re.IGNORECASE)),
)
MATMUL_KERNEL = re.compile(r"gemm|gemv|matmul|xmma|cutlass|nvjet|wgmma|_mma_|splitk", re.IGNORECASE)
UNREAD = "matmul (operand type not in its name)"


def kernel_path(name: str) -> str | None:
    """The compute path a GPU kernel runs on, from its name; None for a kernel that is no matmul (an
    elementwise, reduction or copy kernel); UNREAD for a matmul whose name does not say its operand type."""
    if not MATMUL_KERNEL.search(name):
        return None
    for path, pattern in _KERNEL_PATHS:
        if pattern.search(name):
            return path
    return UNREAD


# An HLO instruction that is a GEMM: a cuBLAS / cuBLASLt custom call, a dot (inside a Triton GEMM fusion's
# computation, after any convert of its operands), or the call of a Triton GEMM fusion (by the fusion's operands).
_HLO_OP = re.compile(r"\s(custom-call|fusion|dot)\(")
_HLO_TYPE = re.compile(r"\b(f8e4m3fn|f8e5m2|f8e4m3|s8|u8|bf16|f16|f32|s32)\[")
_HLO_TYPE_PATH = {"f8e4m3fn": "tc_fp8_e4m3", "f8e4m3": "tc_fp8_e4m3", "f8e5m2": "tc_fp8_e5m2", "s8": "tc_int8",
                  "u8": "tc_int8", "bf16": "tc_bf16", "f16": "tc_fp16", "f32": "float32 (TF32 or FP32)"}


def _gemm_kind(line: str) -> str | None:
    if 'custom_call_target="__cublas' in line:
        return "cublas"
    if "__triton_gemm" in line and " fusion(" in line:
        return "triton fusion"
    if re.search(r" = [^=]*\sdot\(", line):
        return "dot"
    return None


def _operands(line: str) -> str:
    """The argument list of an HLO instruction (custom-call, fusion or dot): from its "(" to the matching ")"."""
    match = _HLO_OP.search(line.partition(" = ")[2])
    if match is None:
        return ""
    rest = line.partition(" = ")[2]
    start, depth = match.end() - 1, 0
    for i in range(start, len(rest)):
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        if depth == 0:
            return rest[start + 1:i]
    return rest[start + 1:]


_HLO_DEF = re.compile(r"^\s*(?:ROOT\s+)?(%[\w.\-]+)\s*=\s*\(?\s*([a-z][a-z0-9]*)\[")
_HLO_NAME = re.compile(r"%[\w.\-]+")


def hlo_types(text: str) -> dict[str, str]:
    """{instruction name: the element type of its result (a tuple's first)} of an HLO module's text."""
    return {m.group(1): m.group(2) for m in map(_HLO_DEF.match, text.splitlines()) if m}


def hlo_path(line: str, types: dict[str, str] | None = None) -> str | None:
    """The compute path of one optimised-HLO instruction that is a GEMM (None for any other): by its operands'
    element types, written beside them or found by name in `types` (hlo_types: newer XLA prints bare names), the
    narrowest first (an FP8 GEMM takes f8 operands and its scales in f32)."""
    if _gemm_kind(line) is None:
        return None
    operands = _operands(line)
    found = set(_HLO_TYPE.findall(operands)) | {types[n] for n in _HLO_NAME.findall(operands) if n in (types or {})}
    for t in ("f8e4m3fn", "f8e4m3", "f8e5m2", "s8", "u8", "bf16", "f16", "f32"):
        if t in found:
            return _HLO_TYPE_PATH[t]
    return UNREAD


def hlo_gemms(text: str) -> list[dict]:
    """Every GEMM instruction of an optimised HLO module's text: {"instruction", "kind", "path"}."""
    types = hlo_types(text)
    out = []
    for line in text.splitlines():
        path = hlo_path(line, types)
        if path is not None:
            out.append({"instruction": line.strip()[:400], "kind": _gemm_kind(line), "path": path})
    return out


def case_path(kernels: list[dict], gemms: list[dict]) -> str | None:
    """The path a case computes on: its longest matmul kernel's (by GPU time), else its first GEMM call's."""
    matmuls = [k for k in kernels if k.get("path")]
    if matmuls:
        return max(matmuls, key=lambda k: k.get("time_us") or 0.0)["path"]
    # a GEMM call or a dot says its operand types; a Triton fusion's own operands may be converted inside it
    ordered = [g for g in gemms if g.get("kind") != "triton fusion"] + [g for g in gemms
                                                                         if g.get("kind") == "triton fusion"]
    return ordered[0]["path"] if ordered else None


def table_path(backend: str, mode: str | None, shape) -> str:
    """What carm/placement.py places the case on, at the backend's default float32 math mode."""
    math_mode = DEFAULT_MATH_MODE[backend]
    if mode is None:
        return "tc_bf16"
    return quantized_placement(backend, mode, "Dense", "bfloat16", math_mode, tuple(shape), UNITS)[0]


# ---- one case, in a child process (KERAS_BACKEND set) -----------------------------------------------------

def _layer(mode: str | None, shape):
    import keras

    keras.mixed_precision.set_global_policy(POLICY)
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape[1:])
    model = keras.Model(inputs, keras.layers.Dense(UNITS, name="dense")(inputs))
    if mode is not None:
        model.quantize(mode)
    layer = model.get_layer("dense")
    policy = layer.dtype_policy.name
    return model, layer, policy


def _torch_case(mode, shape) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    model, _, policy = _layer(mode, shape)
    x = torch.randn(*shape, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            model(x, training=False)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                model(x, training=False)
            torch.cuda.synchronize()
    kernels = []
    for e in prof.key_averages():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        time_us = getattr(e, "self_device_time_total", None)
        if time_us is None:
            time_us = getattr(e, "self_cuda_time_total", 0.0)
        kernels.append({"name": e.key, "calls": e.count, "time_us": float(time_us), "path": kernel_path(e.key)})
    return {"policy": policy, "kernels": kernels, "hlo_gemms": [], "device": torch.cuda.get_device_name(0),
            "versions": {"torch": torch.__version__}}


def _jax_kernels(fn, args) -> list[dict] | str:
    """Kernel names and GPU times of CALLS calls under jax.profiler, read from its trace with xprof's converter;
    a one-line reason where the trace cannot be read here."""
    import tempfile

    import jax

    try:
        from xprof.convert import raw_to_tool_data  # xprof, or tensorboard-plugin-profile below
    except ImportError:
        try:
            from tensorboard_plugin_profile.convert import raw_to_tool_data
        except ImportError:
            return "jax.profiler's trace not read: neither xprof nor tensorboard-plugin-profile is installed"
    folder = tempfile.mkdtemp(prefix="quantized-kernels-")
    with jax.profiler.trace(folder):
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    traces = sorted(Path(folder).rglob("*.xplane.pb"))
    if not traces:
        return "jax.profiler wrote no trace"
    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(traces[-1])], "trace_viewer", {})
        events = json.loads(data).get("traceEvents", [])
    except Exception as exc:   # the converter's API differs between versions: the HLO stands alone then
        return f"jax.profiler's trace not read: {type(exc).__name__}: {str(exc)[:200]}"
    by_name: dict[str, dict] = {}
    for ev in events:
        name, dur = ev.get("name"), ev.get("dur")
        if ev.get("ph") != "X" or not name or dur is None or ev.get("pid") is None:
            continue
        if not (MATMUL_KERNEL.search(name) or "fusion" in name or "kernel" in name.lower()):
            continue
        k = by_name.setdefault(name, {"name": name, "calls": 0, "time_us": 0.0, "path": kernel_path(name)})
        k["calls"] += 1
        k["time_us"] += float(dur)
    return list(by_name.values())


def _jax_case(mode, shape) -> dict:
    import jax
    import jax.numpy as jnp

    _, layer, policy = _layer(mode, shape)
    trainable = [v.value for v in layer.trainable_variables]
    non_trainable = [v.value for v in layer.non_trainable_variables]

    def call(tv, ntv, x):
        return layer.stateless_call(tv, ntv, x, training=False)[0]

    fn = jax.jit(call)
    x = jax.random.normal(jax.random.PRNGKey(0), shape, dtype=jnp.float32)
    text = fn.lower(trainable, non_trainable, x).compile().as_text()
    jax.block_until_ready(fn(trainable, non_trainable, x))
    kernels = _jax_kernels(fn, (trainable, non_trainable, x))
    note = kernels if isinstance(kernels, str) else None
    return {"policy": policy, "kernels": [] if note else kernels, "kernels_note": note, "hlo_gemms": hlo_gemms(text),
            "device": jax.devices()[0].device_kind, "versions": {"jax": jax.__version__}}


def run_case(backend: str, mode: str | None, rank: str) -> dict:
    import keras

    shape = SHAPES[rank]
    result = (_torch_case if backend == "torch" else _jax_case)(mode, shape)
    result["versions"]["keras"] = keras.__version__
    return result


# ---- the parent: every case, the file --------------------------------------------------------------------

def _child(backend: str, mode: str | None, rank: str, timeout_s: float) -> dict:
    env = {**os.environ, "KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [sys.executable, __file__, "--case", backend, mode or "none", rank]
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {tail[:300]}"}
    return json.loads(lines[-1])


def collect(backends=BACKENDS, timeout_s: float = 300.0) -> dict:
    cases, device, versions = [], None, {}
    for backend in backends:
        for mode in MODES:
            for rank, shape in SHAPES.items():
                got = _child(backend, mode, rank, timeout_s)
                device = device or got.get("device")
                versions.update(got.get("versions") or {})
                measured = case_path(got.get("kernels") or [], got.get("hlo_gemms") or [])
                expected = table_path(backend, mode, shape)
                cases.append({"backend": backend, "mode": mode or "none (bfloat16 reference)", "input_shape": shape,
                              "units": UNITS, "policy": got.get("policy"), "kernels": got.get("kernels") or [],
                              "kernels_note": got.get("kernels_note"), "hlo_gemms": got.get("hlo_gemms") or [],
                              "compute_path": measured, "table_path": expected,
                              "agrees": measured == expected if measured else None, "error": got.get("error")})
    table = {f"{b}/{m}": {"path": e.path, "provenance": e.provenance, "matrix_path": e.matrix_path}
             for (b, m), e in QUANTIZED_PATHS.items()}
    return {"schema": SCHEMA, "device": {"name": device}, "versions": versions, "cases": cases,
            "table_at_run": table,
            "method": f"one Dense {FEATURES}->{UNITS} under {POLICY}, model.quantize(mode); torch: torch.profiler "
                      f"CUDA kernels of {CALLS} calls; jax: optimised HLO GEMMs and jax.profiler kernels"}


def summarize(doc: dict) -> str:
    rows = [f"{'backend':8} {'mode':28} {'input':16} {'measured path':26} {'table path':14} agrees",
            "-" * 104]
    for c in doc["cases"]:
        shape = "x".join(str(d) for d in c["input_shape"])
        measured = c["compute_path"] or (c.get("error") or "no matmul found")
        rows.append(f"{c['backend']:8} {c['mode']:28} {shape:16} {measured[:26]:26} {c['table_path']:14} "
                    f"{c['agrees']}")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for <gpu>-quantized-kernels-<date>.json")
    ap.add_argument("--summarize", metavar="FILE", help="print the table of a result file")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default: torch,jax)")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per case (default 300)")
    ap.add_argument("--case", nargs=3, metavar=("BACKEND", "MODE", "RANK"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        backend, mode, rank = args.case
        print(json.dumps(run_case(backend, None if mode == "none" else mode, rank)))
        return 0
    if args.summarize:
        try:
            doc = json.loads(Path(args.summarize).read_text())
        except (OSError, ValueError) as exc:
            print(f"error: cannot read {args.summarize}: {exc}", file=sys.stderr)
            return 2
        print(summarize(doc))
        return 0
    if not args.out:
        print("error: expected --out FOLDER (or --summarize FILE)", file=sys.stderr)
        return 2
    backends = tuple(b for b in args.backends.split(",") if b)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        print(f"error: --backends takes {', '.join(BACKENDS)}, received: {', '.join(unknown)}", file=sys.stderr)
        return 2
    from _common import result_path, write

    doc = collect(backends, args.timeout_s)
    path = write(result_path(args.out, doc["device"]["name"] or "unknown-gpu", "quantized-kernels"), doc)
    print(summarize(doc))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
