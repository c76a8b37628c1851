"""iter_layer_calls: one call per layer call, concrete shapes from Keras' symbolic graph, no execution."""

import keras
import pytest

from carm_advisor.errors import MappingError
from carm_advisor.mapping import iter_layer_calls, map_model


def test_functional_model_yields_each_layer_in_order_with_batch_filled_and_no_input_layer():
    x = keras.Input((8, 8, 3))
    y = keras.layers.Conv2D(4, 3, name="c")(x)
    y = keras.layers.Flatten(name="f")(y)
    model = keras.Model(x, keras.layers.Dense(2, name="d")(y))

    calls = list(iter_layer_calls(model, batch_size=5))

    assert [c.path for c in calls] == ["c", "f", "d"]
    assert calls[0].input_shapes == ((5, 8, 8, 3),)
    assert calls[0].output_shapes == ((5, 6, 6, 4),)
    assert calls[1].output_shapes == ((5, 6 * 6 * 4),)
    assert calls[2].input_dtypes == ("float32",)


def test_shared_layer_called_twice_yields_two_calls_with_suffixed_path():
    a, b = keras.Input((3,)), keras.Input((3,))
    shared = keras.layers.Dense(2, name="shared")
    model = keras.Model([a, b], keras.layers.Add(name="sum")([shared(a), shared(b)]))

    paths = [c.path for c in iter_layer_calls(model, 1)]

    assert sorted(paths) == ["shared", "shared#1", "sum"]
    assert paths[-1] == "sum"


def test_nested_models_are_walked_with_slash_paths_and_are_not_leaves():
    inner_seq = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, name="inner_dense")], name="seq")
    xi = keras.Input((6,))
    inner_fn = keras.Model(xi, keras.layers.Dense(2, name="fn_dense")(xi), name="fn")
    x = keras.Input((4,))
    model = keras.Model(x, inner_fn(inner_seq(x)))

    calls = list(iter_layer_calls(model, 3))

    assert [c.path for c in calls] == ["seq/inner_dense", "fn/fn_dense"]
    assert calls[1].input_shapes == ((3, 6),)


def test_nested_model_built_for_unknown_spatial_size_gets_the_outer_concrete_shapes():
    xi = keras.Input((None, None, 3))
    inner = keras.Model(xi, keras.layers.Conv2D(8, 3, strides=2, padding="same", name="conv")(xi), name="backbone")
    x = keras.Input((32, 32, 3))
    model = keras.Model(x, keras.layers.GlobalAveragePooling2D(name="gap")(inner(x)))

    calls = {c.path: c for c in iter_layer_calls(model, 2)}

    assert calls["backbone/conv"].input_shapes == ((2, 32, 32, 3),)
    assert calls["backbone/conv"].output_shapes == ((2, 16, 16, 8),)
    assert calls["gap"].input_shapes == ((2, 16, 16, 8),)


def test_keras_ops_calls_in_a_functional_graph_are_yielded_as_operations():
    x = keras.Input((4,))
    y = keras.ops.add(keras.layers.Dense(4, name="d")(x), x)
    calls = list(iter_layer_calls(keras.Model(x, y), 1))

    assert [type(c.layer).__name__ for c in calls] == ["Dense", "Add"]
    assert calls[1].input_shapes == ((1, 4), (1, 4))


def test_built_subclassed_model_lists_its_layers_from_their_build_shapes():
    class Two(keras.Model):
        def __init__(self):
            super().__init__()
            self.first = keras.layers.Dense(5, name="first")
            self.second = keras.layers.Dense(2, name="second")

        def call(self, x):
            return self.second(self.first(x))

    model = Two()
    model(keras.ops.zeros((3, 7)))

    calls = list(iter_layer_calls(model, 4))

    assert [(c.path, c.input_shapes, c.output_shapes) for c in calls] == [
        ("first", ((4, 7),), ((4, 5),)),
        ("second", ((4, 5),), ((4, 2),)),
    ]


