"""Pooling, global pooling and data movement (reshaping, padding, cropping, concatenation, resizing).

- Max/Average pooling 1D/2D/3D: prod(pool_size) FLOPs per output element (compares or adds; the
  average's final scale is not counted, as TensorFlow's profiler does not).
- Global pooling: 1 FLOP per input element.
- Reshape and Flatten are views (no kernel in any backend): 0 FLOPs, 0 bytes.
- Permute, RepeatVector, ZeroPadding, Cropping, Concatenate, nearest UpSampling: copies, 0 FLOPs,
  input bytes read and output bytes written.
- Interpolating resizes per output element: bilinear 7 (4 multiplies, 3 adds), bicubic and others 31
  (16 multiplies, 15 adds).
- keras.ops Mean/Sum/Max/Min/Prod/Cumsum/All/Any/Argmax/Argmin: 1 FLOP per input element (all/any read bools
  and write bools, argmax/argmin write int32 indices); ops.reshape, ops.expand_dims and ops.squeeze views;
  ops.transpose, ops.moveaxis, ops.swapaxes, ops.concatenate, ops.stack, ops.split, ops.pad, ops.tile, ops.repeat
  (grouped-query attention's key/value heads repeated to the query heads), ops.broadcast_to, ops.flip, ops.roll
  and ops.cast copies; a cast to the dtype its input already has returns its input (no kernel).
- Indexing: ``x[...]`` (ops.GetItem) keeping every element (``x[:, None]``) is a view; one selecting fewer
  (``x[:, 0]``, BERT's and ViT's class token) and ops.slice copy the selected elements only: read and written
  once. ops.take and ops.take_along_axis gather: the indices at their own dtype and the gathered elements read,
  the output written. ops.zeros_like / ones_like / full_like write their output and read nothing (the input
  gives a shape only).
- keras_hub's CLIP poolers: CLIPVisionPooler takes the class token (x[:, 0]: a copy of B*D elements);
  CLIPTextPooler the embedding at each sequence's end-of-text token: argmax over the token ids (1 per id, read at
  their dtype), then a gather of B*D elements.
"""

from __future__ import annotations

import dataclasses

from carm_advisor.mapping.registry import dtype_bytes_of, elems, make_cost, no_work_cost, register_cost, typed_cost
from carm_advisor.mapping.types import OP_DATA, OP_REDUCTION, LayerCall

INTERPOLATION_FLOPS = {"nearest": 0, "bilinear": 7}
INDEX_BYTES = 4   # keras.ops.argmax / argmin return int32
_OTHER_INTERPOLATION_FLOPS = 31


@register_cost("MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
               "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "BasePooling")
def pooling_cost(call: LayerCall, dtype_bytes: int):
    window = elems(call.layer.pool_size)
    return make_cost(call, dtype_bytes, flops=window * elems(call.output_shapes[0]), op_class=OP_REDUCTION,
                     extra={"flops_per_element": window, "data_format": getattr(call.layer, "data_format", None)})


@register_cost("GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
               "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "BaseGlobalPooling",
               "ops.Mean", "ops.Sum", "ops.Max", "ops.Min", "ops.Prod", "ops.Cumsum")
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
               "ops.Stack", "ops.Pad", "ops.Tile", "ops.Moveaxis", "ops.Swapaxes", "ops.Split", "ops.Repeat",
               "ops.BroadcastTo", "ops.Flip", "ops.Roll")
def copy_cost(call: LayerCall, dtype_bytes: int):
    return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, notes="copy: bytes only")


@register_cost("ops.Cast")
def cast_cost(call: LayerCall, dtype_bytes: int):
    # read at the input's dtype (a float one at the costed dtype), written at the dtype cast to
    target = str(getattr(call.layer, "dtype", "") or "")
    if target and call.input_dtypes and call.input_dtypes[0] == target:
        return no_work_cost(call, f"cast to {target}, the dtype its input has: returns it, no kernel runs")
    return typed_cost(call, dtype_bytes, flops=0, op_class=OP_DATA,
                      output_bytes=dtype_bytes_of(target) if target else None, notes=f"cast to {target}: a copy")


@register_cost("ops.GetItem", "ops.Slice")
def slice_cost(call: LayerCall, dtype_bytes: int):
    selected = elems(call.output_shapes[0])
    if type(call.layer).__name__ == "GetItem" and selected == elems(call.input_shapes[0]):
        return no_work_cost(call, "indexing that keeps every element (new axes, whole slices): a view")
    return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0, read_elems=selected,
                     notes="the selected elements copied")


def _gather(call: LayerCall, dtype_bytes: int, gathered: int, flops: int = 0, notes: str = "gather"):
    """Reads the integer inputs at their dtype and ``gathered`` elements of the float ones, writes the output."""
    index_bytes = sum(elems(call.input_shapes[i]) * dtype_bytes_of(call.input_dtypes[i])
                      for i in call.distinct_inputs() if "float" not in call.input_dtypes[i])
    cost = make_cost(call, dtype_bytes, flops=flops, op_class=OP_DATA, weights=0, read_elems=gathered, notes=notes)
    return dataclasses.replace(cost, bytes_read=cost.bytes_read + index_bytes)


@register_cost("ops.Take", "ops.TakeAlongAxis")
def take_cost(call: LayerCall, dtype_bytes: int):
    return _gather(call, dtype_bytes, elems(call.output_shapes[0]))


@register_cost("ops.ZerosLike", "ops.OnesLike", "ops.FullLike")
def fill_cost(call: LayerCall, dtype_bytes: int):
    return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0, read_elems=0,
                     notes="a fill: writes its output, reads nothing")


@register_cost("ops.All", "ops.Any")
def logical_reduction_cost(call: LayerCall, dtype_bytes: int):
    return typed_cost(call, dtype_bytes, flops=elems(call.input_shapes[0]), op_class=OP_REDUCTION, output_bytes=1)


@register_cost("ops.Argmax", "ops.Argmin")
def arg_reduction_cost(call: LayerCall, dtype_bytes: int):
    return typed_cost(call, dtype_bytes, flops=elems(call.input_shapes[0]), op_class=OP_REDUCTION,
                      output_bytes=INDEX_BYTES, notes="int32 indices")


@register_cost("CLIPVisionPooler")
def class_token_pooler_cost(call: LayerCall, dtype_bytes: int):
    return make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0,
                     read_elems=elems(call.output_shapes[0]), notes="the class token x[:, 0] copied")


@register_cost("CLIPTextPooler")
def end_token_pooler_cost(call: LayerCall, dtype_bytes: int):
    ids = call.input_shapes[1] if len(call.input_shapes) > 1 else ()
    return _gather(call, dtype_bytes, elems(call.output_shapes[0]), flops=elems(ids),
                   notes="argmax over the token ids, then a gather of each end-of-text embedding")


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
