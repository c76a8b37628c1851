"""Hand counts for the Keras layers and keras.ops operations transformers are made of: fused attention, masked
softmax, RMS and layer normalisation, the reverse embedding, indexing, gathers, repeats, fills and reductions."""

import keras
import pytest
from keras import ops

from carm_advisor.mapping import ACTIVATION_FLOPS, map_model

F32 = 4


def only_op(outputs_of, *shapes, dtypes=None, batch=2, type_name=None):
    """Map a functional model of fixed-shape inputs; the one cost of type ``type_name`` (or the only cost)."""
    dtypes = dtypes or ["float32"] * len(shapes)
    inputs = [keras.Input(s, dtype=d) for s, d in zip(shapes, dtypes)]
    costs = map_model(keras.Model(inputs, outputs_of(*inputs)), batch)
    picked = [c for c in costs if type_name is None or c.type == type_name]
    assert len(picked) == 1, [c.type for c in costs]
    assert picked[0].known
    return picked[0]


# ---- attention -------------------------------------------------------------------------------------------

def test_grouped_query_dot_product_attention_with_a_mask_hand_count():
    # B=2, T=10 positions, 8 query heads sharing 2 key/value heads, 16 wide; a bool mask (B, 1, T, T)
    B, T, H, HKV, D = 2, 10, 8, 2, 16
    cost = only_op(lambda q, k, v, m: ops.dot_product_attention(q, k, v, mask=m),
                   (T, H, D), (T, HKV, D), (T, HKV, D), (1, T, T), dtypes=["float32"] * 3 + ["bool"])
    scores = B * H * T * T
    assert cost.flops == (2 * scores * D        # QK^T
                          + 2 * scores * D      # AV
                          + 5 * scores          # softmax
                          + B * T * H * D       # the scale, on the query
                          + scores)             # the mask: a select per score
    assert cost.bytes_read == (B * T * H * D + 2 * B * T * HKV * D) * F32 + B * T * T * 1
    assert cost.bytes_written == B * T * H * D * F32
    assert cost.tensor_core and cost.op_class == "matmul"


def test_causal_dot_product_attention_counts_its_mask():
    B, T, H, D = 1, 6, 2, 8
    plain = only_op(lambda q, k, v: ops.dot_product_attention(q, k, v), (T, H, D), (T, H, D), (T, H, D), batch=B)
    causal = only_op(lambda q, k, v: ops.dot_product_attention(q, k, v, is_causal=True),
                     (T, H, D), (T, H, D), (T, H, D), batch=B)
    assert causal.flops - plain.flops == B * H * T * T


def test_a_masked_softmax_selects_twice_per_score_and_reads_its_bool_mask_at_one_byte():
    cost = only_op(lambda x, m: keras.layers.Softmax()(x, mask=m), (3, 5, 5), (1, 5, 5), dtypes=["float32", "bool"])
    n = 2 * 3 * 5 * 5
    assert cost.flops == (5 + 2) * n
    assert cost.bytes_read == n * F32 + 2 * 5 * 5 * 1 and cost.bytes_written == n * F32


# ---- normalisation -----------------------------------------------------------------------------------------

def test_rms_normalization_layer_and_op_hand_counts():
    layer = only_op(lambda x: keras.layers.RMSNormalization()(x), (7, 16))
    assert layer.flops == 4 * 2 * 7 * 16   # square, mean, multiply by the rsqrt, scale
    assert layer.bytes_read == (2 * 7 * 16 + 16) * F32 and layer.params == 16
    op = only_op(lambda x: ops.rms_normalization(x, scale=ops.ones((16,))), (7, 16))   # the scale: a constant
    assert op.flops == 4 * 2 * 7 * 16 and op.bytes_read == (2 * 7 * 16 + 16) * F32


def test_layer_norm_op_counts_as_the_layer_does():
    gamma, beta = ops.ones((16,)), ops.zeros((16,))
    op = only_op(lambda x: ops.layer_normalization(x, gamma=gamma, beta=beta), (7, 16))
    assert op.flops == (5 + 1 + 1) * 2 * 7 * 16 and op.bytes_read == (2 * 7 * 16 + 2 * 16) * F32


# ---- embeddings --------------------------------------------------------------------------------------------

