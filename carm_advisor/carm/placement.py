"""Which roof and which slope apply to a layer's work (pure: dtypes and byte counts in, roof keys out).

The Keras side (a mapping LayerCost) is adapted to these in carm_advisor.predict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from carm_advisor.carm.roofline import COMPUTE_PATHS

# What "float32" runs as on each Keras backend by default on Ampere/Hopper, for convolutions and
# matmuls. torch: cudnn.allow_tf32 defaults to True, cuda.matmul.allow_tf32 to False; TensorFlow
# enables TF32 execution by default; XLA (jax) uses TF32 for f32 dots and convs at default precision.
DEFAULT_MATH_MODE: dict[str, dict[str, str]] = {
    "tensorflow": {"conv": "tf32", "matmul": "tf32", "source": "TensorFlow default (TF32 execution enabled)"},
    "torch": {"conv": "tf32", "matmul": "fp32", "source": "torch defaults (cudnn.allow_tf32=True, matmul.allow_tf32=False)"},
    "jax": {"conv": "tf32", "matmul": "tf32", "source": "XLA default precision (TF32 on Ampere and later)"},
    "numpy": {"conv": "fp32", "matmul": "fp32", "source": "numpy backend runs on the CPU"},
}

_TENSOR_CORE_PATH = {
    "bfloat16": "tc_bf16",
    "float16": "tc_fp16",
    "float8_e4m3fn": "tc_fp8_e4m3",
    "float8_e5m2": "tc_fp8_e5m2",
    "int8": "tc_int8",
    "uint8": "tc_int8",
    "float64": "fp64",
}
_CUDA_CORE_PATH = {"float64": "fp64", "float32": "fp32", "float16": "fp16x2", "bfloat16": "fp16x2"}
# Where a profile lacks a path, the nearest one it has (e.g. a profile without FP16-accumulate roofs).
_FALLBACK = {
    "tc_fp16_f16acc": "tc_fp16",
    "tc_fp16": "tc_bf16",
    "tc_bf16": "tc_fp16",
    "tc_fp8_e5m2": "tc_fp8_e4m3",
    "tc_int8": "tc_fp8_e4m3",
    "tc_fp8_e4m3": "tc_bf16",
    "tc_tf32": "fp32",
    "fp16x2": "fp32",
    "fp64": "fp32",
}


def is_convolution(layer_type: str) -> bool:
    return "Conv" in layer_type


def compute_path_for(
    dtype: str, on_tensor_cores: bool, layer_type: str, math_mode: dict[str, str], available: set[str] | None = None
) -> str:
    """The compute roof that work of `dtype` runs on; `on_tensor_cores`: matmul-class work eligible for them."""
    if on_tensor_cores:
        if dtype == "float32":
            mode = math_mode.get("conv" if is_convolution(layer_type) else "matmul", "fp32")
            path = "tc_tf32" if mode == "tf32" else "fp32"
        else:
            path = _TENSOR_CORE_PATH.get(dtype, "fp32")
    else:
        path = _CUDA_CORE_PATH.get(dtype, "fp32")
    return available_path(path, available)


def available_path(path: str, available: set[str] | None) -> str:
    """`path` where the profile has it (`available`; None: every path), else the nearest one it has (_FALLBACK),
    else FP32 on the CUDA cores."""
    if available is None or path in available:
        return path
    seen = {path}
    # The chain has a cycle (tc_fp16 <-> tc_bf16): stop at a repeat and settle on the CUDA-core floor.
    while path not in available and _FALLBACK.get(path) not in (None, *seen):
        path = _FALLBACK[path]
        seen.add(path)
    if path not in available and "fp32" in available:
        path = "fp32"
    return path


def memory_level_for(bytes_: int, l2_usable_bytes: int) -> str:
    """HBM unless the whole working set fits in the usable L2 (its inputs were just written there)."""
    return "l2" if 0 < bytes_ <= l2_usable_bytes else "hbm"


def missing_roof_note(wanted: str, placed: str) -> str:
    """What a layer's notes say where the profile lacks the roof its work runs on (compute_path_for fell back):
    "placed on FP32 (CUDA cores): the profile has no TF32 Tensor Core roof"."""
    return f"placed on {COMPUTE_PATHS.get(placed, placed)}: the profile has no {COMPUTE_PATHS.get(wanted, wanted)} roof"


_MISSING_ROOF = re.compile(r"placed on (.+?): the profile has no (.+?) roof")


def missing_roof(notes: str | None) -> tuple[str, str] | None:
    """(label of the roof a layer was placed on, label of the roof it runs on, which the profile lacks) from its
    notes (missing_roof_note), None for a layer placed on its own roof."""
    match = _MISSING_ROOF.search(notes or "")
    return (match.group(1), match.group(2)) if match else None


# ---- Keras' quantised layers (model.quantize("int8" | "float8")) ---------------------------------------------

# What a quantised Dense or EinsumDense computes in, by (Keras backend, quantisation mode): a Tensor Core path
# of its own ("tc_int8", "tc_fp8_e4m3"), or the float path it falls back to: FLOAT32_MATMUL (a float32 matmul,
# TF32 or IEEE FP32 as the float32 math mode says) or COMPUTE_DTYPE (the matmul at the layer's compute dtype).
FLOAT32_MATMUL = "float32 matmul"
COMPUTE_DTYPE = "compute dtype"
ASSUMED = "assumed: not yet read on a GPU"
# The dtype name a quantised layer's row carries (the calibration's cells are keyed by it).
QUANTIZED_DTYPE = {"int8": "int8", "float8": "float8_e4m3fn"}


@dataclass(frozen=True)
class QuantizedPath:
    """Where one backend runs one quantisation mode's matmul. path: a compute path key, FLOAT32_MATMUL or
    COMPUTE_DTYPE; provenance: "read from the profiler's kernel names on <GPU> (<file>)" or ASSUMED with the Keras
    source read; how: what Keras runs there, said in a fallback's notes; matrix_path: the path of a Dense called
    on a 2-D input whose sizes torch._int_mm takes (torch only; None: the same path)."""

    path: str
    provenance: str
    how: str
    matrix_path: str | None = None


_KERAS = "Keras 3.15 source"
QUANTIZED_PATHS: dict[tuple[str, str], QuantizedPath] = {
    ("torch", "int8"): QuantizedPath(
        FLOAT32_MATMUL, f"{ASSUMED} ({_KERAS}: backend/torch/numpy.py matmul and einsum)",
        "Keras' int8 Dense and EinsumDense on torch cast their int8 operands to float32 (torch has no CUDA integer "
        "matmul but torch._int_mm, which Keras calls for a Dense's 2-D operands alone)", matrix_path="tc_int8"),
    ("torch", "float8"): QuantizedPath(
        COMPUTE_DTYPE, f"{ASSUMED} ({_KERAS}: layers/core/dense.py _float8_call)",
        "Keras' float8 Dense on torch quantises and dequantises its inputs and kernel, then multiplies them in the "
        "compute dtype"),
    ("jax", "int8"): QuantizedPath(
        "tc_int8", f"{ASSUMED} ({_KERAS}: backend/jax/numpy.py matmul and einsum, int8 operands with an int32 "
        "result)",
        "XLA's int8 matmul"),
    ("jax", "float8"): QuantizedPath(
        "tc_fp8_e4m3", f"{ASSUMED} ({_KERAS}: dense.py _float8_call places the quantise-dequantise pairs for "
        "XLA's GEMM rewriter, which fuses them into an FP8 matmul)", "XLA's FP8 matmul"),
    ("tensorflow", "int8"): QuantizedPath(
        "tc_int8", f"{ASSUMED} ({_KERAS}: backend/tensorflow/numpy.py matmul, int8 operands with an int32 result)",
        "TensorFlow's int8 matmul"),
    ("tensorflow", "float8"): QuantizedPath(
        COMPUTE_DTYPE, f"{ASSUMED} ({_KERAS}: dense.py _float8_call; only XLA's GEMM rewriter makes FP8 matmuls "
        "of it, and TensorFlow's default graph execution has none)",
        "Keras' float8 Dense on TensorFlow without XLA multiplies the dequantised operands in the compute dtype"),
}
_MATRIX_ALIGN = 8   # torch._int_mm: the contracted and output sizes multiples of 8, more than 16 rows, K >= 16


def _int_mm_takes(input_shape, units: int | None) -> bool:
    """Whether torch._int_mm takes a Dense's int8 matmul (keras/src/backend/torch/numpy.py can_use_int_matmul)."""
    if input_shape is None or len(input_shape) != 2 or units is None:
        return False
    rows, k = input_shape
    return rows > 16 and k >= 16 and k % _MATRIX_ALIGN == 0 and units % _MATRIX_ALIGN == 0


