"""Each mapped layer type against a figure computed by hand (written as arithmetic below).

Convention under test: 1 multiply-add = 2 FLOPs; bias 1 per output element; relu 1, sigmoid/tanh 4,
gelu 8, softmax 5 per element; bytes at the compute dtype (float32: 4 bytes).
"""

import keras
import pytest

from carm_advisor.errors import UnknownLayerError
from carm_advisor.mapping import map_model

F32 = 4


def costs_of(layers_or_layer, input_shape, batch=1, input_dtype="float32", **kw):
    """map_model of Input(input_shape) -> layer(s); returns the costs keyed by name."""
    x = keras.Input(input_shape, dtype=input_dtype)
    y = x
    for layer in layers_or_layer if isinstance(layers_or_layer, list) else [layers_or_layer]:
        y = layer(y)
    return {c.name: c for c in map_model(keras.Model(x, y), batch_size=batch, **kw)}


def only(costs):
    (cost,) = costs.values()
    return cost


# ---- convolutions -------------------------------------------------------------------------------

def test_conv2d_same_padding_counts_two_flops_per_mac_plus_bias_and_compulsory_bytes():
    cost = only(costs_of(keras.layers.Conv2D(128, 3, padding="same"), (56, 56, 64)))
    # 2 * (3*3*64 MACs per output) * (56*56*128 outputs) + 56*56*128 bias adds
    assert cost.flops == 2 * 3 * 3 * 64 * 128 * 56 * 56 + 56 * 56 * 128
    assert cost.bytes_read == (56 * 56 * 64 + 3 * 3 * 64 * 128 + 128) * F32
    assert cost.bytes_written == 56 * 56 * 128 * F32
    assert cost.tensor_core and cost.op_class == "matmul" and cost.known
    assert cost.params == 3 * 3 * 64 * 128 + 128


def test_conv2d_strided_valid_with_fused_relu_counts_bias_and_relu_per_output():
    cost = only(costs_of(keras.layers.Conv2D(32, 3, strides=2, activation="relu"), (33, 33, 16)))
    # valid, stride 2: (33 - 3) // 2 + 1 = 16 per side
    assert cost.output_shapes == ((1, 16, 16, 32),)
    assert cost.flops == 2 * 3 * 3 * 16 * 32 * 16 * 16 + 16 * 16 * 32 + 16 * 16 * 32


def test_conv2d_dilated_uses_the_dilated_output_size():
    cost = only(costs_of(keras.layers.Conv2D(8, 3, dilation_rate=2), (32, 32, 8)))
    # effective kernel 5: 32 - 5 + 1 = 28 per side
    assert cost.flops == 2 * 3 * 3 * 8 * 8 * 28 * 28 + 28 * 28 * 8


def test_grouped_conv2d_counts_input_channels_per_group_and_stays_on_tensor_cores():
    cost = only(costs_of(keras.layers.Conv2D(64, 3, padding="same", groups=4, use_bias=False), (16, 16, 32)))
    assert cost.flops == 2 * 3 * 3 * (32 // 4) * 64 * 16 * 16
    assert cost.bytes_read == (16 * 16 * 32 + 3 * 3 * 8 * 64) * F32
    assert cost.tensor_core


def test_grouped_conv_with_one_channel_per_group_is_depthwise_on_cuda_cores():
    cost = only(costs_of(keras.layers.Conv2D(16, 3, padding="same", groups=16, use_bias=False), (8, 8, 16)))
    assert cost.flops == 2 * 3 * 3 * 1 * 8 * 8 * 16
    assert not cost.tensor_core and "CUDA cores" in cost.notes


def test_conv1d_causal_dilated_keeps_the_length():
    cost = only(costs_of(keras.layers.Conv1D(32, 5, padding="causal", dilation_rate=2), (100, 16), batch=3))
    assert cost.output_shapes == ((3, 100, 32),)
    assert cost.flops == 3 * (2 * 5 * 16 * 32 * 100 + 100 * 32)


def test_conv3d_valid():
    cost = only(costs_of(keras.layers.Conv3D(6, 3), (8, 8, 8, 4)))
    assert cost.flops == 2 * 27 * 4 * 6 * 6 * 6 * 6 + 6 * 6 * 6 * 6


def test_conv2d_channels_first_reads_channels_from_axis_1():
    cost = only(costs_of(keras.layers.Conv2D(10, 3, padding="same", data_format="channels_first"), (4, 12, 12)))
    assert cost.flops == 2 * 3 * 3 * 4 * 10 * 12 * 12 + 10 * 12 * 12


def test_depthwise_conv2d_with_multiplier_and_stride_on_cuda_cores():
    cost = only(costs_of(keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2), (32, 32, 8)))
    # outputs 16*16*(8*2); 3*3 MACs each; bias per output
    assert cost.flops == 2 * 3 * 3 * 16 * 16 * 16 + 16 * 16 * 16
    assert cost.bytes_read == (32 * 32 * 8 + 3 * 3 * 8 * 2 + 16) * F32
    assert not cost.tensor_core and "CUDA cores" in cost.notes


