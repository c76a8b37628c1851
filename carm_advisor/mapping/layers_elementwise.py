"""Normalisation, activations, elementwise merges and keras.ops elementwise operations.

FLOPs per output element (see registry's docstring for the whole convention):
- BatchNormalization 2 (inference, scale and shift folded); LayerNormalization and GroupNormalization
  5 + 1 (scale) + 1 (center); LayerNormalization(rms_scaling=True) 3 + 1; RMS normalisation 4 (square, mean
  add, multiply by the row's rsqrt, multiply by the scale: Keras' RMSNormalization and ops.rms_normalization,
  keras_hub's RMSNormalization (Gemma's x * (1 + scale) alike), LlamaLayerNorm, MistralLayerNormalization and
  the same layer of Mixtral, Qwen, Qwen3, Phi3 and T5; their float32 arithmetic inside a 16-bit model is
  not traffic: x is read and the result written at the compute dtype); ops.layer_normalization as the layer;
  UnitNormalization 3;
  Normalization 2 (subtract mean, divide by std); Rescaling 1, 2 with a non-zero offset;
  ConvNeXt's LayerScale 1; InceptionResNetV2's CustomScaleLayer 2 (x + y * scale).
- Activation(fn): ACTIVATION_FLOPS[fn]; Activation("linear") / Activation(None) returns its input (no
  kernel: 0 FLOPs, 0 bytes) unless its input has another dtype than its own (a mixed model's float32 output
  layer): then a cast, read at the input's dtype and written at its own; ReLU 1 (+1 for max_value, +1 for negative_slope); LeakyReLU, PReLU 2; ELU 4;
  Softmax 5; Softmax called with a mask 5 + 2 (Keras selects the masked scores to a large negative number
  before it and to 0 after it), the mask read at its own dtype.
- keras.ops unary operations: the activation's ACTIVATION_FLOPS where there is one (relu6, leaky_relu, elu,
  selu, softplus, log_softmax ...), else 1 (abs, log, sqrt, rsqrt, reciprocal, sign, square, negative, cos,
  sin, erf, floor, ceil, round, logical_not), clip 2.
- Add/Subtract/Multiply/Maximum/Minimum of n inputs: n - 1; Average: n (n-1 adds, one scale);
  keras.ops binary operations, comparisons (not_equal: Embedding(mask_zero=True)'s mask), logical and/or
  and where (a select) 1. Bool and integer inputs are read at their own dtype; comparisons write bools (1 byte).
- Dropout and other regularisers are the identity at inference: no kernel, 0 FLOPs, 0 bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from carm_advisor.mapping.registry import (
    ACTIVATION_FLOPS,
    activation_flops,
    activation_name,
    dtype_bytes_of,
    elems,
    make_cost,
    no_work_cost,
    register_cost,
    typed_cost,
)
from carm_advisor.mapping.types import OP_DATA, OP_ELEMENTWISE, OP_REDUCTION, LayerCall


def _per_output(call: LayerCall, dtype_bytes: int, flops_per_elem: int, op_class=OP_ELEMENTWISE, notes=""):
    return make_cost(call, dtype_bytes, flops=flops_per_elem * elems(call.output_shapes[0]),
                     op_class=op_class, notes=notes, extra={"flops_per_element": flops_per_elem})


# ---- normalisation --------------------------------------------------------------------------------

@register_cost("BatchNormalization")
def batch_norm_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 2, notes="inference: scale and shift folded, 2 FLOPs per element")


@register_cost("LayerNormalization")
def layer_norm_cost(call, dtype_bytes):
    layer = call.layer
    if getattr(layer, "rms_scaling", False):
        per = 3 + int(bool(layer.scale))
    else:
        per = 5 + int(bool(layer.scale)) + int(bool(layer.center))
    return _per_output(call, dtype_bytes, per, op_class=OP_REDUCTION)


@register_cost("GroupNormalization")
def group_norm_cost(call, dtype_bytes):
    layer = call.layer
    return _per_output(call, dtype_bytes, 5 + int(bool(layer.scale)) + int(bool(layer.center)), OP_REDUCTION)


RMS_NORMS = ("RMSNormalization", "LlamaLayerNorm", "MistralLayerNormalization", "MixtralLayerNormalization",
             "QwenLayerNorm", "Qwen3LayerNorm", "Phi3LayerNorm", "T5LayerNorm")
RMS_NORM_FLOPS = 4


@register_cost(*RMS_NORMS)
def rms_norm_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, RMS_NORM_FLOPS, op_class=OP_REDUCTION,
                       notes="RMS normalisation: square, mean, multiply by the rsqrt, scale")


@register_cost("ops.RMSNorm")
def ops_rms_norm_cost(call, dtype_bytes):
    # rms_normalization(x, scale): a scale tensor is an input of its own (read), a missing one is no multiply
    scaled = len(call.input_shapes) > 1
    return typed_cost(call, dtype_bytes, flops=(RMS_NORM_FLOPS - 1 + int(scaled)) * elems(call.output_shapes[0]),
                      op_class=OP_REDUCTION, notes="RMS normalisation")


@register_cost("ops.LayerNorm")
def ops_layer_norm_cost(call, dtype_bytes):
    # layer_normalization(x, gamma, beta): 5 per element, + 1 for each of gamma and beta given
    per = 5 + len(call.input_shapes) - 1
    if getattr(call.layer, "rms_scaling", False):
        per = 3 + int(len(call.input_shapes) > 1)
    return typed_cost(call, dtype_bytes, flops=per * elems(call.output_shapes[0]), op_class=OP_REDUCTION,
                      notes="layer normalisation")


@register_cost("UnitNormalization")
def unit_norm_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 3, OP_REDUCTION)


@register_cost("Normalization")
def normalization_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 2, notes="(x - mean) / std with the std precomputed per feature")


@register_cost("Rescaling")
def rescaling_cost(call, dtype_bytes):
    offset = np.asarray(call.layer.offset)
    return _per_output(call, dtype_bytes, 1 + int(bool(np.any(offset != 0))))


@register_cost("LayerScale")
def layer_scale_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 1)


@register_cost("CustomScaleLayer")
def custom_scale_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 2)


# ---- activations --------------------------------------------------------------------------------

@register_cost("Activation")
def activation_cost(call, dtype_bytes):
    act = call.layer.activation
    if activation_name(act) == "linear":   # Activation("linear") / Activation(None): returns its input as is ...
        own = str(getattr(call.layer, "compute_dtype", "") or "")
        given = call.input_dtypes[0] if call.input_dtypes else own
        if not own or given == own:
            return no_work_cost(call, "linear activation: returns its input, no kernel runs")
        # ... unless it casts (the float32 output layer of a mixed model, as Keras' mixed-precision guide ends one):
        # read at the input's dtype, written at its own.
        n = elems(call.output_shapes[0])
        cost = make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0,
                         notes=f"linear activation casting {given} to {own}: a copy")
        return dataclasses.replace(cost, bytes_read=elems(call.input_shapes[0]) * dtype_bytes_of(given),
                                   bytes_written=n * dtype_bytes)
    op_class = OP_REDUCTION if activation_name(act) in ("softmax", "log_softmax") else OP_ELEMENTWISE
    notes = "" if activation_name(act) in ACTIVATION_FLOPS else f"activation {activation_name(act)!r} counted as sigmoid"
    return _per_output(call, dtype_bytes, activation_flops(act), op_class, notes)


@register_cost("ReLU")
def relu_cost(call, dtype_bytes):
    layer = call.layer
    per = 1 + int(layer.max_value is not None) + int(bool(layer.negative_slope))
    return _per_output(call, dtype_bytes, per)


@register_cost("LeakyReLU", "PReLU")
def leaky_relu_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, 2)


@register_cost("ELU")
def elu_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, ACTIVATION_FLOPS["elu"])


# Keras' Softmax(inputs, mask): where(mask, inputs, -large) before the softmax, where(mask, outputs, 0) after it
MASK_SELECTS = 2


@register_cost("Softmax")
def softmax_cost(call, dtype_bytes):
    if len(call.input_shapes) < 2:
        return _per_output(call, dtype_bytes, ACTIVATION_FLOPS["softmax"], OP_REDUCTION)
    per = ACTIVATION_FLOPS["softmax"] + MASK_SELECTS
    return typed_cost(call, dtype_bytes, flops=per * elems(call.output_shapes[0]), op_class=OP_REDUCTION,
                      notes="masked softmax: the mask read at its own dtype", extra={"flops_per_element": per})


_OPS_UNARY = {
    "ops.Relu": 1, "ops.Sigmoid": 4, "ops.Tanh": 4, "ops.Silu": 5, "ops.HardSigmoid": 3,
    "ops.HardSilu": 4, "ops.Gelu": 8, "ops.Exp": 1, "ops.Sqrt": 1, "ops.Square": 1, "ops.Negative": 1,
    "ops.Relu6": ACTIVATION_FLOPS["relu6"], "ops.LeakyRelu": ACTIVATION_FLOPS["leaky_relu"],
    "ops.Elu": ACTIVATION_FLOPS["elu"], "ops.Selu": ACTIVATION_FLOPS["selu"], "ops.Softplus": ACTIVATION_FLOPS["softplus"],
    "ops.Absolute": 1, "ops.Log": 1, "ops.Rsqrt": 1, "ops.Reciprocal": 1, "ops.Sign": 1, "ops.Clip": 2,
    "ops.Cos": 1, "ops.Sin": 1, "ops.Erf": 1, "ops.Floor": 1, "ops.Ceil": 1, "ops.Round": 1,
}


def _ops_unary(per: int):
    def cost(call, dtype_bytes):
        return _per_output(call, dtype_bytes, per)
    return cost


for _name, _per in _OPS_UNARY.items():
    register_cost(_name)(_ops_unary(_per))


@register_cost("ops.Softmax", "ops.LogSoftmax")
def ops_softmax_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, ACTIVATION_FLOPS["softmax"], OP_REDUCTION)


# ---- merges and binary operations ---------------------------------------------------------------

@register_cost("Add", "Subtract", "Multiply", "Maximum", "Minimum")
def merge_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, max(len(call.input_shapes) - 1, 0))


@register_cost("Average")
def average_cost(call, dtype_bytes):
    return _per_output(call, dtype_bytes, len(call.input_shapes))


@register_cost("ops.Add", "ops.Subtract", "ops.Multiply", "ops.Divide", "ops.TrueDivide",
               "ops.Maximum", "ops.Minimum", "ops.Power", "ops.Where")
def ops_binary_cost(call, dtype_bytes):
    # where(cond, x, y): a select per output, its bool condition read at 1 byte
    return typed_cost(call, dtype_bytes, flops=elems(call.output_shapes[0]), op_class=OP_ELEMENTWISE,
                      notes="keras.ops elementwise operation", extra={"flops_per_element": 1})


@register_cost("ops.Equal", "ops.NotEqual", "ops.Greater", "ops.GreaterEqual", "ops.Less", "ops.LessEqual",
               "ops.LogicalAnd", "ops.LogicalOr", "ops.LogicalNot")
def ops_comparison_cost(call, dtype_bytes):
    # a bool result, 1 byte an element (Embedding(mask_zero=True)'s ids != 0 reads int ids at their own dtype)
    return typed_cost(call, dtype_bytes, flops=elems(call.output_shapes[0]), op_class=OP_ELEMENTWISE, output_bytes=1,
                      notes="keras.ops comparison: a bool result", extra={"flops_per_element": 1})


# ---- identity at inference ----------------------------------------------------------------------

@register_cost("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
               "GaussianDropout", "AlphaDropout", "ActivityRegularization", "Identity")
def identity_cost(call: LayerCall, dtype_bytes):
    return no_work_cost(call, "identity at inference: no kernel runs")
