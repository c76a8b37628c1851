"""The walker inside a user layer's traced call(): shapes kept concrete, call-context arguments, constants a call
reads, plain arguments handed to the cost models. Plain Keras layers shaped like the keras_hub ones that need it."""

import keras
import numpy as np
import pytest
from keras import ops

from carm_advisor.mapping import iter_layer_calls, map_model

F32 = 4


class Heads(keras.layers.Layer):
    """Q projection of an attention layer as keras_hub writes it: EinsumDense(output_shape=(None, heads, width)),
    then a reshape by the projection's own ops.shape()."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.query = keras.layers.EinsumDense("btd,dnh->btnh", output_shape=(None, 4, 8), name="query")

    def call(self, x):
        q = self.query(x)
        b, t, n, h = ops.shape(q)
        return ops.reshape(q, (b, t, n * h))


def test_a_sublayer_leaving_a_dimension_unknown_does_not_make_the_ops_after_it_unknown():
    # Keras' EinsumDense keeps the declared None of output_shape; the call reads ops.shape() of its output.
    xi = keras.Input((None, 16))
    inner = keras.Model(xi, Heads(name="heads")(xi), name="backbone")   # built for any sequence length
    x = keras.Input((12, 16))
    calls = {c.path: c for c in iter_layer_calls(keras.Model(x, inner(x)), 2)}
    assert calls["backbone/heads/query"].output_shapes == ((2, 12, 4, 8),)
    assert calls["backbone/heads/reshape"].output_shapes == ((2, 12, 32),)


def test_the_traced_layer_keeps_no_trace_of_the_shapes_it_was_given():
    layer = Heads(name="heads")
    xi = keras.Input((None, 16))
    inner = keras.Model(xi, layer(xi))
    x = keras.Input((12, 16))
    list(iter_layer_calls(keras.Model(x, inner(x)), 2))
    assert "compute_output_spec" not in layer.query.__dict__
    assert layer.query(keras.KerasTensor((3, 5, 16))).shape == (3, None, 4, 8)   # Keras' own answer again


class Mlp(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fc = keras.layers.Dense(8, name="fc")

    def call(self, x):   # no training argument
        return self.fc(x)


class Block(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.mlp = Mlp(name="mlp")

    def call(self, x, training=None):
        return self.mlp(x, training=training)   # as SigLIP's encoder layer calls its MLP


def test_a_sublayer_called_with_training_its_call_does_not_take_is_opened():
    x = keras.Input((6,))
    costs = map_model(keras.Model(x, Block(name="block")(x)), 3)
    assert [(c.name, c.known) for c in costs] == [("block/mlp/fc", True)]
    assert costs[0].flops == 3 * (2 * 6 * 8 + 8)


class CachedAttention(keras.layers.MultiHeadAttention):
    """keras_hub's CachedMultiHeadAttention in small: a call argument MultiHeadAttention's shape methods lack."""

    def call(self, query, value, key=None, attention_mask=None, cache=None, training=None):
        return super().call(query, value, key=key, attention_mask=attention_mask, training=training)


class Decoder(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = CachedAttention(num_heads=2, key_dim=4, name="attention")

    def call(self, x):
        return self.attention(x, x, cache=None)   # as keras_hub's TransformerDecoder (GPT-2, OPT, BART) calls it


def test_a_sublayer_whose_shape_methods_lack_a_call_argument_is_traced_through_its_call():
    x = keras.Input((6, 8))
    (cost,) = map_model(keras.Model(x, Decoder(name="decoder")(x)), 1)
    assert (cost.name, cost.known, cost.output_shapes) == ("decoder/attention", True, ((1, 6, 8),))


class Probe(keras.layers.Layer):
    """Attention pooling as SigLIP's head does it: a learned probe, repeated to the batch, queries the sequence."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="attention")

    def build(self, shape):
        self.probe = self.add_weight(shape=(1, 1, shape[-1]), name="probe")
        self.attention.build((shape[0], 1, shape[-1]), shape)

    def call(self, x):
        probes = ops.repeat(self.probe, ops.shape(x)[0], axis=0)
        return self.attention(probes, x)[:, 0]


def test_a_tensor_made_from_weights_alone_is_read_as_the_query_it_is():
    # B=2, one probe position querying T=10 positions of width 8; 2 heads of 4
    x = keras.Input((10, 8))
    costs = {c.name: c for c in map_model(keras.Model(x, Probe(name="pool")(x)), 2)}
    attention = costs["pool/attention"]
    assert attention.input_shapes[attention.input_shapes.index((2, 1, 8))] == (2, 1, 8)
    B, H, dk, tq, tk, d = 2, 2, 4, 1, 10, 8
    macs = (B * tq * d * H * dk + 2 * B * tk * d * H * dk   # Q of the probe; K and V of the sequence
            + 2 * B * H * tq * tk * dk + B * tq * H * dk * d)   # QK^T and AV; output projection
    biases = B * tq * H * dk + 2 * B * tk * H * dk + B * tq * d
    assert attention.flops == 2 * macs + biases + B * tq * H * dk + 5 * B * H * tq * tk