def test_depthwise_conv1d():
    cost = only(costs_of(keras.layers.DepthwiseConv1D(5, use_bias=False), (20, 6)))
    assert cost.flops == 2 * 5 * 16 * 6


def test_separable_conv2d_is_split_into_depthwise_and_pointwise_costs():
    costs = costs_of(keras.layers.SeparableConv2D(16, 3, padding="same", name="sep"), (32, 32, 8))
    dw, pw = costs["sep:depthwise"], costs["sep:pointwise"]
    assert dw.flops == 2 * 3 * 3 * 32 * 32 * 8
    assert pw.flops == 2 * 8 * 16 * 32 * 32 + 32 * 32 * 16
    assert dw.bytes_written == 32 * 32 * 8 * F32 == pw.bytes_read - (8 * 16 + 16) * F32
    assert not dw.tensor_core and pw.tensor_core
    assert dw.type == pw.type == "SeparableConv2D"


def test_separable_conv1d_strided_with_multiplier():
    costs = costs_of(keras.layers.SeparableConv1D(4, 3, strides=2, depth_multiplier=2, name="s"), (11, 3))
    # length (11 - 3) // 2 + 1 = 5; intermediate 5 x (3*2)
    assert costs["s:depthwise"].flops == 2 * 3 * 5 * 6
    assert costs["s:pointwise"].flops == 2 * 6 * 4 * 5 + 5 * 4