def quantized_placement(backend: str | None, mode: str, layer_type: str, compute_dtype: str,
                        math_mode: dict[str, str], input_shape=None, units: int | None = None) -> tuple[str, str]:
    """(the compute path a quantised layer's matmul runs on, the note its row carries) from QUANTIZED_PATHS. A
    backend without an entry (the numpy backend: the CPU) computes at the layer's compute dtype."""
    entry = QUANTIZED_PATHS.get((backend or "", mode))
    if entry is None:
        path = compute_path_for(compute_dtype, True, layer_type, math_mode)
        return path, (f"{mode} weights, placed at its compute dtype ({compute_dtype}): no quantised placement is "
                      f"known for the {backend or 'unnamed'} backend")
    wanted = entry.path
    if entry.matrix_path and layer_type == "Dense" and _int_mm_takes(input_shape, units):
        wanted = entry.matrix_path
    if wanted == FLOAT32_MATMUL:
        path, dtype = compute_path_for("float32", True, layer_type, math_mode), "float32"
    elif wanted == COMPUTE_DTYPE:
        path, dtype = compute_path_for(compute_dtype, True, layer_type, math_mode), compute_dtype
    else:
        return wanted, f"{mode} on the {COMPUTE_PATHS.get(wanted, wanted)} ({entry.provenance})"
    weights = "int8 weights and inputs" if mode == "int8" else "float8 (e4m3) inputs and kernel"
    return path, (f"{weights}, computed in {dtype} on the {COMPUTE_PATHS.get(path, path)}: {entry.how} "
                  f"({entry.provenance})")