def test_unbuilt_subclassed_model_is_a_mapping_error_asking_to_build_it():
    class Unbuilt(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(2)

        def call(self, x):
            return self.d(x)

    with pytest.raises(MappingError, match="build or call"):
        list(iter_layer_calls(Unbuilt(), 1))


def test_unbuilt_sequential_is_a_mapping_error():
    with pytest.raises(MappingError, match="built"):
        list(iter_layer_calls(keras.Sequential([keras.layers.Dense(2)]), 1))


def test_unknown_non_batch_input_dimension_is_a_mapping_error():
    x = keras.Input((None, None, 3))
    model = keras.Model(x, keras.layers.Conv2D(2, 3)(x))
    with pytest.raises(MappingError, match="fixed input shape"):
        list(iter_layer_calls(model, 1))


def test_bad_batch_size_is_a_mapping_error():
    x = keras.Input((3,))
    with pytest.raises(MappingError, match="batch_size"):
        list(iter_layer_calls(keras.Model(x, keras.layers.Dense(1)(x)), 0))


# ---- a batch the model fixes --------------------------------------------------------------------

def test_a_fixed_batch_dimension_is_replaced_by_the_requested_batch():
    x = keras.Input((256,), batch_size=3)
    model = keras.Model(x, keras.layers.Dense(256, name="d")(x))

    (call,) = iter_layer_calls(model, 64)
    assert call.input_shapes == ((64, 256),) and call.output_shapes == ((64, 256),)
    (cost,) = map_model(model, 64)
    # 64 rows x 256 x 256 multiply-adds + a bias add per output element (at batch 3 it was 394 k)
    assert cost.flops == 2 * 64 * 256 * 256 + 64 * 256


def test_a_fixed_batch_flows_through_reshapes_and_nested_models():
    xi = keras.Input((4, 4), batch_size=3)
    inner = keras.Model(xi, keras.layers.Flatten(name="flat")(xi), name="inner")
    x = keras.Input((4, 4), batch_size=3)
    model = keras.Model(x, keras.layers.Dense(2, name="d")(inner(x)))

    calls = {c.path: c for c in iter_layer_calls(model, 10)}
    assert calls["inner/flat"].output_shapes == ((10, 16),)
    assert calls["d"].input_shapes == ((10, 16),) and calls["d"].output_shapes == ((10, 2),)


# ---- subclassed models: call() traced on KerasTensors --------------------------------------------

def test_subclassed_model_with_weight_free_sublayers_is_mapped_in_call_order():
    class ConvNet(keras.Model):
        def __init__(self):
            super().__init__()
            self.head = keras.layers.Dense(10, name="head")         # attribute order: head first
            self.drop = keras.layers.Dropout(0.5, name="drop")
            self.conv = keras.layers.Conv2D(4, 3, name="conv")
            self.pool = keras.layers.GlobalAveragePooling2D(name="pool")
            self.act = keras.layers.Activation("relu", name="act")

        def call(self, x):
            return self.head(self.drop(self.pool(self.act(self.conv(x)))))

    model = ConvNet()
    model(keras.ops.zeros((2, 8, 8, 3)))
    costs = map_model(model, 5)

    assert [c.name for c in costs] == ["conv", "act", "pool", "drop", "head"]
    by = {c.name: c for c in costs}
    assert by["conv"].output_shapes == ((5, 6, 6, 4),)
    assert by["act"].flops == 5 * 6 * 6 * 4                    # relu: 1 per element
    assert by["pool"].flops == 5 * 6 * 6 * 4                   # global average: 1 per input element
    assert by["drop"].flops == 0 and by["drop"].bytes == 0      # identity at inference
    assert by["head"].flops == 2 * 5 * 4 * 10 + 5 * 10


def test_subclassed_layer_called_twice_is_counted_twice():
    class Twice(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(64, name="d")
            self.o = keras.layers.Dense(64, name="o")

        def call(self, x):
            return self.o(self.d(self.d(x)))

    model = Twice()
    model(keras.ops.zeros((2, 64)))
    costs = map_model(model, 1)

    assert [c.name for c in costs] == ["d", "d#1", "o"]
    assert sum(c.flops for c in costs) == 3 * (2 * 64 * 64 + 64)     # 24,768 per sample
    # the trace leaves the user's layers as they were: no graph nodes added
    assert all(not layer._inbound_nodes for layer in model._flatten_layers(include_self=True))


def test_keras_ops_in_a_subclassed_call_are_yielded():
    class Attn(keras.Model):
        def __init__(self):
            super().__init__()
            self.q = keras.layers.Dense(8, name="q")
            self.k = keras.layers.Dense(8, name="k")

        def call(self, x):
            return keras.ops.matmul(self.q(x), keras.ops.transpose(self.k(x), (0, 2, 1)))

    model = Attn()
    model(keras.ops.zeros((2, 5, 4)))
    costs = map_model(model, 3)

    assert [(c.name, c.type) for c in costs] == [
        ("q", "Dense"), ("k", "Dense"), ("transpose", "Transpose"), ("matmul", "Matmul")]
    # (3, 5, 8) @ (3, 8, 5): 3*5*5 outputs, 8 multiply-adds each
    assert costs[-1].flops == 2 * 3 * 5 * 5 * 8
    assert [c.name for c in map_model(model, 3)] == [c.name for c in costs]   # the same names every time


def test_user_layer_made_of_sublayers_is_opened_per_call():
    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.a = keras.layers.Dense(8, name="a")

        def call(self, x):
            return self.a(x) + x

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.blk = Block(name="blk")

        def call(self, x, training=None):
            return self.blk(self.blk(x))

    model = Net()
    model(keras.ops.zeros((2, 8)))
    costs = map_model(model, 2)

    assert [c.name for c in costs] == ["blk/a", "blk/add", "blk#1/a", "blk#1/add"]
    assert costs[1].flops == 2 * 8    # x + a(x): one add per element


def test_untraceable_subclassed_call_falls_back_with_a_lower_bound_warning():
    class Untraceable(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(4, name="d")
            self.drop = keras.layers.Dropout(0.1, name="drop")

        def call(self, x):
            scale = float(keras.ops.convert_to_numpy(keras.ops.max(x)))  # needs values: no symbolic trace
            return self.drop(self.d(x)) * scale

    model = Untraceable()
    model(keras.ops.zeros((2, 6)))
    with pytest.warns(RuntimeWarning, match="weight-free layers drop are not counted: the totals are a lower bound"):
        costs = map_model(model, 3)

    assert [c.name for c in costs] == ["d"]                    # the weight-free Dropout is named, not fatal
    assert costs[0].flops == 2 * 3 * 6 * 4 + 3 * 4


def test_the_fallback_keeps_a_user_layer_with_a_registered_cost_whole_as_the_graph_walk_does(monkeypatch):
    from carm_advisor.mapping import registry
    from carm_advisor.mapping.types import OP_MATMUL

    class Block(keras.layers.Layer):   # made of sublayers, but costed as one by its registered model
        def __init__(self, **kw):
            super().__init__(**kw)
            self.inner = keras.layers.Dense(4, name="inner")

        def call(self, x):
            return self.inner(x)

    monkeypatch.setitem(registry._REGISTRY, "Block",
                        lambda call, db: registry.make_cost(call, db, flops=1234, op_class=OP_MATMUL))

    class Host(keras.Model):
        def __init__(self):
            super().__init__()
            self.blk = Block(name="blk")

        def call(self, x):
            scale = float(keras.ops.convert_to_numpy(keras.ops.max(x)))  # needs values: no symbolic trace
            return self.blk(x) * scale

    model = Host()
    model(keras.ops.zeros((2, 6)))
    with pytest.warns(RuntimeWarning, match="lower bound"):
        costs = map_model(model, 3)
    assert [(c.name, c.flops) for c in costs] == [("blk", 1234)]     # not opened into blk/inner

    inputs = keras.Input((6,))
    graph = keras.Model(inputs, Block(name="blk")(inputs))
    assert [(c.name, c.flops) for c in map_model(graph, 3)] == [("blk", 1234)]


def test_a_sublayer_never_built_is_not_built_by_the_trace():
    class Branchy(keras.Model):
        def __init__(self):
            super().__init__()
            self.a = keras.layers.Dense(4, name="a")
            self.post = keras.layers.Dense(4, name="post")

        def call(self, x, training=None):
            h = self.a(x)
            if not training:
                h = self.post(h)
            return h

    model = Branchy()
    model(keras.ops.zeros((2, 6)), training=True)   # built through the training branch: post never built
    n_weights = len(model.weights)
    with pytest.warns(RuntimeWarning, match="post never built"):
        costs = map_model(model, 3)
    assert not model.post.built and len(model.weights) == n_weights
    assert [c.name for c in costs] == ["a"]
    assert costs[0].flops == 2 * 3 * 6 * 4 + 3 * 4


def test_a_sublayer_the_traced_call_never_reaches_is_not_dropped_silently():
    class TwoArgs(keras.Model):
        def __init__(self):
            super().__init__()
            self.a = keras.layers.Dense(4, name="a")
            self.b = keras.layers.Dense(4, name="b")

        def call(self, x, y=None):
            out = self.a(x)
            if y is not None:
                out = out + self.b(y)
            return out

    model = TwoArgs()
    model(keras.ops.zeros((2, 6)), y=keras.ops.zeros((2, 5)))
    with pytest.warns(RuntimeWarning, match="never reached b"):
        costs = map_model(model, 3)
    assert sorted(c.name for c in costs) == ["a", "b"]   # both listed, and the totals said to be a lower bound


class _TwoTensors(keras.Model):
    """call(a, b): Keras records the build shape of `a` only."""

    def __init__(self):
        super().__init__()
        self.da = keras.layers.Dense(8, name="da")
        self.db = keras.layers.Dense(8, name="db")
        self.head = keras.layers.Dense(3, name="head")

    def call(self, a, b, training=None):
        return self.head(keras.ops.relu(self.da(a) + self.db(b)))


def _two_tensors():
    model = _TwoTensors()
    model(keras.ops.zeros((2, 4)), keras.ops.zeros((2, 6)))
    return model


def test_a_call_of_several_tensors_falls_back_and_says_how_to_give_their_shapes():
    with pytest.warns(RuntimeWarning, match=r"first argument only: pass input_shapes for \(a, b\)"):
        costs = map_model(_two_tensors(), 5)
    assert [c.name for c in costs] == ["da", "db", "head"]          # the add and relu are missing: a lower bound


@pytest.mark.parametrize("shapes", [[(None, 4), (None, 6)], {"b": (7, 6), "a": (1, 4)}])
def test_input_shapes_trace_a_call_of_several_tensors_whole(shapes, recwarn):
    costs = map_model(_two_tensors(), 5, input_shapes=shapes)

    assert not [w for w in recwarn if "lower bound" in str(w.message)]
    assert [c.name for c in costs] == ["da", "db", "add", "relu", "head"]
    by = {c.name: c for c in costs}
    # Hand counts at batch 5 (the batch given in a shape is replaced): Dense 2*in*out MACs + a bias per output.
    assert by["da"].flops == 2 * 5 * 4 * 8 + 5 * 8
    assert by["db"].flops == 2 * 5 * 6 * 8 + 5 * 8
    assert by["add"].flops == 5 * 8 and by["head"].flops == 2 * 5 * 8 * 3 + 5 * 3
    assert by["db"].input_shapes == ((5, 6),)


def test_input_shapes_is_the_same_call_for_a_model_with_one_argument_of_a_list():
    class ListIn(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

        def call(self, inputs):
            return self.da(inputs[0]) + self.db(inputs[1])

    model = ListIn()
    model([keras.ops.zeros((2, 4)), keras.ops.zeros((2, 6))])
    recorded = [(c.name, c.flops) for c in map_model(model, 3)]
    assert [(c.name, c.flops) for c in map_model(model, 3, input_shapes=[[(None, 4), (None, 6)]])] == recorded
    with pytest.raises(MappingError, match=r"at most 1 input shape\(s\).*takes a list of shapes"):
        map_model(model, 3, input_shapes=[(None, 4), (None, 6)])


@pytest.mark.parametrize("shapes, match", [
    ([(None, 4), (None, 6), (None, 2)], r"at most 2 input shape\(s\).*\(a, b\)"),
    ({"c": (None, 2)}, r"among the tensor arguments of _TwoTensors.call\(\) \(a, b\), received: c"),
    ([(None, None), (None, 6)], r"known dimensions besides the batch, received: \(None, None\)"),
    ([(None, 0), (None, 6)], "positive dimensions"),
    ("(None, 4)", "as a list of shapes"),
    ([(None, 4), (None, 7)], r"to run on input_shapes .*expected axis -1 of input shape to have value 6"),
    ([(None, 4)], r"TypeError: .*missing 1 required positional argument: 'b'"),
])
def test_input_shapes_that_do_not_fit_are_a_one_line_mapping_error(shapes, match):
    with pytest.raises(MappingError, match=match):
        map_model(_two_tensors(), 5, input_shapes=shapes)


class _OptionalSecond(keras.Model):
    """call(a, b=None): the second Dense runs only where b is given."""

    def __init__(self):
        super().__init__()
        self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

    def call(self, a, b=None):
        return self.da(a) if b is None else self.da(a) + self.db(b)


def test_input_shapes_that_leave_a_sublayer_unreached_are_an_error_not_a_lower_bound():
    model = _OptionalSecond()
    model(keras.ops.zeros((2, 6)), b=keras.ops.zeros((2, 5)))
    with pytest.raises(MappingError, match="never reached db: give the shapes"):
        map_model(model, 3, input_shapes=[(None, 6)])
    assert [c.name for c in map_model(model, 3, input_shapes={"a": (None, 6), "b": (None, 5)})] == ["da", "db", "add"]


def test_input_shapes_reach_positional_only_star_args_and_mask_arguments():
    import numpy as np

    class PosOnly(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

        def call(self, x, y, /):
            return self.da(x) + self.db(y)

    class VarArgs(PosOnly):
        def call(self, *xs):
            return self.da(xs[0]) + self.db(xs[1])

    class Masked(keras.Model):
        def __init__(self):
            super().__init__()
            self.da = keras.layers.Dense(8, name="da")

        def call(self, x, mask=None):
            out = self.da(x)
            return out if mask is None else out * mask

    for cls in (PosOnly, VarArgs):
        model = cls()
        model(keras.ops.zeros((2, 4)), keras.ops.zeros((2, 6)))
        costs = map_model(model, 3, input_shapes=[(None, np.int64(4)), (None, 6)])   # a numpy int is a dimension
        assert [(c.name, c.flops) for c in costs] == [("da", 2 * 3 * 4 * 8 + 3 * 8), ("db", 2 * 3 * 6 * 8 + 3 * 8),
                                                      ("add", 3 * 8)], cls
    pos_only = _built(PosOnly)
    assert [c.name for c in map_model(pos_only, 3, input_shapes={"x": (1, 4), "y": (1, 6)})] == ["da", "db", "add"]
    with pytest.raises(MappingError, match=r"positional-only arguments .* in order from the first \(x, y\)"):
        map_model(pos_only, 3, input_shapes={"y": (1, 6)})

    masked = Masked()
    masked(keras.ops.zeros((2, 4)))
    assert [c.name for c in map_model(masked, 3)] == ["da"]                     # no mask given: none multiplied
    with_mask = map_model(masked, 3, input_shapes={"x": (None, 4), "mask": (None, 8)})
    assert [(c.name, c.flops) for c in with_mask][1] == ("multiply", 3 * 8)


def _built(cls):
    model = cls()
    model(keras.ops.zeros((2, 4)), keras.ops.zeros((2, 6)))
    return model


def test_a_star_args_call_is_traced_whole_from_the_shapes_keras_recorded(recwarn):
    class VarArgs(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

        def call(self, *xs):
            return self.da(xs[0]) + self.db(xs[1])

    costs = map_model(_built(VarArgs), 3)
    assert not [w for w in recwarn if "lower bound" in str(w.message)]
    assert [c.name for c in costs] == ["da", "db", "add"] and costs[1].input_shapes == ((3, 6),)


def test_the_list_form_never_puts_a_shape_into_mask_or_training():
    class AfterMask(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

        def call(self, x, mask=None, y=None):
            return self.da(x) + self.db(y)

    class AfterTraining(AfterMask):
        def call(self, x, training=None, y=None):
            return self.da(x) + self.db(y)

    for cls in (AfterMask, AfterTraining):
        model = cls()
        model(keras.ops.zeros((2, 4)), y=keras.ops.zeros((2, 6)))
        costs = map_model(model, 3, input_shapes=[(None, 4), (None, 6)])     # y by name, after the skipped one
        assert [(c.name, c.input_shapes) for c in costs][:2] == [("da", ((3, 4),)), ("db", ((3, 6),))], cls


def test_given_shapes_with_a_sublayer_never_built_are_an_error_and_the_fallback_names_it_unbuilt():
    model = _OptionalSecond()
    model(keras.ops.zeros((2, 4)))                      # db never built
    with pytest.raises(MappingError, match="db never built: call the model once with every argument"):
        map_model(model, 2, input_shapes=[(None, 4), (None, 6)])
    assert not model.db.built

    class Untraceable(_OptionalSecond):
        def call(self, a, b=None):
            scale = float(keras.ops.convert_to_numpy(keras.ops.max(a)))   # needs values: no symbolic trace
            return self.da(a) * scale if b is None else self.da(a) + self.db(b)

    model = Untraceable()
    model(keras.ops.zeros((2, 4)))
    with pytest.warns(RuntimeWarning, match="and the never-built layers db are not counted") as said:
        map_model(model, 2)
    assert "weight-free layers db" not in str(said[0].message)


def test_a_keras_input_given_as_a_shape_keeps_its_dtype():
    class IdsAndFeatures(keras.Model):
        def __init__(self):
            super().__init__(dtype="mixed_float16")
            self.emb = keras.layers.Embedding(100, 16, name="emb", dtype="mixed_float16")
            self.d = keras.layers.Dense(16, name="d", dtype="mixed_float16")

        def call(self, ids, feats):
            return keras.ops.mean(self.emb(ids), axis=1) + self.d(feats)

    model = IdsAndFeatures()
    model(keras.ops.ones((2, 77), dtype="int32"), keras.ops.zeros((2, 6)))
    typed = map_model(model, 4, input_shapes=[keras.Input((77,), dtype="int32"), (None, 6)])
    emb = next(c for c in typed if c.name == "emb")
    # int32 ids read at 4 bytes, the 4 x 77 looked-up rows of 16 read at float16: 2 bytes
    assert emb.bytes_read == 4 * 77 * 4 + 4 * 77 * 16 * 2
    bare = next(c for c in map_model(model, 4, input_shapes=[(None, 77), (None, 6)]) if c.name == "emb")
    assert bare.bytes_read == 4 * 77 * 2 + 4 * 77 * 16 * 2                     # a bare shape: the compute dtype


def test_a_call_with_star_args_falls_back_with_the_hint_to_give_their_shapes():
    class Rest(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(8, name="da"), keras.layers.Dense(8, name="db")

        def call(self, x, *rest):
            return self.da(x) + self.db(rest[0]) if rest else self.da(x)

    model = Rest()
    model(keras.ops.zeros((2, 4)), keras.ops.zeros((2, 6)))
    with pytest.warns(RuntimeWarning, match=r"pass input_shapes for \(x, \*rest\)"):
        map_model(model, 2)
    assert [c.name for c in map_model(model, 2, input_shapes=[(None, 4), (None, 6)])] == ["da", "db", "add"]


def test_input_shapes_of_a_model_whose_inputs_are_known_must_agree_with_them():
    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(2)(x))
    assert [c.flops for c in map_model(model, 1, input_shapes=[(None, 4)])] == [2 * 4 * 2 + 2]
    with pytest.raises(MappingError, match=r"--input-shape 5 does not agree with input .* of shape \(None, 4\)"):
        map_model(model, 1, input_shapes=[(None, 5)])


def test_a_traced_op_never_takes_a_layers_name():
    class AddBoth(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(4, name="d")
            self.addl = keras.layers.Add(name="add")

        def call(self, x):
            h = self.d(x)
            return keras.ops.add(self.addl([h, h]), h)

    model = AddBoth()
    model(keras.ops.zeros((2, 6)))
    names = [c.name for c in map_model(model, 3)]
    assert len(names) == len(set(names)) == 3
    assert "add" in names   # the layer keeps its own name; the op takes the next free one