def test_conv2d_transpose_counts_each_input_scattering_the_kernel():
    cost = only(costs_of(keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same"), (8, 8, 16)))
    assert cost.output_shapes == ((1, 16, 16, 4),)
    assert cost.flops == 2 * 8 * 8 * 16 * 3 * 3 * 4 + 16 * 16 * 4
    assert cost.tensor_core


def test_conv1d_and_conv3d_transpose():
    c1 = only(costs_of(keras.layers.Conv1DTranspose(2, 4, strides=2, use_bias=False), (5, 3)))
    assert c1.flops == 2 * 5 * 3 * 4 * 2
    c3 = only(costs_of(keras.layers.Conv3DTranspose(2, 2, strides=2, use_bias=False), (2, 2, 2, 3)))
    assert c3.flops == 2 * 8 * 3 * 8 * 2


# ---- dense, attention, recurrent ----------------------------------------------------------------

def test_dense_on_3d_input_with_gelu():
    cost = only(costs_of(keras.layers.Dense(32, activation="gelu"), (10, 64), batch=4))
    # 4*10 rows x 64 in x 32 out; bias and gelu (8) per output element
    assert cost.flops == 2 * 4 * 10 * 64 * 32 + 4 * 10 * 32 + 8 * 4 * 10 * 32
    assert cost.bytes_read == (4 * 10 * 64 + 64 * 32 + 32) * F32


def test_einsum_dense_counts_the_contraction():
    layer = keras.layers.EinsumDense("abc,cd->abd", output_shape=(10, 32), bias_axes="d")
    cost = only(costs_of(layer, (10, 64), batch=2))
    assert cost.flops == 2 * 2 * 10 * 64 * 32 + 2 * 10 * 32
    assert cost.tensor_core


def test_multi_head_attention_cross_attention_hand_count():
    q_in, v_in = keras.Input((10, 16)), keras.Input((12, 8))
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    model = keras.Model([q_in, v_in], mha(q_in, v_in))
    (cost,) = map_model(model, 1)
    macs = (10 * 16 * 2 * 4      # Q projection
            + 12 * 8 * 2 * 4     # K projection (key = value)
            + 12 * 8 * 2 * 4     # V projection
            + 2 * 10 * 12 * 4    # QK^T per head
            + 2 * 10 * 12 * 4    # AV per head
            + 10 * 2 * 4 * 16)   # output projection back to 16
    biases = 10 * 8 + 12 * 8 + 12 * 8 + 10 * 16
    scale = 10 * 8               # Q * 1/sqrt(key_dim)
    softmax = 5 * 2 * 10 * 12
    assert cost.flops == 2 * macs + biases + scale + softmax
    assert cost.tensor_core and cost.extra["intermediate_bytes"] > 0


def test_einsum_dense_with_a_none_output_dim_takes_it_from_the_fixed_input():
    # as in the Keras docs: output_shape=(None, 7) leaves the sequence axis "b" to the input (12)
    layer = keras.layers.EinsumDense("abc,cd->abd", output_shape=(None, 7), bias_axes="d")
    cost = only(costs_of(layer, (12, 16), batch=2))
    assert cost.output_shapes == ((2, 12, 7),)
    assert cost.flops == 2 * 2 * 12 * 16 * 7 + 2 * 12 * 7   # 2 FLOPs per MAC + bias per output
    assert cost.bytes_read == (2 * 12 * 16 + 16 * 7 + 7) * F32


def _mha_weights(d_q, d_k, d_v, heads, key_dim, value_dim, d_out):
    """Elements of a MultiHeadAttention's kernels and biases (query, key, value, output)."""
    return (d_q * heads * key_dim + heads * key_dim + d_k * heads * key_dim + heads * key_dim
            + d_v * heads * value_dim + heads * value_dim + heads * value_dim * d_out + d_out)


def test_multi_head_attention_with_a_key_projects_the_key_at_the_key_width():
    # B=2, query (10, 48), value (20, 32), key (20, 24), 2 heads, key_dim = value_dim = 16
    q_in, v_in, k_in = keras.Input((10, 48)), keras.Input((20, 32)), keras.Input((20, 24))
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16, name="mha")
    (cost,) = map_model(keras.Model([q_in, v_in, k_in], mha(q_in, v_in, key=k_in)), 2)
    B, H, dk, dv, tq, tk = 2, 2, 16, 16, 10, 20
    macs = (B * tq * 48 * H * dk        # Q projection
            + B * tk * 24 * H * dk      # K projection of the key, width 24 (not the value's 32)
            + B * tk * 32 * H * dv      # V projection
            + B * H * tq * tk * dk      # QK^T
            + B * H * tq * tk * dv      # AV
            + B * tq * H * dv * 48)     # output projection
    biases = B * tq * H * dk + B * tk * H * dk + B * tk * H * dv + B * tq * 48
    scale = B * tq * H * dk
    softmax = 5 * B * H * tq * tk
    assert cost.flops == 2 * macs + biases + scale + softmax == 326_240
    # query, value and key are each read, and the weights
    assert cost.bytes_read == (B * 10 * 48 + B * 20 * 32 + B * 20 * 24 + _mha_weights(48, 24, 32, H, dk, dv, 48)) * F32


def test_multi_head_attention_mask_is_not_taken_for_the_key():
    # B=2, query (10, 48), value (32, 32), attention_mask (10, 32) bool: key = value, Tk = 32
    q_in, v_in, m_in = keras.Input((10, 48)), keras.Input((32, 32)), keras.Input((10, 32), dtype="bool")
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16, name="mha")
    (cost,) = map_model(keras.Model([q_in, v_in, m_in], mha(q_in, v_in, attention_mask=m_in)), 2)
    B, H, dk, dv, tq, tk = 2, 2, 16, 16, 10, 32
    macs = (B * tq * 48 * H * dk + B * tk * 32 * H * dk + B * tk * 32 * H * dv
            + B * H * tq * tk * dk + B * H * tq * tk * dv + B * tq * H * dv * 48)
    biases = B * tq * H * dk + B * tk * H * dk + B * tk * H * dv + B * tq * 48
    scale = B * tq * H * dk
    softmax = 5 * B * H * tq * tk
    masking = 2 * B * H * tq * tk   # Keras' masked softmax: a select before it and one after it, per score
    assert cost.flops == 2 * macs + biases + scale + softmax + masking == 482_240
    # query and value at float32, the weights, and the mask at its own dtype (bool: 1 byte)
    assert cost.bytes_read == ((B * 10 * 48 + B * 32 * 32 + _mha_weights(48, 32, 32, H, dk, dv, 48)) * F32
                               + B * 10 * 32 * 1)


