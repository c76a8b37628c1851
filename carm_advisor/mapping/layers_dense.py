"""Dense, EinsumDense, Dot, attention, embedding, recurrent layers and their wrappers.

- Dense on an N-d input: MACs = prod(input[:-1]) * in_features * units; bias 1 per output element.
- EinsumDense / ops.einsum / ops.matmul / Dot: MACs = output elements * product of contracted sizes.
- MultiHeadAttention (B batch, Tq/Tk query/key positions, D* input widths, H heads, dk key_dim, dv
  value_dim, Do output width): MACs = B*Tq*Dq*H*dk (Q) + B*Tk*Dk*H*dk (K) + B*Tk*Dv*H*dv (V)
  + B*H*Tq*Tk*dk (QK^T) + B*H*Tq*Tk*dv (AV) + B*Tq*H*dv*Do (output); + projection biases;
  + softmax 5 per score; the 1/sqrt(dk) scaling of Q 1 per Q element. Query, value and key are the
  tensors passed as ``query``, ``value`` and ``key`` (key = value when none is passed); a mask
  (``attention_mask``, ``query_mask``, ...) is no projection input: it costs no FLOPs here and is read
  at its own dtype. A tensor passed twice (``mha(x, x)``: query = value = key) is read once.
- LSTM per step and sample (D input width, U units): 2*(D+U)*4U + 4U bias + 4U (x and h parts
  added) + U*(3*a_r + 2*a + 4) (gate activations, c = f*c + i*g, h = o*act(c)).
  GRU (reset_after): 2*(D+U)*3U + 6U biases (3U without reset_after) + 3U adds + U*(2*a_r + a + 5).
  SimpleRNN: 2*(D+U)*U + U bias + U add + U*a. a, a_r: activation FLOPs from registry.ACTIVATION_FLOPS.
- Bidirectional: both directions + the merge (sum/ave/mul 1 per output element, concat 0).
- TimeDistributed: the inner layer's cost on a batch of batch*time samples.
- Embedding: 0 FLOPs; reads the indices (at their integer dtype) and the gathered rows, writes the rows.
"""

from __future__ import annotations

import dataclasses

from carm_advisor.mapping.registry import (
    activation_flops,
    dtype_bytes_of,
    elems,
    lookup,
    make_cost,
    register_cost,
    unknown_cost,
)
from carm_advisor.mapping.types import OP_DATA, OP_MATMUL, LayerCall, LayerCost


def _bias_act(layer, out_elems: int) -> int:
    bias = out_elems if getattr(layer, "use_bias", False) else 0
    return bias + activation_flops(getattr(layer, "activation", None)) * out_elems


@register_cost("Dense")
def dense_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    in_shape = call.input_shapes[0]
    out_elems = elems(call.output_shapes[0])
    macs = elems(in_shape[:-1]) * in_shape[-1] * layer.units
    act = activation_flops(layer.activation) * out_elems
    return make_cost(call, dtype_bytes, flops=2 * macs + _bias_act(layer, out_elems),
                     op_class=OP_MATMUL, tensor_core=True, extra={"macs": macs, "activation_flops": act})


def _contracted_size(subscripts: str, shapes) -> int:
    """Product of the sizes of the letters summed over in an einsum ``"ab,bc->ac"`` (no ellipsis in them)."""
    lhs, out = subscripts.replace(" ", "").split("->")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), shapes):
        if "..." in term:
            head, tail = term.split("...")
            letters = list(head) + [None] * (len(shape) - len(head) - len(tail)) + list(tail)
        else:
            letters = list(term)
        for letter, size in zip(letters, shape):
            if letter is not None:
                sizes[letter] = size
    return elems(size for letter, size in sizes.items() if letter not in out)


@register_cost("EinsumDense")
def einsum_dense_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    out_elems = elems(call.output_shapes[0])
    contracted = _contracted_size(layer.equation, [call.input_shapes[0], tuple(layer.kernel.shape)])
    macs = out_elems * contracted
    bias = out_elems if getattr(layer, "bias", None) is not None else 0
    act = activation_flops(getattr(layer, "activation", None)) * out_elems
    return make_cost(call, dtype_bytes, flops=2 * macs + bias + act, op_class=OP_MATMUL,
                     tensor_core=True, extra={"macs": macs, "equation": layer.equation, "activation_flops": act})


@register_cost("ops.Einsum")
def einsum_op_cost(call: LayerCall, dtype_bytes: int):
    macs = elems(call.output_shapes[0]) * _contracted_size(call.layer.subscripts, call.input_shapes)
    return make_cost(call, dtype_bytes, flops=2 * macs, op_class=OP_MATMUL, tensor_core=True,
                     weights=0, extra={"macs": macs})


