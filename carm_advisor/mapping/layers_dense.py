"""Dense, EinsumDense, Dot, embedding, recurrent layers and their wrappers; contrastive similarity heads.

Attention (MultiHeadAttention, ops.dot_product_attention, rotary embeddings) is in layers_attention.
- Dense on an N-d input: MACs = prod(input[:-1]) * in_features * units; bias 1 per output element.
- EinsumDense / ops.einsum / ops.matmul / Dot: MACs = output elements * product of contracted sizes.
- LSTM per step and sample (D input width, U units): 2*(D+U)*4U + 4U bias + 4U (x and h parts
  added) + U*(3*a_r + 2*a + 4) (gate activations, c = f*c + i*g, h = o*act(c)).
  GRU (reset_after): 2*(D+U)*3U + 6U biases (3U without reset_after) + 3U adds + U*(2*a_r + a + 5).
  SimpleRNN: 2*(D+U)*U + U bias + U add + U*a. a, a_r: activation FLOPs from registry.ACTIVATION_FLOPS.
- Bidirectional: both directions + the merge (sum/ave/mul 1 per output element, concat 0).
- TimeDistributed: the inner layer's cost on a batch of batch*time samples.
- Embedding: 0 FLOPs; reads the indices (at their integer dtype) and the gathered rows, writes the rows.
  ReversibleEmbedding (Keras', keras_hub's) the same; called with ``reverse=True`` it is the logits matmul
  x @ E^T: MACs = output elements * embedding width, reading x and the whole table (the tied embeddings or the
  separate reverse kernel), + 6 per logit for a logit soft cap (divide, tanh, multiply).
- keras_hub's PositionEmbedding: 0 FLOPs; reads the S rows of the table for the S positions of its input (whose
  values it never reads) and writes them broadcast to the batch.
- keras_hub's CLIPHead and SigLIPHead on image embeddings (Bv, D) and text embeddings (Bt, D): L2-normalising
  both (square, sum, divide: 3 per element, + 1 square root per row), the similarity matmul (Bt*Bv*D MACs),
  the logit scale (1 per logit) and SigLIP's logit bias (1 per logit); the image-by-text logits are the
  transposed copy of the text-by-image ones.

Keras' quantised layers (``model.quantize("int8" | "float8")``, Keras 3.15's layers/core/dense.py, einsum_dense.py,
embedding.py, reversible_embedding.py; each converts its own class alone, not a subclass) keep the float layer's
FLOPs; what changes is what they read and what they compute in (the CARM's placement: carm/placement.py
QUANTIZED_PATHS):
- int8 Dense / EinsumDense: the kernel is stored as int8 and read at 1 byte per element; its per-output scales and
  the bias at the compute dtype, as every float weight. The inputs are quantised to int8 on the fly (Keras'
  AbsMaxQuantizer: abs, max, multiply, round and clip's two compares, 6 per input element) and the int32 result
  is descaled (the scales' product and a divide, 2 per output element): ``extra["quantize_flops"]``, elementwise
  work apart from the matmul's FLOPs.
- float8 Dense / EinsumDense: Keras keeps the float kernel (its quantize() adds scalar scales and amax histories,
  deletes no kernel) and quantises it and the inputs to float8_e4m3fn and back on every call (divide, clip's two
  compares, multiply: 4 per element of each): the kernel is read at the compute dtype as before, plus the two
  scalar scales read at inference (the amax histories are read in training only).
- int8 Embedding / ReversibleEmbedding: the table is int8 (1 byte per element) with one scale per row: a lookup
  reads its rows at 1 byte per element and one scale per index; the reverse (logits) matmul reads the whole table
  at 1 byte per element and its scales.
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


# The layer classes each quantisation mode converts (Keras 3.15: Dense, EinsumDense, Embedding and
# ReversibleEmbedding implement int8; Dense and EinsumDense float8; any other layer's quantize() raises
# NotImplementedError, which model.quantize turns into a warning and skips).
QUANTIZABLE_LAYERS = {"int8": ("Dense", "EinsumDense", "Embedding", "ReversibleEmbedding"),
                      "float8": ("Dense", "EinsumDense")}
QUANTIZED_MODES = tuple(QUANTIZABLE_LAYERS)
INT8_INPUT_FLOPS = 6    # per input element: abs, max, multiply by the scale, round, clip (2 compares)
INT8_OUTPUT_FLOPS = 2   # per output element: the inputs' and kernel's scales multiplied, the divide
FLOAT8_QDQ_FLOPS = 4    # per element of the inputs and of the kernel: divide, clip (2 compares), multiply
FLOAT8_SCALES = 2       # inputs_scale and kernel_scale: scalars read at inference


def quantization_mode(layer) -> str | None:
    """The layer's Keras quantisation mode where the mapping costs it ("int8", "float8"), else None."""
    mode = getattr(layer, "quantization_mode", None)
    return mode if mode in QUANTIZED_MODES else None