def test_multi_head_self_attention_reads_its_one_input_once():
    # mha(x, x): query = value = key = x, one tensor in memory: its bytes count once
    x = keras.Input((8, 16))
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    (cost,) = map_model(keras.Model(x, mha(x, x)), 2)
    assert cost.bytes_read == (2 * 8 * 16 + _mha_weights(16, 16, 16, 2, 4, 4, 16)) * F32
    assert cost.bytes_written == 2 * 8 * 16 * F32


def test_lstm_gru_simple_rnn_hand_counts():
    shape, batch = (5, 3), 2  # 5 steps, 3 features, 4 units
    steps = batch * 5
    lstm = only(costs_of(keras.layers.LSTM(4), shape, batch))
    # (3+4)*4*4 MACs; 4*4 bias; 4*4 x+h adds; 4*(3 sigmoid*4 + 2 tanh*4 + 4)
    assert lstm.flops == steps * (2 * (3 + 4) * 16 + 16 + 16 + 4 * (3 * 4 + 2 * 4 + 4))
    gru = only(costs_of(keras.layers.GRU(4), shape, batch))
    # reset_after: 2 bias vectors of 3*4; 3*4 adds; 4*(2 sigmoid*4 + tanh 4 + 5)
    assert gru.flops == steps * (2 * (3 + 4) * 12 + 24 + 12 + 4 * (2 * 4 + 4 + 5))
    rnn = only(costs_of(keras.layers.SimpleRNN(4), shape, batch))
    assert rnn.flops == steps * (2 * (3 + 4) * 4 + 4 + 4 + 4 * 4)
    assert lstm.tensor_core and gru.tensor_core


def test_bidirectional_lstm_is_both_directions():
    cost = only(costs_of(keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True)), (5, 3), 2))
    one_direction = 2 * 5 * (2 * (3 + 4) * 16 + 16 + 16 + 4 * (3 * 4 + 2 * 4 + 4))
    assert cost.flops == 2 * one_direction  # concat merge: no FLOPs
    assert cost.bytes_written == 2 * 5 * 8 * F32


def test_time_distributed_dense_is_the_inner_cost_over_all_steps():
    cost = only(costs_of(keras.layers.TimeDistributed(keras.layers.Dense(8)), (5, 3), 2))
    assert cost.flops == 2 * (2 * 5) * 3 * 8 + 2 * 5 * 8
    assert cost.type == "TimeDistributed"


def test_embedding_reads_indices_and_gathered_rows_not_the_table():
    cost = only(costs_of(keras.layers.Embedding(1000, 16), (7,), batch=2, input_dtype="int32"))
    assert cost.flops == 0
    assert cost.bytes_read == 2 * 7 * 4 + 2 * 7 * 16 * F32
    assert cost.bytes_written == 2 * 7 * 16 * F32


def test_dot_layer_batched_matmul():
    a, b = keras.Input((3, 5)), keras.Input((5, 7))
    (cost,) = map_model(keras.Model([a, b], keras.layers.Dot(axes=(2, 1))([a, b])), 2)
    assert cost.flops == 2 * 2 * 3 * 7 * 5


# ---- pooling, normalisation, activations, merges, data movement ---------------------------------

