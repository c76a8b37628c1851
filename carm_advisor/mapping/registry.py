"""Cost-model registry: Keras layer class -> analytic cost of one call.

Conventions (every figure is for one call of a layer on a whole batch)
-----------------------------------------------------------------------
FLOPs
- 1 multiply-add = 2 FLOPs. Convolutions and Dense: 2 * MACs, + 1 FLOP per output element for the
  bias when ``use_bias``, + the fused activation's FLOPs per output element (table below). Padded zeros
  of ``same`` padding are counted as MACs (the kernel computes them; TensorFlow's profiler counts them).
- Activation FLOPs per element (:data:`ACTIVATION_FLOPS`): linear 0; relu 1 (the compare; TensorFlow's
  profiler counts 0); relu6 2; leaky_relu / PReLU 2; transcendental ones a stated small constant:
  sigmoid 4, tanh 4, exponential 1, softplus 3, softsign 3, elu 4, selu 5, silu/swish 5 (sigmoid + 1),
  gelu 8 (the erf form and the tanh approximation alike; keras_hub's gelu_approximate), quick_gelu 6 (CLIP's
  x * sigmoid(1.702 x): scale, sigmoid, multiply), mish 9, hard_sigmoid 3, hard_silu/hard_swish 4, softmax /
  log_softmax 5 (max, sub, exp, sum, div; as TensorFlow's profiler counts Softmax).
- Elementwise merges: 1 FLOP per output element per binary op (Add of n inputs: n-1); Average n.
- Pooling: the window size per output element (max compares or average adds); global pooling 1 per
  input element.
- Normalisation at inference: BatchNormalization 2 per element (scale and shift folded); Layer- and
  GroupNormalization 5 per element (mean add, subtract, square, variance add, multiply by rsqrt) + 1
  for ``scale`` + 1 for ``center`` (7 with both); UnitNormalization 3; Normalization (preprocessing) 2;
  Rescaling 1 (+1 with a non-zero offset).
- Dropout, SpatialDropout, GaussianNoise and friends are the identity at inference: 0 FLOPs, 0 bytes.

Bytes (compulsory traffic at the compute dtype)
- bytes_read = every distinct input tensor (one passed twice, ``mha(x, x)``, is one tensor in memory:
  read once) + every floating-point weight of the layer (kernel, bias, BN
  statistics ...), all at the compute dtype (under mixed precision the weights are read cast); in a traced
  call() an op's constant operands are inputs too (a weight used in keras.ops directly, ViT's class token);
  bytes_written = every output tensor. Integer inputs (Embedding indices) are read at their own dtype.
- Reshape and Flatten are views in every Keras backend: 0 FLOPs, 0 bytes (op_class "none").
  Permute, RepeatVector, Concatenate, ZeroPadding, Cropping, UpSampling (nearest) copy: 0 FLOPs, their
  input and output bytes. Embedding reads the gathered rows, not the whole table.
- Attention and recurrent layers count only inputs, weights and outputs; the attention score matrix
  they usually materialise is reported in ``extra["intermediate_bytes"]``.

Tensor Cores
- ``tensor_core=True`` for matmul-class work (Conv1D/2D/3D incl. grouped, transposed convs, Dense,
  EinsumDense, Dot, MultiHeadAttention, ops.dot_product_attention, ReversibleEmbedding's reverse matmul,
  CLIP/SigLIP heads, LSTM/GRU/SimpleRNN) when the compute dtype is float16,
  bfloat16, float32 (as TF32 where the backend allows it; the CARM decides the path), int8 or float8.
  DepthwiseConv and grouped convolutions with one input channel per group run on CUDA cores in cuDNN:
  ``tensor_core=False`` with a note. SeparableConv is split into two LayerCosts ``name:depthwise``
  (CUDA cores) and ``name:pointwise`` (Tensor Cores), the honest roofline placement of each half.

A cost function is ``fn(call: LayerCall, dtype_bytes: int) -> LayerCost | list[LayerCost]``; register
it with ``@register_cost("Conv2D", ...)``. Lookup walks the class MRO, so a user subclass of Conv2D is
costed as Conv2D. ``keras.ops`` operations are registered as ``"ops.<Class>"`` (``ops.Add``), apart
from layers of the same class name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

import numpy as np

from carm_advisor.errors import MappingError
from carm_advisor.mapping.types import OP_NONE, LayerCall, LayerCost

CostFn = Callable[[LayerCall, int], "LayerCost | list[LayerCost]"]

_REGISTRY: dict[str, CostFn] = {}
OPS_PREFIX = "ops."

# FLOPs per element of each activation; see the module docstring.
ACTIVATION_FLOPS: dict[str, int] = {
    "linear": 0, "relu": 1, "relu6": 2, "leaky_relu": 2, "sigmoid": 4, "tanh": 4, "exponential": 1,
    "softplus": 3, "softsign": 3, "elu": 4, "selu": 5, "silu": 5, "swish": 5, "gelu": 8, "gelu_approximate": 8,
    "quick_gelu": 6, "mish": 9,
    "hard_sigmoid": 3, "hard_silu": 4, "hard_swish": 4, "softmax": 5, "log_softmax": 5,
}

# Compute dtypes a Tensor Core path exists for (float32 through TF32).
TENSOR_CORE_DTYPES = frozenset(
    {"float16", "bfloat16", "float32", "int8", "uint8", "float8_e4m3fn", "float8_e5m2"}
)

_ODD_DTYPE_BYTES = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "int4": 1, "uint4": 1}


def dtype_bytes_of(dtype: str) -> int:
    """Bytes per element of a dtype name ("float32" 4, "bfloat16" 2, "int8" 1, ...)."""
    name = str(dtype)
    if name in _ODD_DTYPE_BYTES:
        return _ODD_DTYPE_BYTES[name]
    try:
        return int(np.dtype(name).itemsize)
    except TypeError as exc:
        raise MappingError(f"Expected a numeric dtype name, received: {dtype!r}") from exc


def register_cost(*class_names: str) -> Callable[[CostFn], CostFn]:
    """Register ``fn`` as the cost model of the Keras classes named (``"ops.X"`` for keras.ops X)."""
    if not class_names:
        raise ValueError("Expected at least one class name, received none")

    def decorate(fn: CostFn) -> CostFn:
        for name in class_names:
            _REGISTRY[name] = fn
        return fn

    return decorate


def _key(cls) -> str:
    import keras

    if issubclass(cls, keras.layers.Layer):
        return cls.__name__
    return OPS_PREFIX + cls.__name__


def lookup(op) -> CostFn | None:
    """The cost function for a layer or operation, found along its class MRO; None if unknown."""
    import keras

    for cls in type(op).__mro__:
        if cls in (keras.layers.Layer, keras.Model, keras.Operation, object):
            break  # generic bases say nothing about the cost
        fn = _REGISTRY.get(_key(cls))
        if fn is not None:
            return fn
    return None


def registered_names() -> list[str]:
    return sorted(_REGISTRY)


# ---- shared by the layer families ---------------------------------------------------------------

def elems(shape: Iterable[int]) -> int:
    return int(math.prod(shape))


def weight_elems(layer) -> int:
    """Floating-point weight elements (kernel, bias, BN statistics; not RNG seeds or counters)."""
    total = 0
    for var in getattr(layer, "weights", []):
        if "float" in str(var.dtype):
            total += elems(var.shape)
    return total


def activation_flops(activation) -> int:
    """FLOPs per element of a Keras activation (function, name or None)."""
    if activation is None:
        return 0
    name = activation if isinstance(activation, str) else getattr(activation, "__name__", "")
    return ACTIVATION_FLOPS.get(name, ACTIVATION_FLOPS["sigmoid"])


def activation_name(activation) -> str:
    if activation is None:
        return "linear"
    return activation if isinstance(activation, str) else getattr(activation, "__name__", "?")


def make_cost(
    call: LayerCall,
    dtype_bytes: int,
    *,
    flops: int,
    op_class: str,
    tensor_core: bool = False,
    weights: int | None = None,
    read_elems: int | None = None,
    written_elems: int | None = None,
    name: str | None = None,
    notes: str = "",
    extra: dict | None = None,
) -> LayerCost:
    """A LayerCost with the default byte rule: inputs + weights read, outputs written."""
    if weights is None:
        weights = weight_elems(call.layer) if hasattr(call.layer, "weights") else 0
    if read_elems is None:  # a tensor passed twice (Add()([x, x])) is one tensor, read once
        read_elems = sum(elems(call.input_shapes[i]) for i in call.distinct_inputs())
    if written_elems is None:
        written_elems = sum(elems(s) for s in call.output_shapes)
    return LayerCost(
        name=name or call.path,
        type=type(call.layer).__name__,
        flops=int(flops),
        bytes_read=int((read_elems + weights) * dtype_bytes),
        bytes_written=int(written_elems * dtype_bytes),
        compute_dtype="",  # map_model fills the dtype in
        op_class=op_class,
        tensor_core=tensor_core,
        params=int(weights),
        input_shapes=call.input_shapes,
        output_shapes=call.output_shapes,
        notes=notes,
        extra=dict(extra or {}),
    )


def _is_float(dtype: str) -> bool:
    return "float" in str(dtype)


def typed_cost(call: LayerCall, dtype_bytes: int, *, flops: int, op_class: str, output_bytes: int | None = None,
               notes: str = "", extra: dict | None = None) -> LayerCost:
    """A weight-free LayerCost whose non-float inputs (bool masks, integer ids) are read at their own dtype, float
    ones at the costed dtype (``dtype_bytes``), and outputs written at ``output_bytes`` per element (a bool result:
    1; a cast: its target's) or the costed dtype."""
    cost = make_cost(call, dtype_bytes, flops=flops, op_class=op_class, weights=0, notes=notes, extra=extra)
    dtypes = list(call.input_dtypes) + [""] * len(call.input_shapes)
    read = sum(elems(call.input_shapes[i]) * (dtype_bytes if not dtypes[i] or _is_float(dtypes[i])
                                               else dtype_bytes_of(dtypes[i]))
               for i in call.distinct_inputs())
    written = sum(elems(s) for s in call.output_shapes) * (dtype_bytes if output_bytes is None else output_bytes)
    return dataclasses.replace(cost, bytes_read=int(read), bytes_written=int(written))


def no_work_cost(call: LayerCall, notes: str) -> LayerCost:
    return make_cost(call, 0, flops=0, op_class=OP_NONE, weights=0, notes=notes)


def unknown_cost(call: LayerCall, compute_dtype: str) -> LayerCost:
    cls = type(call.layer).__name__
    return LayerCost(
        name=call.path, type=cls, flops=0, bytes_read=0, bytes_written=0, compute_dtype=compute_dtype,
        op_class=OP_NONE, tensor_core=False, input_shapes=call.input_shapes,
        output_shapes=call.output_shapes, known=False,
        notes=f"no cost model for {cls}: FLOPs and bytes unknown (not zero)",
    )


def cost_of_call(call: LayerCall, compute_dtype: str) -> list[LayerCost] | None:
    """Cost of one call at ``compute_dtype``; None when no cost model is registered."""
    fn = lookup(call.layer)
    if fn is None:
        return None
    result = fn(call.with_constants(), dtype_bytes_of(compute_dtype))
    costs = [result] if isinstance(result, LayerCost) else list(result)
    eligible = compute_dtype in TENSOR_CORE_DTYPES
    return [
        dataclasses.replace(
            c,
            compute_dtype=compute_dtype,
            tensor_core=c.tensor_core and eligible,
            extra={**c.extra, **({} if eligible or not c.tensor_core else
                                 {"tensor_core_ineligible_dtype": compute_dtype})},
        )
        for c in costs
    ]


def layer_compute_dtype(call: LayerCall) -> str:
    policy = getattr(call.layer, "dtype_policy", None)
    dtype = getattr(policy, "compute_dtype", None)
    if dtype:
        return str(dtype)
    floats = [d for d in call.input_dtypes if "float" in d]
    return floats[0] if floats else "float32"


# The version of what map_model gives for a model: a predicted tune study stores it in its fingerprint, so one
# computed by an older cost model is not resumed with new values beside its old ones. Raise it whenever the
# costs of a model change. 2: a precision keeps layers pinned to another policy at theirs (2026-12-07). 3: a
# linear Activation layer (ConvNeXt's 18 *_identity layers) does no work; it was costed as a read and a write;
# keras.ops comparisons, where, pad, stack, tile, cast, expand_dims, squeeze and more unary ops are costed.
# 4: transformers (keras_hub backbones): masking is costed in attention and a masked Softmax; RMS norms, rotary and
# position embeddings, fused dot-product attention, the reverse (logits) ReversibleEmbedding, slicing, gathers and
# repeats are costed; a cast to the dtype its input has does no work; a traced call's constant operands are read.
COST_MODEL_VERSION = 4


def policy_name_of(layer) -> str | None:
    """The name of the dtype policy a layer computes under; a quantized policy's source policy
    (int8_from_mixed_bfloat16 -> mixed_bfloat16: its layer computes at that policy's dtype); None for an
    operation with no policy (a keras.ops node)."""
    policy = getattr(layer, "dtype_policy", None)
    name = getattr(policy, "name", None)
    if name and getattr(policy, "quantization_mode", None):
        name = name.split("_from_", 1)[-1]
    return name or None


def policy_compute_dtype(name: str) -> str | None:
    """The compute dtype of the Keras dtype policy named `name`; None where Keras knows no such policy."""
    import keras

    try:
        return str(keras.dtype_policies.get(name).compute_dtype)
    except Exception:  # noqa: BLE001 - an unknown name: no operation moves with it
        return None
