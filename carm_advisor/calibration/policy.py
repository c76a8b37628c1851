"""Calibrated prediction: what a backend achieves, as a learned fraction of the CARM bound.

efficiency = bound_time_s / measured_time_s (1 = at the roof; 0.25 = four times slower than the roofs allow),
learned per cell (backend, layer class, compute dtype, size bucket) from recorded measurements; the size bucket is
the half-decade of the bound time (small layers reach a smaller share of the roof). A layer's calibrated time is its
bound / the efficiency of the first cell of at least MIN_SAMPLES samples that Calibration.estimate finds (its own,
then nearer sizes, other dtypes, similar classes, the same family, another backend's scaled, the backend pooled);
each row records which (row.calibration). The whole model is not the sum of its layers measured alone
(calibration/whole.py: one fit per execution).

This module holds the tables the cells are keyed by and the constants of the forms in use; each constant says the
measurement that decided it (files under benchmarks/results, INDEX.md; docs/design/calibration.md has the tables).
The calibrations that ship (SHIPPED) are written by benchmarks/fit_calibration.py from one GPU model's records; on a
GPU, every measured analysis adds its samples to the cache (profiles/cache.py) and the next analysis learns from them.
"""

from __future__ import annotations

import math

MIN_SAMPLES = 3
# Layer times that include a per-call dispatch (each layer jitted alone).
DISPATCHED_EXECUTIONS = ("jit",)
# Layer times of a layer replayed alone from a CUDA graph (torch layer windows): one graph launch per call
# from the host, a floor of ~5-6 us on the H200 whatever the layer's work (replay_floor_s).
REPLAYED_EXECUTIONS = ("cuda_graph",)
# Whole-model executions predicted from the CARM bound (compiled: the layers alone are no guide, each of them paying
# a dispatch the compiled model pays once): jax jit and torch.compile ("torch.compile" samples come from measured
# tuning trials, fit_calibration.py --studies: VGG16 only).
BOUND_EXECUTIONS = ("jit", "torch.compile")
# Compiled executions that pay the measured GPU-side launch floor per kernel (is_kernel: convolutions, dense,
# pooling; XLA fuses the rest into them), from benchmarks/launch_floor.py (the calibration's provenance
# "kernel_floor"), not a fitted number: leave one model out over VGG16, ResNet50, MobileNetV2 at batch 64, jit
# whole-model time 14.9% -> 11.3% (notes of nvidia-h200-prediction-accuracy-2026-12-04.json).
KERNEL_FLOOR_EXECUTIONS = ("jit",)
# A layer jitted alone and called in a loop takes per call its in-model GPU time and the host's dispatch (its class's
# floor) combined as (gpu ** p + host ** p) ** (1 / p), p = 2: per-layer power 9.8% against 11.6% with the cell
# efficiencies, 10.5% at p = 1 and 10.0% at max(gpu, host) (n=2591; later jax layers 10.5%, 16.0%, 16.9%, 10.2%;
# nvidia-h200-power-model-jitted-layer-wall-time-2026-12-04.json.xz). Without a jit whole-model fit the cells stand.
DISPATCH_OVERLAP_NORM = 2.0
# The copies Keras' torch backend makes around a channels_last layer (keras/src/backend/torch/nn.py, Keras 3.15): a
# convolution copies its input to NCHW and then to torch's channels_last memory format (two read+write passes), a
# (non-global) pooling layer makes the first copy only. They are in a layer's calibrated time and taken off a measured
# one before its efficiency is learned (calibration/table.py says what one pass takes, and the evidence).
LAYOUT_COPY_PASSES = {"conv": 2, "pool": 1}
_LAYOUT_COPY_POOLS = frozenset({"MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D",
                                "AveragePooling2D", "AveragePooling3D"})


def layout_copy_passes(backend: str | None, layer_type: str, data_format: str | None) -> int:
    """Read+write passes over its input the Keras backend makes around a layer for its data format (0: none)."""
    if backend != "torch" or data_format != "channels_last":
        return 0
    return copy_passes_of(layer_type) if "Conv" in layer_type or layer_type in _LAYOUT_COPY_POOLS else 0


def copy_passes_of(layer_type_or_class: str) -> int:
    """How many copy passes a layer with layout copies makes, by its layer class (a Keras type or a Sample's
    layer_class: pooling 1, a convolution 2). The one place layout_copy_passes and Calibration.copies_time_s decide it."""
    return LAYOUT_COPY_PASSES["pool" if layer_class(layer_type_or_class) == "pooling" else "conv"]


def layout_copy_bytes(backend: str | None, layer_type: str, data_format: str | None, input_bytes: int) -> int:
    """The memory traffic of those copies: each pass (layout_copy_passes) reads and writes the layer's input."""
    return 2 * layout_copy_passes(backend, layer_type, data_format) * input_bytes