def test_pooling_window_per_output_and_global_pooling_per_input():
    assert only(costs_of(keras.layers.MaxPooling2D(2), (8, 8, 4))).flops == 4 * 4 * 4 * (2 * 2)
    assert only(costs_of(keras.layers.AveragePooling2D(3, strides=1), (8, 8, 4))).flops == 6 * 6 * 4 * 9
    assert only(costs_of(keras.layers.MaxPooling1D(3), (9, 2))).flops == 3 * 2 * 3
    assert only(costs_of(keras.layers.AveragePooling3D(2), (4, 4, 4, 1))).flops == 8 * 8
    assert only(costs_of(keras.layers.GlobalAveragePooling2D(), (8, 8, 4))).flops == 8 * 8 * 4
    assert only(costs_of(keras.layers.GlobalMaxPooling1D(), (9, 2))).flops == 18


def test_batch_normalization_two_flops_per_element_and_reads_its_four_statistics():
    cost = only(costs_of(keras.layers.BatchNormalization(), (8, 8, 4)))
    assert cost.flops == 2 * 8 * 8 * 4
    assert cost.bytes_read == (8 * 8 * 4 + 4 * 4) * F32


def test_layer_group_unit_normalization_counts():
    assert only(costs_of(keras.layers.LayerNormalization(), (10, 6))).flops == 7 * 60
    assert only(costs_of(keras.layers.LayerNormalization(center=False), (10, 6))).flops == 6 * 60
    assert only(costs_of(keras.layers.GroupNormalization(groups=2), (4, 4, 6))).flops == 7 * 96
    assert only(costs_of(keras.layers.UnitNormalization(), (6,))).flops == 3 * 6


def test_activation_layers_per_element_constants():
    n = 3 * 5
    assert only(costs_of(keras.layers.ReLU(), (3, 5))).flops == 1 * n
    assert only(costs_of(keras.layers.ReLU(max_value=6.0), (3, 5))).flops == 2 * n
    assert only(costs_of(keras.layers.Activation("sigmoid"), (3, 5))).flops == 4 * n
    assert only(costs_of(keras.layers.Activation("swish"), (3, 5))).flops == 5 * n
    assert only(costs_of(keras.layers.Softmax(), (3, 5))).flops == 5 * n
    assert only(costs_of(keras.layers.LeakyReLU(), (3, 5))).flops == 2 * n
    assert only(costs_of(keras.layers.PReLU(), (3, 5))).flops == 2 * n
    assert only(costs_of(keras.layers.ELU(), (3, 5))).flops == 4 * n


@pytest.mark.parametrize("activation", ["linear", None])
def test_a_linear_activation_layer_does_no_work(activation):
    # keras.activations.linear returns its input: no kernel, no bytes (ConvNeXt's *_identity layers).
    cost = only(costs_of(keras.layers.Activation(activation), (3, 5)))
    assert (cost.flops, cost.bytes, cost.op_class) == (0, 0, "none")


def test_common_keras_ops_are_costed_by_hand_counts():
    from keras import ops

    class Ops(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(8, name="d")

        def call(self, x):
            y = self.d(ops.pad(x, [[0, 0], [1, 1]]))                          # (4, 6) -> (4, 8)
            y = ops.where(y > 0, y, ops.abs(y))
            return ops.squeeze(ops.expand_dims(ops.clip(y, 0, 1), 1), 1)

    model = Ops()
    model(keras.ops.zeros((2, 6)))
    by = {c.type: c for c in map_model(model, 4)}
    assert all(c.known for c in by.values()), [t for t, c in by.items() if not c.known]
    n = 4 * 8
    assert (by["Pad"].flops, by["Pad"].bytes) == (0, 4 * 6 * 4 + n * 4)      # a copy: read the input, write the pad
    assert by["Greater"].flops == n and by["Absolute"].flops == n and by["Where"].flops == n
    assert by["Greater"].bytes == n * 4 + n * 1                                 # y read at 4 bytes, a bool written
    assert by["Where"].bytes == n * 1 + 2 * n * 4 + n * 4                      # bool condition, y, abs(y); written
    assert by["Clip"].flops == 2 * n
    assert (by["ExpandDims"].bytes, by["Squeeze"].bytes) == (0, 0)           # views

    ids = keras.Input((10,), dtype="int32")
    masked = keras.Model(ids, keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8, mask_zero=True)(ids)))
    not_equal = next(c for c in map_model(masked, 4) if c.type == "NotEqual")   # the mask: ids != 0
    assert not_equal.known and not_equal.flops == 4 * 10
    assert not_equal.bytes == 4 * 10 * 4 + 4 * 10 * 1                          # int32 ids read, bools written


