"""Which roof and which slope apply to a layer's work (pure: dtypes and byte counts in, roof keys out).

The Keras side (a mapping LayerCost) is adapted to these in carm_advisor.predict.
"""

from __future__ import annotations

import re

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
