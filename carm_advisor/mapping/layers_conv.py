"""Convolutions: Conv1D/2D/3D (groups, strides, dilation, padding), transposed, depthwise, separable.

FLOPs = 2 * MACs (+ 1 per output element for the bias, + the fused activation per output element).
- Conv:        MACs = output elements * prod(kernel_size) * (input channels / groups)
- Transpose:   MACs = input elements (all channels) * prod(kernel_size) * filters (each input scatters)
- Depthwise:   MACs = output elements * prod(kernel_size)   (output channels = C * depth_multiplier)
- Separable:   two LayerCosts, "name:depthwise" (CUDA cores) then "name:pointwise" (Tensor Cores, 1x1 conv
               with the bias and activation), the intermediate tensor written by one and read by the other.
Strides and dilation change the output shape (taken from Keras) but not the MACs per output element.
"""

from __future__ import annotations

import dataclasses

from carm_advisor.mapping.registry import activation_flops, elems, make_cost, register_cost
from carm_advisor.mapping.types import OP_MATMUL, LayerCall


def _channel_axis(layer) -> int:
    return 1 if getattr(layer, "data_format", "channels_last") == "channels_first" else -1


def _epilogue_flops(layer, out_elems: int) -> int:
    bias = out_elems if getattr(layer, "use_bias", False) else 0
    return bias + _activation_flops(layer, out_elems)


def _activation_flops(layer, out_elems: int) -> int:
    return activation_flops(getattr(layer, "activation", None)) * out_elems


@register_cost("Conv1D", "Conv2D", "Conv3D", "BaseConv")
def conv_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    in_channels = call.input_shapes[0][_channel_axis(layer)]
    groups = getattr(layer, "groups", 1) or 1
    out_elems = elems(call.output_shapes[0])
    macs = out_elems * elems(layer.kernel_size) * (in_channels // groups)
    one_channel_groups = groups > 1 and in_channels // groups == 1
    notes = f"groups={groups}" if groups > 1 else ""
    if one_channel_groups:
        # One input channel per group is a depthwise convolution: cuDNN runs it on CUDA cores.
        notes = f"groups={groups} with one input channel per group: depthwise, CUDA cores in cuDNN"
    return make_cost(
        call, dtype_bytes,
        flops=2 * macs + _epilogue_flops(layer, out_elems),
        op_class=OP_MATMUL,
        tensor_core=not one_channel_groups,
        notes=notes,
        extra={"data_format": getattr(layer, "data_format", None), "macs": macs, "activation_flops": _activation_flops(layer, out_elems)},
    )


@register_cost("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose", "BaseConvTranspose")
def conv_transpose_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    out_elems = elems(call.output_shapes[0])
    macs = elems(call.input_shapes[0]) * elems(layer.kernel_size) * layer.filters
    return make_cost(
        call, dtype_bytes,
        flops=2 * macs + _epilogue_flops(layer, out_elems),
        op_class=OP_MATMUL,
        tensor_core=True,
        extra={"data_format": getattr(layer, "data_format", None), "macs": macs, "activation_flops": _activation_flops(layer, out_elems)},
    )


@register_cost("DepthwiseConv1D", "DepthwiseConv2D", "BaseDepthwiseConv")
def depthwise_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    out_elems = elems(call.output_shapes[0])
    macs = out_elems * elems(layer.kernel_size)
    return make_cost(
        call, dtype_bytes,
        flops=2 * macs + _epilogue_flops(layer, out_elems),
        op_class=OP_MATMUL,
        tensor_core=False,
        notes="depthwise: cuDNN runs it on CUDA cores, not Tensor Cores",
        extra={"data_format": getattr(layer, "data_format", None), "macs": macs, "activation_flops": _activation_flops(layer, out_elems)},
    )


@register_cost("SeparableConv1D", "SeparableConv2D", "BaseSeparableConv")
def separable_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    axis = _channel_axis(layer)
    in_channels = call.input_shapes[0][axis]
    mid_channels = in_channels * layer.depth_multiplier
    out_shape = call.output_shapes[0]
    mid_shape = list(out_shape)
    mid_shape[axis] = mid_channels  # strides act on the depthwise half: same spatial size as the output
    mid_elems = elems(mid_shape)
    out_elems = elems(out_shape)

    dw_macs = mid_elems * elems(layer.kernel_size)
    pw_macs = out_elems * mid_channels
    pw_weights = elems(layer.pointwise_kernel.shape) + (elems(layer.bias.shape) if layer.use_bias else 0)
    depthwise = make_cost(
        call, dtype_bytes,
        name=f"{call.path}:depthwise",
        flops=2 * dw_macs,
        op_class=OP_MATMUL,
        tensor_core=False,
        weights=elems(layer.depthwise_kernel.shape),
        written_elems=mid_elems,
        notes="depthwise half of a separable conv: CUDA cores in cuDNN",
        extra={"data_format": getattr(layer, "data_format", None), "macs": dw_macs, "part": "depthwise", "intermediate_shape": tuple(mid_shape)},
    )
    pointwise = make_cost(
        call, dtype_bytes,
        name=f"{call.path}:pointwise",
        flops=2 * pw_macs + _epilogue_flops(layer, out_elems),
        op_class=OP_MATMUL,
        tensor_core=True,
        weights=pw_weights,
        read_elems=mid_elems,
        notes="pointwise (1x1) half of a separable conv",
        extra={"data_format": getattr(layer, "data_format", None), "macs": pw_macs, "part": "pointwise", "activation_flops": _activation_flops(layer, out_elems), "intermediate_shape": tuple(mid_shape)},
    )
    mid = (tuple(mid_shape),)
    return [dataclasses.replace(depthwise, output_shapes=mid), dataclasses.replace(pointwise, input_shapes=mid)]
