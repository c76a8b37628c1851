"""Model names a user types resolve to keras.applications constructors."""

import pytest

from carm_advisor.errors import ModelLoadError
from carm_advisor.models.loader import application_names, load_model

# The constructors the Keras 3 documentation lists under keras.applications (typed from the docs, not
# read from the code under test).
DOCUMENTED = [
    "Xception", "VGG16", "VGG19", "ResNet50", "ResNet101", "ResNet152", "ResNet50V2", "ResNet101V2",
    "ResNet152V2", "InceptionV3", "InceptionResNetV2", "MobileNet", "MobileNetV2", "MobileNetV3Small",
    "MobileNetV3Large", "DenseNet121", "DenseNet169", "DenseNet201", "NASNetMobile", "NASNetLarge",
    "EfficientNetB0", "EfficientNetB1", "EfficientNetB2", "EfficientNetB3", "EfficientNetB4",
    "EfficientNetB5", "EfficientNetB6", "EfficientNetB7", "EfficientNetV2B0", "EfficientNetV2B1",
    "EfficientNetV2B2", "EfficientNetV2B3", "EfficientNetV2S", "EfficientNetV2M", "EfficientNetV2L",
    "ConvNeXtTiny", "ConvNeXtSmall", "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtXLarge",
]


@pytest.mark.parametrize("constructor", DOCUMENTED)
def test_every_documented_application_resolves_by_its_lower_case_name(constructor):
    assert application_names()[constructor.lower()] == constructor


def test_mobilenetv3small_builds_by_name_and_with_dashes():
    model, name = load_model("MobileNet-V3-Small", input_shape=(96, 96, 3))
    assert name == "mobilenetv3small"
    assert model.name.lower().startswith("mobilenetv3small")


def test_unknown_application_is_one_clear_error():
    with pytest.raises(ModelLoadError, match="neither a model file nor a keras.applications model"):
        load_model("mobilenetv9")


@pytest.mark.parametrize("name", ["mobilenetv3small", "mobilenetv3large"])
def test_application_without_a_fixed_input_shape_is_built_at_224(name):
    # keras.applications.MobileNetV3*(weights=None) accepts any image size ((None, None, 3)); the CARM
    # needs sizes, and 224x224 is the size its ImageNet weights are published for.
    model, _ = load_model(name)
    assert tuple(model.inputs[0].shape)[1:] in ((224, 224, 3), (3, 224, 224))


def test_a_model_file_refuses_a_layout_before_it_is_even_read(tmp_path):
    with pytest.raises(ModelLoadError, match="--layout applies to keras.applications models"):
        load_model(str(tmp_path / "m.keras"), layout="channels_first")


def test_a_file_whose_policies_cannot_be_replaced_is_analysed_at_the_asked_compute_dtype():
    import keras

    from carm_advisor.models.builder import file_at_precision

    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4, dtype="bfloat16")(keras.layers.Dense(8, dtype="bfloat16")(inputs)))
    same, override = file_at_precision(model, "float32")   # bfloat16 variables: no rebuild keeps its weights
    assert same is model and override == "float32"
    assert file_at_precision(model, None) == (model, None)


def test_a_float32_file_is_rebuilt_at_the_asked_policy():
    import keras

    from carm_advisor.models.builder import file_at_precision

    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="d")(inputs))
    rebuilt, override = file_at_precision(model, "mixed_bfloat16")
    assert override is None and rebuilt.get_layer("d").dtype_policy.name == "mixed_bfloat16"