class Scaled(keras.layers.Layer):
    """A layer computing with its own weight through keras.ops (as keras_hub's heads do)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(6, use_bias=False, name="inner")

    def build(self, shape):
        self.w = self.add_weight(shape=(6, 5), name="w")

    def call(self, x):
        return ops.matmul(self.inner(x), self.w)


def test_a_weight_used_in_keras_ops_directly_is_read_by_that_op():
    x = keras.Input((4,))
    costs = {c.name: c for c in map_model(keras.Model(x, Scaled(name="scaled")(x)), 3)}
    matmul = costs["scaled/matmul"]
    assert matmul.input_shapes == ((3, 6), (6, 5))
    assert matmul.flops == 2 * 3 * 6 * 5
    assert matmul.bytes_read == (3 * 6 + 6 * 5) * F32 and matmul.bytes_written == 3 * 5 * F32


def test_plain_call_arguments_reach_the_cost_model():
    # use_causal_mask=True is no tensor: the attention's masking is counted from it
    x = keras.Input((8, 16))
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")
    causal = map_model(keras.Model(x, mha(x, x, use_causal_mask=True)), 1)[0]
    plain = map_model(keras.Model(x, mha(x, x)), 1)[0]
    assert causal.flops - plain.flops == 2 * 2 * 8 * 8   # 2 selects per score: 2 heads x 8 x 8 scores
    calls = list(iter_layer_calls(keras.Model(x, mha(x, x, use_causal_mask=True)), 1))
    assert calls[0].options == {"use_causal_mask": True}


@pytest.mark.parametrize("dtype, bytes_moved", [("float32", 0), ("float16", 3 * 5 * (F32 + 2))])
def test_a_cast_to_the_dtype_its_input_has_moves_nothing(dtype, bytes_moved):
    x = keras.Input((5,))
    (cast,) = [c for c in map_model(keras.Model(x, ops.cast(x, dtype)), 3) if c.type == "Cast"]
    assert cast.bytes == bytes_moved and cast.flops == 0


def test_constants_of_a_functional_model_are_read_too():
    # a backend tensor (not a KerasTensor) added to the input: the op reads both
    x = keras.Input((4, 6))
    bias = ops.convert_to_tensor(np.ones((1, 4, 6), "float32"))
    (add,) = map_model(keras.Model(x, ops.add(x, bias)), 2)
    assert add.input_shapes == ((2, 4, 6), (1, 4, 6))
    assert add.bytes_read == (2 * 4 * 6 + 4 * 6) * F32 and add.flops == 2 * 4 * 6


def test_a_call_reading_a_constant_is_measured_on_its_keras_tensors_and_costed_with_both():
    # ViT's class token concatenated before the patches: a measurement makes up the patches only and fills them into
    # the recorded arguments, the token included; the cost reads both
    from carm_advisor.measure.layers import argument_builder

    x = keras.Input((16, 8))
    model = keras.Model(x, ops.concatenate([ops.ones((2, 1, 8)), x], axis=1))
    (call,) = iter_layer_calls(model, 2)
    assert call.input_shapes == ((2, 16, 8),)
    assert [(place, shape) for place, shape, _, _ in call.constant_inputs] == [(0, (2, 1, 8))]
    args, kwargs = argument_builder(call)([ops.zeros((2, 16, 8))])
    assert tuple(call.layer(*args, **kwargs).shape) == call.output_shapes[0] == (2, 17, 8)
    (cost,) = map_model(model, 2)
    assert cost.input_shapes == ((2, 1, 8), (2, 16, 8))
    assert cost.bytes_read == (2 * 1 * 8 + 2 * 16 * 8) * F32 and cost.bytes_written == 2 * 17 * 8 * F32


def test_with_constants_puts_each_constant_in_its_place_and_keeps_repeated_tensors_one():
    from carm_advisor.mapping import LayerCall

    # f(x, w, x): x passed twice around a constant w
    call = LayerCall(path="f", layer=None, input_shapes=((2, 3), (2, 3)), output_shapes=((2, 3),),
                     input_dtypes=("float32", "float32"), input_names=("a", "c"), input_same_as=(0, 0),
                     constant_inputs=((1, (3,), "float16", "b"),))
    full = call.with_constants()
    assert full.input_shapes == ((2, 3), (3,), (2, 3))
    assert full.input_dtypes == ("float32", "float16", "float32") and full.input_names == ("a", "b", "c")
    assert full.input_same_as == (0, 1, 0) and full.distinct_inputs() == [0, 1]
    assert full.constant_inputs == () and call.with_constants() == full