@register_cost("ops.Matmul")
def matmul_op_cost(call: LayerCall, dtype_bytes: int):
    a = call.input_shapes[0]
    macs = elems(call.output_shapes[0]) * a[-1]
    return make_cost(call, dtype_bytes, flops=2 * macs, op_class=OP_MATMUL, tensor_core=True,
                     weights=0, extra={"macs": macs})


@register_cost("Dot")
def dot_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    x = call.input_shapes[0]
    axes = layer.axes if isinstance(layer.axes, (list, tuple)) else (layer.axes, layer.axes)
    contracted = x[axes[0] % len(x)]
    macs = elems(call.output_shapes[0]) * contracted
    # l2-normalising both inputs: square, sum, multiply by rsqrt = 3 per input element.
    norm = 3 * sum(elems(s) for s in call.input_shapes) if layer.normalize else 0
    return make_cost(call, dtype_bytes, flops=2 * macs + norm, op_class=OP_MATMUL, tensor_core=True,
                     extra={"macs": macs})


def _mha_roles(call: LayerCall) -> tuple[int, int, int, list[int]]:
    """Indices of the query, value and key inputs of a MultiHeadAttention call, and of its masks."""
    names = call.input_names
    if names and "query" in names and "value" in names:
        q, v = names.index("query"), names.index("value")
        k = names.index("key") if "key" in names else v
        return q, v, k, [i for i in range(len(names)) if i not in (q, v, k)]
    # Names unknown: query, value by position; a third tensor is the key only when it fits the key
    # projection (its width is the key kernel's input width and its positions are the value's).
    v = 1 if len(call.input_shapes) > 1 else 0
    k = v
    key_dense = getattr(call.layer, "_key_dense", None)
    key_width = tuple(key_dense.kernel.shape)[0] if getattr(key_dense, "kernel", None) is not None else None
    if len(call.input_shapes) > 2:
        third, value = call.input_shapes[2], call.input_shapes[v]
        if third[-1] == key_width and third[:-1] == value[:-1]:
            k = 2
    return 0, v, k, [i for i in range(len(call.input_shapes)) if i not in (0, v, k)]


@register_cost("MultiHeadAttention")
def mha_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    heads, dk, dv = layer._num_heads, layer._key_dim, layer._value_dim
    qi, vi, ki, masks = _mha_roles(call)
    q, v, k = call.input_shapes[qi], call.input_shapes[vi], call.input_shapes[ki]
    out = call.output_shapes[0]
    batch = q[0]
    tq, tk = elems(q[1:-1]), elems(k[1:-1])
    q_rows, k_rows, v_rows = batch * tq, batch * tk, batch * elems(v[1:-1])
    d_out = out[-1]

    proj_macs = (q_rows * q[-1] * heads * dk + k_rows * k[-1] * heads * dk
                 + v_rows * v[-1] * heads * dv + q_rows * heads * dv * d_out)
    attn_macs = batch * heads * tq * tk * (dk + dv)
    scores = batch * heads * tq * tk
    bias = (q_rows * heads * dk + k_rows * heads * dk + v_rows * heads * dv + q_rows * d_out) if layer._use_bias else 0
    gate = 0
    if getattr(layer, "_use_gate", False):
        gate_macs = q_rows * q[-1] * heads * dv
        proj_macs += gate_macs
        gate = q_rows * heads * dv * (activation_flops("sigmoid") + 1)
    scale = q_rows * heads * dk  # Q * 1/sqrt(dk)
    flops = 2 * (proj_macs + attn_macs) + bias + gate + scale + activation_flops("softmax") * scores
    distinct = set(call.distinct_inputs())
    read_elems = sum(elems(call.input_shapes[i]) for i in dict.fromkeys((qi, vi, ki)) if i in distinct)
    mask_bytes = sum(elems(call.input_shapes[i]) * dtype_bytes_of(call.input_dtypes[i])
                     for i in masks if i in distinct and i < len(call.input_dtypes))
    cost = make_cost(
        call, dtype_bytes, flops=flops, op_class=OP_MATMUL, tensor_core=True, read_elems=read_elems,
        notes="Q/K/V/output projections, QK^T and AV on Tensor Cores; softmax on CUDA cores",
        extra={"macs": proj_macs + attn_macs, "projection_macs": proj_macs, "attention_macs": attn_macs,
               # the score matrix, written after QK^T and read by softmax and AV, unless fused (flash)
               "intermediate_bytes": 3 * scores * dtype_bytes},
    )
    return dataclasses.replace(cost, bytes_read=cost.bytes_read + mask_bytes) if mask_bytes else cost


@register_cost("Embedding")
def embedding_cost(call: LayerCall, dtype_bytes: int):
    index_elems = elems(call.input_shapes[0])
    index_bytes = dtype_bytes_of(call.input_dtypes[0]) if call.input_dtypes else 4
    out_elems = elems(call.output_shapes[0])
    cost = make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0, read_elems=out_elems,
                     notes="gather: reads the indices and the looked-up rows, not the whole table")
    return dataclasses.replace(cost, bytes_read=cost.bytes_read + index_elems * index_bytes,
                               params=elems(call.layer.embeddings.shape))