def test_reversible_embedding_gathers_forward_and_multiplies_in_reverse():
    V, D, T, B = 50, 8, 6, 2
    emb = keras.layers.ReversibleEmbedding(V, D, name="emb")
    ids = keras.Input((T,), dtype="int32")
    hidden = keras.Input((T, D))
    costs = map_model(keras.Model([ids, hidden], [emb(ids), emb(hidden, reverse=True)]), B)
    (forward,) = [c for c in costs if c.input_shapes == ((B, T),)]
    (reverse,) = [c for c in costs if c.input_shapes == ((B, T, D),)]
    assert forward.flops == 0 and forward.bytes_read == B * T * 4 + B * T * D * F32
    assert reverse.flops == 2 * B * T * D * V
    assert reverse.bytes_read == (B * T * D + V * D) * F32 and reverse.bytes_written == B * T * V * F32
    assert reverse.tensor_core


# ---- indexing, gathers, copies, fills, reductions ------------------------------------------------------------

def test_indexing_that_keeps_every_element_is_a_view_and_a_selection_copies_what_it_selects():
    view = only_op(lambda x: x[:, None], (4, 6))
    assert view.bytes == 0
    token = only_op(lambda x: x[:, 0], (4, 6))
    assert token.bytes_read == token.bytes_written == 2 * 6 * F32 and token.flops == 0
    sliced = only_op(lambda x: ops.slice(x, (0, 1, 0), (2, 2, 6)), (4, 6))
    assert sliced.bytes_read == sliced.bytes_written == 2 * 2 * 6 * F32


def test_take_along_axis_reads_its_indices_and_the_gathered_rows():
    cost = only_op(lambda x, i: ops.take_along_axis(x, i, axis=1), (9, 6), (1, 6), dtypes=["float32", "int32"])
    assert cost.bytes_read == 2 * 6 * 4 + 2 * 6 * F32 and cost.bytes_written == 2 * 6 * F32


def test_repeat_copies_and_zeros_like_only_writes():
    rep = only_op(lambda x: ops.repeat(x, 4, axis=2), (5, 2, 8))
    assert rep.flops == 0 and rep.bytes_read == 2 * 5 * 2 * 8 * F32 and rep.bytes_written == 4 * 2 * 5 * 2 * 8 * F32
    zeros = only_op(lambda x: ops.zeros_like(x), (5, 3))
    assert zeros.bytes_read == 0 and zeros.bytes_written == 2 * 5 * 3 * F32


def test_argmax_and_all_reduce_one_flop_per_element_with_their_own_output_dtypes():
    argmax = only_op(lambda x: ops.argmax(x, axis=-1), (7,), dtypes=["int32"])
    assert argmax.flops == 2 * 7 and argmax.bytes_read == 2 * 7 * 4 and argmax.bytes_written == 2 * 4
    every = only_op(lambda m: ops.all(m, axis=-1), (7,), dtypes=["bool"])
    assert every.flops == 2 * 7 and every.bytes_read == 2 * 7 and every.bytes_written == 2


@pytest.mark.parametrize("op", [ops.cos, ops.sin, ops.erf])
def test_transcendental_unary_ops_cost_one_flop_per_element(op):
    assert only_op(op, (3, 4)).flops == 2 * 3 * 4


def test_clip_and_keras_hub_gelu_forms_have_their_own_flops_per_element():
    def quick_gelu(x):
        return x * ops.sigmoid(1.702 * x)

    def gelu_approximate(x):
        return keras.activations.gelu(x, approximate=True)

    quick = only_op(lambda x: keras.layers.Dense(3, use_bias=False, activation=quick_gelu)(x), (4,))
    tanh_form = only_op(lambda x: keras.layers.Dense(3, use_bias=False, activation=gelu_approximate)(x), (4,))
    assert quick.flops == 2 * 2 * 4 * 3 + 6 * 2 * 3        # scale, sigmoid (4), multiply
    assert tanh_form.flops == 2 * 2 * 4 * 3 + 8 * 2 * 3    # counted as GELU
    assert ACTIVATION_FLOPS["quick_gelu"] == 6 and ACTIVATION_FLOPS["gelu_approximate"] == ACTIVATION_FLOPS["gelu"]