def quantizable_flops(costs, mode: str) -> tuple[int, int]:
    """(FLOPs of the layers ``model.quantize(mode)`` converts, FLOPs of every costed layer) of a float model's
    costs (map_model): the classes of QUANTIZABLE_LAYERS[mode] (by their own class name: Keras converts no
    subclass), and the query/key/value/output projections of a MultiHeadAttention (its
    ``extra["projection_macs"]``: they are EinsumDense layers, which model.quantize converts inside it)."""
    classes = QUANTIZABLE_LAYERS[mode]
    total = quantized = 0
    for c in costs:
        if not c.known:
            continue
        total += c.flops
        if c.type in classes:
            quantized += c.flops
        elif "projection_macs" in c.extra and "EinsumDense" in classes:
            quantized += 2 * int(c.extra["projection_macs"])
    return quantized, total


def _quantized(cost: LayerCost, layer, dtype_bytes: int, in_elems: int, out_elems: int) -> LayerCost:
    """A quantised Dense or EinsumDense cost (made with no weights read) with what its kernel, scales and bias read
    and the quantisation's elementwise work (module docstring)."""
    mode = quantization_mode(layer)
    bias = getattr(layer, "bias", None)
    bias_elems = elems(bias.shape) if bias is not None else 0
    kernel = elems(layer._kernel.shape)
    if mode == "int8":
        scales = elems(layer.kernel_scale.shape)
        params, weight_bytes = kernel + scales + bias_elems, kernel + (scales + bias_elems) * dtype_bytes
        work = INT8_INPUT_FLOPS * in_elems + INT8_OUTPUT_FLOPS * out_elems
        notes = "int8 kernel (1 byte per element) and per-output scales; inputs quantised to int8 per call"
    else:   # float8
        params = kernel + bias_elems + FLOAT8_SCALES
        weight_bytes = params * dtype_bytes
        work = FLOAT8_QDQ_FLOPS * (in_elems + kernel)
        notes = ("float8: the float kernel is kept and quantised with the inputs to float8_e4m3fn and back on every "
                 "call (Keras stores no 8-bit kernel for float8)")
    return dataclasses.replace(cost, bytes_read=cost.bytes_read + weight_bytes, params=params, notes=notes,
                               extra={**cost.extra, "quantization_mode": mode, "weight_bytes": weight_bytes,
                                      "quantize_flops": work})


@register_cost("Dense")
def dense_cost(call: LayerCall, dtype_bytes: int):
    layer = call.layer
    in_shape = call.input_shapes[0]
    out_elems = elems(call.output_shapes[0])
    macs = elems(in_shape[:-1]) * in_shape[-1] * layer.units
    act = activation_flops(layer.activation) * out_elems
    extra = {"macs": macs, "activation_flops": act}
    if quantization_mode(layer) is None:
        return make_cost(call, dtype_bytes, flops=2 * macs + _bias_act(layer, out_elems),
                         op_class=OP_MATMUL, tensor_core=True, extra=extra)
    cost = make_cost(call, dtype_bytes, flops=2 * macs + _bias_act(layer, out_elems), op_class=OP_MATMUL,
                     tensor_core=True, weights=0, extra=extra)
    return _quantized(cost, layer, dtype_bytes, elems(in_shape), out_elems)


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
    extra = {"macs": macs, "equation": layer.equation, "activation_flops": act}
    if quantization_mode(layer) is None:
        return make_cost(call, dtype_bytes, flops=2 * macs + bias + act, op_class=OP_MATMUL, tensor_core=True,
                         extra=extra)
    cost = make_cost(call, dtype_bytes, flops=2 * macs + bias + act, op_class=OP_MATMUL, tensor_core=True,
                     weights=0, extra=extra)
    return _quantized(cost, layer, dtype_bytes, elems(call.input_shapes[0]), out_elems)


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