def _rnn_step_flops(cell, in_width: int) -> tuple[int, int]:
    """(MACs, other FLOPs) of one step of one sample of an LSTM/GRU/SimpleRNN cell."""
    units = cell.units
    a = activation_flops(cell.activation)
    a_r = activation_flops(getattr(cell, "recurrent_activation", None))
    name = type(cell).__name__
    if name == "LSTMCell":
        macs = (in_width + units) * 4 * units
        other = (4 * units if cell.use_bias else 0) + 4 * units + units * (3 * a_r + 2 * a + 4)
    elif name == "GRUCell":
        macs = (in_width + units) * 3 * units
        biases = (6 if getattr(cell, "reset_after", True) else 3) * units if cell.use_bias else 0
        other = biases + 3 * units + units * (2 * a_r + a + 5)
    else:  # SimpleRNNCell
        macs = (in_width + units) * units
        other = (units if cell.use_bias else 0) + units + units * a
    return macs, other


@register_cost("LSTM", "GRU", "SimpleRNN")
def rnn_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    x = call.input_shapes[0]  # (batch, time, features)
    steps = x[0] * x[1]
    macs, other = _rnn_step_flops(layer.cell, x[-1])
    return make_cost(
        call, dtype_bytes, flops=steps * (2 * macs + other), op_class=OP_MATMUL, tensor_core=True,
        read_elems=elems(x) + sum(elems(s) for s in call.input_shapes[1:]),
        notes=f"{x[1]} sequential steps: gate matmuls on Tensor Cores, gate arithmetic on CUDA cores",
        extra={"macs": steps * macs, "time_steps": x[1]},
    )


def _inner_call(call: LayerCall, inner, input_shapes, output_shapes) -> LayerCall:
    return LayerCall(path=call.path, layer=inner, input_shapes=tuple(input_shapes),
                     output_shapes=tuple(output_shapes), input_dtypes=call.input_dtypes)


def _output_shapes_of(inner, input_shape) -> list[tuple]:
    out = inner.compute_output_shape(input_shape)
    if isinstance(out, (list, tuple)) and out and isinstance(out[0], (list, tuple)):
        return [tuple(s) for s in out]
    return [tuple(out)] if out is not None else []


def _sum_costs(call: LayerCall, parts: list[LayerCost], extra_flops: int, dtype_bytes: int) -> LayerCost:
    written = sum(elems(s) for s in call.output_shapes) * dtype_bytes
    return LayerCost(
        name=call.path, type=type(call.layer).__name__, flops=sum(p.flops for p in parts) + extra_flops,
        bytes_read=sum(p.bytes_read for p in parts), bytes_written=written, compute_dtype="",
        op_class=parts[0].op_class, tensor_core=all(p.tensor_core for p in parts),
        params=sum(p.params for p in parts), input_shapes=call.input_shapes,
        output_shapes=call.output_shapes, notes="; ".join(dict.fromkeys(p.notes for p in parts if p.notes)),
        extra={"macs": sum(p.extra.get("macs", 0) for p in parts)},
    )


def _cost_inner(call: LayerCall, inner_call: LayerCall, dtype_bytes: int) -> list[LayerCost]:
    fn = lookup(inner_call.layer)
    if fn is None:
        return [unknown_cost(inner_call, "")]
    result = fn(inner_call, dtype_bytes)
    return [result] if isinstance(result, LayerCost) else list(result)


@register_cost("Bidirectional")
def bidirectional_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    x = call.input_shapes[0]
    parts = []
    for inner in (layer.forward_layer, layer.backward_layer):
        outs = _output_shapes_of(inner, x)
        parts += _cost_inner(call, _inner_call(call, inner, [x], outs), dtype_bytes)
    if any(not p.known for p in parts):
        return unknown_cost(call, "")
    merge = elems(call.output_shapes[0]) if layer.merge_mode in ("sum", "mul", "ave") else 0
    if layer.merge_mode == "ave":
        merge *= 2  # add then halve
    return _sum_costs(call, parts, merge, dtype_bytes)


@register_cost("TimeDistributed")
def time_distributed_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    x, y = call.input_shapes[0], call.output_shapes[0]
    inner_call = _inner_call(call, layer.layer, [(x[0] * x[1],) + tuple(x[2:])], [(y[0] * y[1],) + tuple(y[2:])])
    parts = _cost_inner(call, inner_call, dtype_bytes)
    if any(not p.known for p in parts):
        cost = unknown_cost(call, "")
        return dataclasses.replace(cost, notes=f"no cost model for {type(layer.layer).__name__} inside TimeDistributed")
    return _sum_costs(call, parts, 0, dtype_bytes)
