"""The report's header says what applies: the float32 math line only where layers compute at float32 (and for
which), and where the profile lacks the roof a layer runs on, which roof it was placed on instead and why, before
any figure."""

from __future__ import annotations

import io
import json
from importlib import resources

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.profiles.profile import profile_from_dict
from carm_advisor.report.render import print_report


def conv_net(output_dtype=None):
    inputs = keras.Input(shape=(32, 32, 16))
    x = keras.layers.Conv2D(32, 3, name="conv")(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(16, name="predictions", dtype=output_dtype)(x), name="net")


def h200_without(*roofs):
    """The embedded H200 profile with some ceilings (and their power-model entries) deleted."""
    doc = json.loads(resources.files("carm_advisor.profiles").joinpath("nvidia_h200.json").read_text())
    for key in roofs:
        doc["ceilings"].pop(key)
    return profile_from_dict(doc, origin="test profile")


def rendered(report, width=250):
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=width))
    return buf.getvalue()


def header_of(text):
    """The header panel: every line before the layer table's title."""
    return " ".join(text.split("Layers on the CARM")[0].replace("│", " ").split())


def test_a_float32_model_says_its_float32_math():
    header = header_of(rendered(advisor.analyze(conv_net(), measure=False, calibration=False)))
    mode = advisor.analyze(conv_net(), measure=False, calibration=False).model.math_mode
    assert f"float32 math: conv {mode['conv']}, matmul {mode['matmul']}" in header


def test_a_mixed_model_says_the_float32_math_of_its_float32_output_layer_only():
    """mixed_bfloat16 with the output Dense pinned to float32 (Keras' guide): the convolution computes at bfloat16,
    so no 'conv' math applies; the output layer's matmul does, and the header says for which layer."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    report = advisor.analyze(conv_net(output_dtype="float32"), measure=False, calibration=False)
    header = header_of(rendered(report))
    matmul = report.model.math_mode["matmul"]
    assert f"float32 math of its 1 float32 layer (predictions): matmul {matmul}" in header
    assert "conv tf32" not in header and "conv fp32" not in header


def test_a_model_with_no_float32_layer_has_no_float32_math():
    keras.config.set_dtype_policy("mixed_bfloat16")
    header = header_of(rendered(advisor.analyze(conv_net(), measure=False, calibration=False)))
    assert "float32 math" not in header


@pytest.fixture(scope="module")
def without_tf32_and_bf16():
    return advisor.analyze(conv_net(), batch_size=64, profile=h200_without("tc_tf32", "tc_bf16"), measure=False,
                           calibration=False)


def test_a_layer_placed_on_another_roof_says_which_and_why(without_tf32_and_bf16):
    conv = next(r for r in without_tf32_and_bf16.layers if r.name == "conv")
    if without_tf32_and_bf16.model.math_mode["conv"] != "tf32":
        pytest.skip("this backend runs float32 convolutions on the FP32 roof anyway")
    assert conv.path == "fp32"
    assert "placed on FP32 (CUDA cores): the profile has no TF32 Tensor Core roof" in conv.notes


def test_the_header_says_the_missing_roof_before_any_figure(without_tf32_and_bf16):
    if without_tf32_and_bf16.model.math_mode["conv"] != "tf32":
        pytest.skip("this backend runs float32 convolutions on the FP32 roof anyway")
    header = header_of(rendered(without_tf32_and_bf16))
    # the float32 math line agrees with the placement
    math = header.split("float32 math: ")[1].split(" PREDICTED")[0]
    assert math.startswith("conv tf32") and "(placed on FP32 (CUDA cores): the profile has no TF32 Tensor Core roof)" in math
    # and the warning comes before the figures of the header
    said = header.index("the profile has no TF32 Tensor Core roof")
    assert said < header.index("per sample")


def test_no_recommendation_promises_a_gain_from_a_roof_the_profile_lacks(without_tf32_and_bf16):
    mixed = next(r for r in without_tf32_and_bf16.recommendations if (r.change or {}).get("precision"))
    assert mixed.speedup is None and mixed.energy_ratio is None
    assert mixed.expected_gain.startswith("not quantified")
    assert "no BF16 Tensor Core roof" in mixed.expected_gain
    assert "TFLOP/s)" not in mixed.detail.split("BF16 Tensor Cores")[1][:20]   # no roof value it does not have


def test_with_both_roofs_the_precision_advice_is_quantified():
    report = advisor.analyze(conv_net(), batch_size=64, measure=False, calibration=False)
    mixed = next(r for r in report.recommendations if (r.change or {}).get("precision"))
    assert mixed.speedup and mixed.speedup > 1


def test_the_json_carries_the_missing_roof_and_the_console_says_it_once(without_tf32_and_bf16):
    if without_tf32_and_bf16.model.math_mode["conv"] != "tf32":
        pytest.skip("this backend runs float32 convolutions on the FP32 roof anyway")
    assert any("the profile has no TF32 Tensor Core roof" in w for w in without_tf32_and_bf16.to_dict()["warnings"])
    text = " ".join(rendered(without_tf32_and_bf16).replace("│", " ").split())
    assert text.count("the profile has no TF32 Tensor Core roof:") == 1


def test_the_energy_optimal_clock_is_compared_with_the_top_clock_as_tune_names_it():
    """The H200 profile's reference clock is its top one, 1980 MHz; tune says 'over the top clock (1980 MHz)'."""
    text = " ".join(rendered(advisor.analyze(conv_net(), batch_size=64, measure=False, calibration=False)).split())
    assert "the time of the top clock (1980 MHz)" in text