@register_cost("Embedding")
def embedding_cost(call: LayerCall, dtype_bytes: int):
    index_elems = elems(call.input_shapes[0])
    index_bytes = dtype_bytes_of(call.input_dtypes[0]) if call.input_dtypes else 4
    out_elems = elems(call.output_shapes[0])
    cost = make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0, read_elems=out_elems,
                     notes="gather: reads the indices and the looked-up rows, not the whole table")
    cost = dataclasses.replace(cost, bytes_read=cost.bytes_read + index_elems * index_bytes,
                               params=elems(call.layer.embeddings.shape))
    if quantization_mode(call.layer) != "int8":
        return cost
    # int8 rows (1 byte per element, not dtype_bytes) and one scale per index at the compute dtype
    rows_saved = out_elems * (dtype_bytes - 1)
    return dataclasses.replace(cost, bytes_read=cost.bytes_read - rows_saved + index_elems * dtype_bytes,
                               notes=cost.notes + "; int8 table: rows read at 1 byte per element, a scale per index",
                               extra={**cost.extra, "quantization_mode": "int8"})


@register_cost("ReversibleEmbedding")
def reversible_embedding_cost(call: LayerCall, dtype_bytes: int):
    if not call.options.get("reverse"):
        return embedding_cost(call, dtype_bytes)
    layer = call.layer
    logits = elems(call.output_shapes[0])
    width = call.input_shapes[0][-1]
    macs = logits * width
    cap = (activation_flops("tanh") + 2) * logits if getattr(layer, "logit_soft_cap", None) else 0
    table = getattr(layer, "reverse_embeddings", None) if not getattr(layer, "tie_weights", True) else None
    table = layer.embeddings if table is None else table
    cost = make_cost(call, dtype_bytes, flops=2 * macs + cap, op_class=OP_MATMUL, tensor_core=True,
                     weights=elems(table.shape), notes="reverse=True: the logits matmul against the embedding table",
                     extra={"macs": macs})
    if quantization_mode(layer) != "int8":
        return cost
    # the int8 table at 1 byte per element, and its per-row scales at the compute dtype
    rows = table.shape[0] if table is layer.embeddings else table.shape[-1]
    weight_bytes = elems(table.shape) + rows * dtype_bytes
    read = cost.bytes_read - elems(table.shape) * dtype_bytes + weight_bytes
    return dataclasses.replace(cost, bytes_read=read, params=elems(table.shape) + rows,
                               notes=cost.notes + "; int8 table (1 byte per element) and per-row scales",
                               extra={**cost.extra, "quantization_mode": "int8", "weight_bytes": weight_bytes,
                                      "quantize_flops": INT8_INPUT_FLOPS * elems(call.input_shapes[0])
                                      + INT8_OUTPUT_FLOPS * logits})


@register_cost("PositionEmbedding")
def position_embedding_cost(call: LayerCall, dtype_bytes: int):
    out = call.output_shapes[0]
    rows = elems(out[-2:])
    cost = make_cost(call, dtype_bytes, flops=0, op_class=OP_DATA, weights=0, read_elems=rows,
                     notes="the table's rows for the input's positions, broadcast to the batch")
    return dataclasses.replace(cost, params=elems(call.layer.position_embeddings.shape))


@register_cost("CLIPHead", "SigLIPHead")
def contrastive_head_cost(call: LayerCall, dtype_bytes: int):
    image, text = call.input_shapes[0], call.input_shapes[1]
    width = image[-1]
    logits = elems(image[:-1]) * elems(text[:-1])
    macs = logits * width
    normalise = 3 * (elems(image) + elems(text)) + elems(image[:-1]) + elems(text[:-1])
    scale_and_bias = logits * (2 if getattr(call.layer, "logit_bias", None) is not None else 1)
    return make_cost(call, dtype_bytes, flops=2 * macs + normalise + scale_and_bias, op_class=OP_MATMUL,
                     tensor_core=True, notes="L2-normalised image and text embeddings, their similarity matmul",
                     extra={"macs": macs})


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
