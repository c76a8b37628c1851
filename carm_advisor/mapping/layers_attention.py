"""Attention: Keras' MultiHeadAttention, ``keras.ops.dot_product_attention``, and rotary position embeddings.

Scores = B * H * Tq * Tk (batch, heads, query and key positions); dk, dv the key and value widths per head.
- MultiHeadAttention (D* input widths, Do output width): MACs = B*Tq*Dq*H*dk (Q) + B*Tk*Dk*H*dk (K)
  + B*Tk*Dv*H*dv (V) + scores*dk (QK^T) + scores*dv (AV) + B*Tq*H*dv*Do (output); + projection biases;
  + softmax 5 per score; the 1/sqrt(dk) scaling of Q 1 per Q element; masking 2 per score where a mask is given
  (``attention_mask``, ``query_mask``, ``value_mask``, ``key_mask``) or ``use_causal_mask=True``: Keras' masked
  Softmax selects the masked scores to a large negative number before the softmax and to 0 after it. Query,
  value and key are the tensors passed as ``query``, ``value`` and ``key`` (key = value when none is passed); a
  mask is no projection input: it is read at its own dtype. A tensor passed twice (``mha(x, x)``) is read once.
  keras_hub's CachedMultiHeadAttention is costed as its base class.
- ``ops.dot_product_attention(query, key, value, bias, mask, scale)`` on (B, T, H, d) tensors (grouped-query
  attention: key and value with fewer heads than the query, each shared by a group of query heads): MACs =
  scores * (dk + dv); + softmax 5 per score; + the scale 1 per query element; + 1 per score for each of a bias, a
  mask (a select) and ``is_causal``; + 6 per score for a logit soft cap (divide, tanh, multiply). Reads query, key,
  value, bias and mask (the mask at its own dtype), writes the output; a fused (flash) kernel keeps the scores on
  chip, an unfused one writes and reads them (``extra["intermediate_bytes"]``).
- keras_hub's RotaryEmbedding (and its LlamaRotaryEmbedding subclass) on x with N elements, S positions along
  its sequence axis and R features along its feature axis: x * cos + rotate_half(x) * sin = 2 multiplies and 1
  add per element and a negation of half of them (7 N / 2), + the cos/sin table of the call: S * R / 2
  (positions times inverse frequencies) + 2 * S * R (cos and sin, 1 each as for keras.ops' unary operations).
  Reads x, writes the rotated x (the table is a few kilobytes, computed where it is used).
"""

from __future__ import annotations

import dataclasses

from carm_advisor.mapping.registry import (
    ACTIVATION_FLOPS,
    activation_flops,
    dtype_bytes_of,
    elems,
    make_cost,
    register_cost,
    typed_cost,
)
from carm_advisor.mapping.types import OP_ELEMENTWISE, OP_MATMUL, LayerCall

# Keras' masked Softmax: where(mask, scores, -large) before the softmax, where(mask, probabilities, 0) after it.
MASKED_SOFTMAX_SELECTS = 2
# A logit soft cap: tanh(scores / cap) * cap.
SOFT_CAP_FLOPS = ACTIVATION_FLOPS["tanh"] + 2


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
    key_width = int(key_dense.kernel.shape[0]) if getattr(key_dense, "kernel", None) is not None else None
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
    masked = bool(masks) or bool(call.options.get("use_causal_mask"))
    masking = MASKED_SOFTMAX_SELECTS * scores if masked else 0
    flops = 2 * (proj_macs + attn_macs) + bias + gate + scale + activation_flops("softmax") * scores + masking
    distinct = set(call.distinct_inputs())
    read_elems = sum(elems(call.input_shapes[i]) for i in dict.fromkeys((qi, vi, ki)) if i in distinct)
    mask_bytes = sum(elems(call.input_shapes[i]) * dtype_bytes_of(call.input_dtypes[i])
                     for i in masks if i in distinct and i < len(call.input_dtypes))
    cost = make_cost(
        call, dtype_bytes, flops=flops, op_class=OP_MATMUL, tensor_core=True, read_elems=read_elems,
        notes="Q/K/V/output projections, QK^T and AV on Tensor Cores; softmax" + (" and masking" if masked else "")
              + " on CUDA cores",
        extra={"macs": proj_macs + attn_macs, "projection_macs": proj_macs, "attention_macs": attn_macs,
               "masking_flops": masking,
               # the score matrix, written after QK^T and read by softmax and AV, unless fused (flash)
               "intermediate_bytes": 3 * scores * dtype_bytes},
    )
    return dataclasses.replace(cost, bytes_read=cost.bytes_read + mask_bytes) if mask_bytes else cost


def _heads_and_width(shape) -> tuple[int, int, int]:
    """(positions, heads, width) of an attention operand (B, T, H, d), or (B, T, d) with one head."""
    return (shape[1], shape[2], shape[3]) if len(shape) == 4 else (shape[1], 1, shape[-1])


@register_cost("ops.DotProductAttention")
def dot_product_attention_cost(call: LayerCall, dtype_bytes: int):
    op = call.layer
    names = call.input_names or ("query", "key", "value", "bias", "mask")[:len(call.input_shapes)]
    role = {name: i for i, name in enumerate(names)}
    q, k, v = (call.input_shapes[role[name]] for name in ("query", "key", "value"))
    tq, heads, dk = _heads_and_width(q)
    tk = _heads_and_width(k)[0]
    dv = _heads_and_width(v)[2]
    scores = q[0] * heads * tq * tk
    macs = scores * (dk + dv)
    masks = [name for name in ("bias", "mask") if name in role]
    if getattr(op, "is_causal", False):
        masks.append("causal mask")
    cap = SOFT_CAP_FLOPS * scores if getattr(op, "attn_logits_soft_cap", None) else 0
    flops = 2 * macs + activation_flops("softmax") * scores + elems(q) + len(masks) * scores + cap
    cost = typed_cost(call, dtype_bytes, flops=flops, op_class=OP_MATMUL,
                      notes="QK^T and AV on Tensor Cores; softmax" + "".join(f", {m}" for m in masks)
                            + (", logit soft cap" if cap else "") + " on CUDA cores; the scores stay on chip where "
                            "the backend fuses it (flash attention)",
                      extra={"macs": macs, "attention_macs": macs, "intermediate_bytes": 3 * scores * dtype_bytes})
    return dataclasses.replace(cost, tensor_core=True)


@register_cost("RotaryEmbedding")
def rotary_embedding_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    x = call.input_shapes[0]
    positions = x[getattr(layer, "sequence_axis", 1)]
    features = x[getattr(layer, "feature_axis", -1)]
    n = elems(x)
    table = positions * features // 2 + 2 * positions * features
    rotate = 7 * n // 2
    return make_cost(call, dtype_bytes, flops=rotate + table, op_class=OP_ELEMENTWISE, weights=0,
                     notes="x * cos + rotate_half(x) * sin, with its cos/sin table",
                     extra={"table_flops": table, "flops_per_element": 3.5})