def test_a_cast_reads_at_its_inputs_dtype_and_writes_at_its_target():
    from keras import ops

    class Casts(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(8, name="d")

        def call(self, x):
            return ops.cast(ops.cast(self.d(x), "float16"), "float32")

    model = Casts()
    model(keras.ops.zeros((2, 4)))
    down, up = [c for c in map_model(model, 8) if c.type == "Cast"]
    n = 8 * 8
    assert (down.bytes_read, down.bytes_written) == (n * 4, n * 2)
    assert (up.bytes_read, up.bytes_written) == (n * 2, n * 4)


def test_a_linear_activation_that_casts_is_a_copy_not_free():
    # Keras' mixed-precision guide ends a model with Activation("linear", dtype="float32"): a float16 -> float32 cast.
    inputs = keras.Input((1024,))
    x = keras.layers.Dense(1000, dtype="mixed_float16", name="fc")(inputs)
    out = keras.layers.Activation("linear", dtype="float32", name="to32")(x)
    cast = next(c for c in map_model(keras.Model(inputs, out), 64) if c.name == "to32")
    assert (cast.bytes_read, cast.bytes_written) == (64 * 1000 * 2, 64 * 1000 * 4)


def test_merge_layers_count_binary_ops_per_output():
    a, b, c = keras.Input((4,)), keras.Input((4,)), keras.Input((4,))
    costs = map_model(keras.Model([a, b, c], [
        keras.layers.Add()([a, b, c]), keras.layers.Multiply()([a, b]), keras.layers.Average()([a, b]),
        keras.layers.Maximum()([a, b]), keras.layers.Subtract()([a, b]), keras.layers.Concatenate()([a, b, c]),
    ]), 1)
    by_type = {c.type: c for c in costs}
    assert by_type["Add"].flops == 2 * 4
    assert by_type["Add"].bytes_read == 3 * 4 * F32
    assert by_type["Multiply"].flops == 1 * 4
    assert by_type["Average"].flops == 2 * 4
    assert by_type["Maximum"].flops == 4 and by_type["Subtract"].flops == 4
    concat = by_type["Concatenate"]
    assert concat.flops == 0 and concat.bytes_read == concat.bytes_written == 12 * F32


def test_views_and_inference_identities_cost_nothing_while_copies_cost_bytes():
    costs = costs_of([keras.layers.Dropout(0.5, name="drop"), keras.layers.GaussianNoise(0.1, name="noise"),
                      keras.layers.SpatialDropout2D(0.2, name="sdrop"), keras.layers.ZeroPadding2D(1, name="pad"),
                      keras.layers.Cropping2D(1, name="crop"), keras.layers.Permute((2, 1, 3), name="perm"),
                      keras.layers.Reshape((4, 16), name="reshape"), keras.layers.Flatten(name="flat"),
                      keras.layers.RepeatVector(2, name="rep")], (4, 4, 4))
    for name in ("drop", "noise", "sdrop", "reshape", "flat"):
        assert costs[name].flops == 0 and costs[name].bytes == 0, name
    assert costs["pad"].flops == 0
    assert costs["pad"].bytes == (4 * 4 * 4 + 6 * 6 * 4) * F32
    assert costs["crop"].bytes == (6 * 6 * 4 + 4 * 4 * 4) * F32
    assert costs["perm"].bytes == 2 * 64 * F32
    assert costs["rep"].bytes == (64 + 128) * F32


def test_upsampling_and_rescaling():
    assert only(costs_of(keras.layers.UpSampling2D(2), (3, 3, 2))).flops == 0
    assert only(costs_of(keras.layers.UpSampling2D(2, interpolation="bilinear"), (3, 3, 2))).flops == 7 * 6 * 6 * 2
    assert only(costs_of(keras.layers.Rescaling(1 / 255), (3, 3, 2))).flops == 18
    assert only(costs_of(keras.layers.Rescaling(1 / 127.5, offset=-1), (3, 3, 2))).flops == 2 * 18
    assert only(costs_of(keras.layers.Normalization(mean=0.5, variance=4.0), (3, 3, 2))).flops == 2 * 18


def test_keras_ops_elementwise_nodes_are_costed():
    x, y = keras.Input((6,)), keras.Input((6,))
    (cost,) = map_model(keras.Model([x, y], keras.ops.multiply(x, y)), 2)
    assert cost.type == "Multiply" and cost.flops == 2 * 6 and cost.bytes_read == 2 * 2 * 6 * F32


def test_a_tensor_passed_twice_is_read_once():
    x = keras.Input((6,))
    (cost,) = map_model(keras.Model(x, keras.ops.multiply(x, x)), 2)
    # x * x: one multiply per element, but x is one tensor in memory: 2*6 elements read once
    assert cost.flops == 2 * 6 and cost.bytes_read == 2 * 6 * F32


# ---- nesting, sharing, subclasses, unknown layers, dtypes ----------------------------------------

def test_nested_model_and_shared_layer_are_each_counted_per_call():
    xi = keras.Input((8,))
    inner = keras.Model(xi, keras.layers.Dense(4, name="d_in")(xi), name="inner")
    x = keras.Input((8,))
    shared = keras.layers.Dense(4, name="shared")
    y = keras.layers.Add(name="add")([inner(x), shared(x), shared(x)])
    costs = {c.name: c for c in map_model(keras.Model(x, y), 1)}
    dense_flops = 2 * 8 * 4 + 4
    assert costs["inner/d_in"].flops == costs["shared"].flops == costs["shared#1"].flops == dense_flops
    assert sum(c.flops for c in costs.values()) == 3 * dense_flops + 2 * 4


def test_user_subclass_of_conv2d_is_costed_as_conv2d():
    class MyConv(keras.layers.Conv2D):
        pass

    cost = only(costs_of(MyConv(4, 1, use_bias=False), (5, 5, 2)))
    assert cost.known and cost.type == "MyConv"
    assert cost.flops == 2 * 2 * 4 * 25


def test_unknown_layer_is_reported_unknown_not_zero_and_strict_raises():
    x = keras.Input((4,))
    y = keras.layers.Lambda(lambda t: t * 2, name="lam")(x)
    model = keras.Model(x, keras.layers.Dense(2)(y))
    costs = map_model(model, 1)
    assert [c.known for c in costs] == [False, True]
    assert costs[0].name == "lam" and "no cost model for Lambda" in costs[0].notes and costs[0].ai is None
    with pytest.raises(UnknownLayerError, match=r"layer 'lam' \(Lambda\) has no cost model"):
        map_model(model, 1, strict=True)


def test_mixed_bfloat16_policy_halves_the_bytes_and_keeps_the_flops():
    f32 = only(costs_of(keras.layers.Conv2D(8, 3), (10, 10, 4)))
    bf16 = only(costs_of(keras.layers.Conv2D(8, 3, dtype="mixed_bfloat16"), (10, 10, 4)))
    assert bf16.compute_dtype == "bfloat16" and f32.compute_dtype == "float32"
    assert bf16.flops == f32.flops
    assert 2 * bf16.bytes_read == f32.bytes_read and 2 * bf16.bytes_written == f32.bytes_written
    assert bf16.tensor_core


def test_compute_dtype_override_sets_bytes_and_tensor_core_eligibility():
    layer = keras.layers.Dense(8)
    int8 = only(costs_of(layer, (16,), compute_dtype="int8"))
    assert int8.bytes_read == 16 + 16 * 8 + 8 and int8.tensor_core
    f64 = only(costs_of(keras.layers.Dense(8), (16,), compute_dtype="float64"))
    assert f64.bytes_read == (16 + 16 * 8 + 8) * 8 and not f64.tensor_core
