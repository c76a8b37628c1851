"""map_model against independent references: TensorFlow's profiler count for VGG16, TensorFlow's own
profiler on frozen graphs of other models, and full coverage of keras.applications' layer classes."""

import collections

import keras
import pytest

from carm_advisor.mapping import map_model

# TensorFlow profiler, VGG16 224x224 include_top=True, batch 1: 2*MACs + bias adds + 2x2 max-pool
# window compares + 5 * 1000 softmax. We add the ReLU compares (13.6 M, 0.04%), which it counts as 0.
VGG16_TF_PROFILER_FLOPS = 30_960_211_824


def test_vgg16_total_flops_per_sample_within_1_percent_of_tensorflow_profiler():
    model = keras.applications.VGG16(weights=None)
    costs = map_model(model, batch_size=2)
    assert all(c.known for c in costs)
    per_sample = sum(c.flops for c in costs) / 2
    assert per_sample == pytest.approx(VGG16_TF_PROFILER_FLOPS, rel=0.01)


def test_vgg16_first_conv_bytes_are_input_weights_and_output_at_float32():
    model = keras.applications.VGG16(weights=None)
    first = map_model(model, batch_size=1)[0]
    assert first.name == "block1_conv1"
    assert first.bytes_read == (224 * 224 * 3 + 3 * 3 * 3 * 64 + 64) * 4
    assert first.bytes_written == 224 * 224 * 64 * 4


APPLICATIONS = [  # (constructor, small input) covering every layer class keras.applications uses
    ("ResNet50", (64, 64, 3)), ("ResNet50V2", (64, 64, 3)), ("MobileNet", (64, 64, 3)),
    ("MobileNetV2", (64, 64, 3)), ("MobileNetV3Small", (64, 64, 3)), ("DenseNet121", (64, 64, 3)),
    ("InceptionV3", (75, 75, 3)), ("Xception", (71, 71, 3)), ("EfficientNetB0", (64, 64, 3)),
    ("EfficientNetV2B0", (64, 64, 3)), ("NASNetMobile", (64, 64, 3)), ("ConvNeXtTiny", (64, 64, 3)),
    ("InceptionResNetV2", (75, 75, 3)),
]


def _leaf_classes(model, seen):
    for op in (model.layers if isinstance(model, keras.Sequential) else model.operations):
        if isinstance(op, keras.Model):
            _leaf_classes(op, seen)
        elif not isinstance(op, keras.layers.InputLayer):
            seen[type(op).__name__] += 1
    return seen


@pytest.mark.parametrize("name,shape", APPLICATIONS, ids=[a[0] for a in APPLICATIONS])
def test_every_layer_class_of_keras_applications_has_a_cost_model(name, shape):
    model = getattr(keras.applications, name)(weights=None, input_shape=shape)
    classes = _leaf_classes(model, collections.Counter())  # enumerated from the graph, not hand-listed
    costs = map_model(model, 1, strict=True)
    assert {c.type for c in costs} == set(classes)
    assert sum(c.flops for c in costs) > 0


# ---- TensorFlow's profiler as the independent reference -----------------------------------------

MATMUL_OPS = ("Conv2D", "DepthwiseConv2dNative", "MatMul", "Conv2DBackpropInput", "Conv3D")


def _tf_profiler_flops_by_op_type(model):
    """TensorFlow profiler float_operation counts per op type on the frozen batch-1 graph of ``model``
    (functions Keras leaves uninlined, such as its grouped-conv XLA function, profiled at their call shapes)."""
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    def count(graph):
        types = {op.name: op.type for op in graph.get_operations()}
        builder = tf.compat.v1.profiler.ProfileOptionBuilder
        opts = builder(builder.float_operation()).with_empty_output().build()
        prof = tf.compat.v1.profiler.profile(graph=graph, run_meta=tf.compat.v1.RunMetadata(), cmd="scope",
                                             options=opts)
        by_type = collections.Counter()
        stack = [prof]
        while stack:
            node = stack.pop()
            if node.name in types:
                by_type[types[node.name]] += node.float_ops
            stack.extend(node.children)
        return by_type

    shape = (1,) + tuple(model.inputs[0].shape[1:])
    fn = tf.function(lambda x: model(x, training=False))
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(tf.TensorSpec(shape, tf.float32)))
    graph_def = frozen.graph.as_graph_def()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    by_type = count(graph)
    library = {f.signature.name: f for f in graph_def.library.function}
    for op in graph.get_operations():
        if op.type in ("StatefulPartitionedCall", "PartitionedCall"):
            body = function_def_to_graph(library[op.get_attr("f").name], input_shapes=[i.shape for i in op.inputs])
            by_type += count(body)
    return by_type


def _custom_conv_model():
    L = keras.layers
    x = keras.Input((40, 40, 8))
    y = L.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    y = L.Conv2D(32, 3, dilation_rate=2, padding="same", groups=4)(y)
    y = L.Conv2D(32, (5, 3), strides=(2, 1), padding="valid", groups=8, use_bias=False)(y)
    y = L.DepthwiseConv2D(3, depth_multiplier=2, strides=2, padding="same")(y)
    y = L.SeparableConv2D(24, 3, padding="same")(y)
    y = L.Conv2DTranspose(8, 3, strides=2, padding="same")(y)
    z = L.Reshape((-1, 8))(y)
    z = L.Conv1D(12, 5, padding="causal", dilation_rate=3)(z)
    return keras.Model(x, L.Dense(10)(L.Flatten()(z)))


REFERENCE_MODELS = {
    "ResNet50@96": lambda: keras.applications.ResNet50(weights=None, input_shape=(96, 96, 3)),
    "MobileNetV2@96": lambda: keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3)),
    "DenseNet121@96": lambda: keras.applications.DenseNet121(weights=None, input_shape=(96, 96, 3)),
    "grouped_dilated_strided_transposed": _custom_conv_model,
}


@pytest.mark.parametrize("name", list(REFERENCE_MODELS))
def test_conv_and_dense_flops_match_tensorflow_profiler_within_2_percent(name):
    pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the TensorFlow profiler reference needs Keras on the tensorflow backend")
    model = REFERENCE_MODELS[name]()
    reference = _tf_profiler_flops_by_op_type(model)
    costs = [c for c in map_model(model, 1) if c.op_class == "matmul"]

    ours_macs_flops = sum(2 * c.extra["macs"] for c in costs)
    theirs_macs_flops = sum(reference[t] for t in MATMUL_OPS)
    assert theirs_macs_flops > 0
    assert ours_macs_flops == pytest.approx(theirs_macs_flops, rel=0.02)

    # With the bias adds (TensorFlow's BiasAdd; our conv/dense FLOPs less their fused activations).
    act = sum(c.extra.get("activation_flops", 0) for c in costs)
    ours = sum(c.flops for c in costs) - act
    assert ours == pytest.approx(theirs_macs_flops + reference["BiasAdd"], rel=0.02)
