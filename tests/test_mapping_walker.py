"""iter_layer_calls: one call per layer call, concrete shapes from Keras' symbolic graph, no execution."""

import keras
import pytest

from carm_advisor.errors import MappingError
from carm_advisor.mapping import iter_layer_calls


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
