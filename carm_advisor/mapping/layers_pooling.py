"""Pooling, global pooling and data movement (reshaping, padding, cropping, concatenation, resizing).

- Max/Average pooling 1D/2D/3D: prod(pool_size) FLOPs per output element (compares or adds; the
  average's final scale is not counted, as TensorFlow's profiler does not).
- Global pooling: 1 FLOP per input element.
- Reshape and Flatten are views (no kernel in any backend): 0 FLOPs, 0 bytes.
- Permute, RepeatVector, ZeroPadding, Cropping, Concatenate, nearest UpSampling: copies, 0 FLOPs,
  input bytes read and output bytes written.
- Interpolating resizes per output element: bilinear 7 (4 multiplies, 3 adds), bicubic and others 31
  (16 multiplies, 15 adds).
- keras.ops Mean/Sum/Max/Min: 1 FLOP per input element; ops.reshape, ops.expand_dims and ops.squeeze views;
  ops.transpose, ops.concatenate, ops.stack, ops.pad, ops.tile and ops.cast copies.
"""

from __future__ import annotations

from carm_advisor.mapping.registry import dtype_bytes_of, elems, make_cost, no_work_cost, register_cost, typed_cost
from carm_advisor.mapping.types import OP_DATA, OP_REDUCTION, LayerCall

INTERPOLATION_FLOPS = {"nearest": 0, "bilinear": 7}
_OTHER_INTERPOLATION_FLOPS = 31


@register_cost("MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
               "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "BasePooling")
def pooling_cost(call: LayerCall, dtype_bytes: int):
    window = elems(call.layer.pool_size)
    return make_cost(call, dtype_bytes, flops=window * elems(call.output_shapes[0]), op_class=OP_REDUCTION,
                     extra={"flops_per_element": window, "data_format": getattr(call.layer, "data_format", None)})


@register_cost("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
               "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "BaseGlobalPooling",
               "ops.Mean", "ops.Sum", "ops.Max", "ops.Min")
def global_pooling_cost(call: LayerCall, dtype_bytes: int):
    return make_cost(call, dtype_bytes, flops=elems(call.input_shapes[0]), op_class=OP_REDUCTION)


@register_cost("Reshape", "Flatten", "ops.Reshape", "ops.ExpandDims", "ops.Squeeze")
def view_cost(call: LayerCall, dtype_bytes: int):
    if getattr(call.layer, "data_format", None) == "channels_first" and len(call.input_shapes[0]) > 2:
        # Keras' Flatten moves channels last before flattening (weights stay layout-independent): a copy.
        return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, notes="channels_first Flatten transposes: a copy")
    return no_work_cost(call, "a view of its input: no data moves")


@register_cost("Permute", "RepeatVector", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D",
               "Cropping1D", "Cropping2D", "Cropping3D", "Concatenate", "ops.Transpose", "ops.Concatenate",
               "ops.Stack", "ops.Pad", "ops.Tile")
def copy_cost(call: LayerCall, dtype_bytes: int):
    return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, notes="copy: bytes only")


@register_cost("ops.Cast")
def cast_cost(call: LayerCall, dtype_bytes: int):
    # read at the input's dtype (a float one at the costed dtype), written at the dtype cast to
    target = str(getattr(call.layer, "dtype", "") or "")
    return typed_cost(call, dtype_bytes, flops=0, op_class=OP_DATA,
                      output_bytes=dtype_bytes_of(target) if target else None, notes=f"cast to {target}: a copy")


def _interpolation_flops(interpolation: str) -> int:
    return INTERPOLATION_FLOPS.get(interpolation, _OTHER_INTERPOLATION_FLOPS)


@register_cost("UpSampling1D", "UpSampling2D", "UpSampling3D", "Resizing")
def resize_cost(call: LayerCall, dtype_bytes: int):
    interpolation = getattr(call.layer, "interpolation", "nearest")
    per = _interpolation_flops(interpolation)
    return make_cost(call, dtype_bytes, flops=per * elems(call.output_shapes[0]),
                     op_class=OP_DATA if per == 0 else OP_REDUCTION,
                     notes=f"{interpolation} interpolation, {per} FLOPs per output element",
                     extra={"flops_per_element": per})