NEAR_SIZES = 2          # size buckets (a decade of bound time) a borrowed cell may be away at first
# The calibrations that ship, by the GPU model (Profile.name, NVML's name) whose records they were fitted on.
SHIPPED = {"NVIDIA H200": "nvidia_h200_calibration.json",
           "NVIDIA H100 80GB HBM3": "nvidia_h100_80gb_hbm3_calibration.json"}
DEFAULT_SHIPPED = "NVIDIA H200"

# Layer classes pooled together: their efficiency depends on what they do, not on their Keras name.
_CLASS_OF = {
    **{t: "pooling" for t in ("MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D",
                              "AveragePooling2D", "AveragePooling3D", "GlobalAveragePooling1D",
                              "GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D",
                              "GlobalMaxPooling2D", "GlobalMaxPooling3D")},
    **{t: "elementwise" for t in ("Activation", "ReLU", "Add", "Multiply", "Subtract", "Average", "Maximum",
                                  "Minimum", "LeakyReLU", "ELU", "PReLU", "Rescaling", "Normalization",
                                  "Dropout", "HardSwish", "Hardswish", "LayerScale")},
    **{t: "data-movement" for t in ("ZeroPadding2D", "ZeroPadding1D", "Cropping2D", "Flatten", "Reshape",
                                    "Concatenate", "Permute", "UpSampling2D")},
}
# An unseen class borrows its kin's cell before any other class of its family: normalizations that read
# a tensor and write it scaled (LayerNormalization adds a per-sample reduction) and the depthwise half of
# a separable convolution, by what the layers do.
SIMILAR_CLASS = {"normalization": "BatchNormalization", "GroupNormalization": "BatchNormalization",
                 "UnitNormalization": "BatchNormalization", "SeparableConv2D": "Conv2D",
                 "SeparableConv1D": "Conv1D", "DepthwiseConv1D": "DepthwiseConv2D", "attention": "EinsumDense",
                 "Einsum": "EinsumDense", "Matmul": "Dense", "rotary": "elementwise", "softmax": "elementwise"}
# Layers whose work is a matmul on Tensor Cores or CUDA cores: XLA fuses the others into them. Attention counts
# here: its projections, QK^T and AV are matmuls, and its softmax is fused with them where the backend has a
# fused attention kernel.
MATMUL_CLASSES = frozenset({"Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose", "Dense", "EinsumDense",
                            "DepthwiseConv2D", "SeparableConv2D", "MultiHeadAttention", "DotProductAttention",
                            "CachedMultiHeadAttention", "Einsum", "Matmul", "attention"})
# The classes a transformer's own layers fall in, by what the layer does whatever its library names it
# (keras_hub's LlamaLayerNorm and GemmaRMSNorm are normalizations, its ReversibleEmbedding a gather): each is
# learned from its own records (benchmarks/transformer_models.py), apart from the CNN layers' classes.
_SUFFIX_CLASS = (("RotaryEmbedding", "rotary"), ("Attention", "attention"), ("LayerNormalization", "normalization"),
                 ("LayerNorm", "normalization"), ("RMSNormalization", "normalization"), ("RMSNorm", "normalization"),
                 ("Embedding", "embedding"))


def is_kernel(layer_type: str) -> bool:
    """Whether a compiled (XLA) model runs this layer as a kernel of its own: matmul-class and pooling layers
    (elementwise, normalization and activation layers are fused into them)."""
    return layer_type in MATMUL_CLASSES or layer_class(layer_type) == "pooling"


def layer_class(layer_type: str) -> str:
    """The calibration class of a Keras layer type (or a keras.ops operation's name): its pooled class where it
    has one, a transformer class by its name's suffix, else the type itself."""
    if layer_type in _CLASS_OF:
        return _CLASS_OF[layer_type]
    if layer_type == "Softmax":
        return "softmax"
    return next((cls for suffix, cls in _SUFFIX_CLASS if layer_type.endswith(suffix)), layer_type)


def size_bucket(bound_time_s: float) -> int:
    return math.floor(2 * math.log10(bound_time_s)) if bound_time_s > 0 else -99


def family(cls: str) -> str:
    return "matmul" if cls in MATMUL_CLASSES else "memory"


# Layer times that are the GPU's work: a layer timed eagerly alone is mostly Python dispatch on torch.
GPU_TIME_EXECUTIONS = ("cuda_graph", "profiled", "jit")


def whole_model_execution(backend: str) -> str:
    """How a user's `model(x)` runs: eagerly on torch (Python dispatch per layer), jitted on jax."""
    return {"torch": "eager", "jax": "jit", "tensorflow": "eager"}.get(backend, "eager")
