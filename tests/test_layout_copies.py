"""The copies Keras' torch backend makes around channels_last layers (calibration.layout_copy_passes): their CARM
bound on each row, in the calibrated time and out of the learned efficiency, and the layout advice built on the same
figure.

Profile figures are round (HBM 1e11 B/s) so every expected time is a hand calculation.
"""

import keras
import pytest
from test_predict import FixedEfficiency, profile

from carm_advisor import calibration
from carm_advisor.calibration import layout_copy_passes, samples_from_rows
from carm_advisor.mapping.types import OP_ELEMENTWISE, OP_MATMUL, LayerCost
from carm_advisor.predict import Predictor

MODE = {"conv": "tf32", "matmul": "fp32"}


@pytest.mark.parametrize("backend, layer_type, data_format, passes", [
    ("torch", "Conv2D", "channels_last", 2),             # to NCHW, then to torch's channels_last memory format
    ("torch", "DepthwiseConv2D", "channels_last", 2),    # runs through the backend's conv
    ("torch", "SeparableConv2D", "channels_last", 2),
    ("torch", "Conv2DTranspose", "channels_last", 2),
    ("torch", "MaxPooling2D", "channels_last", 1),       # to NCHW only
    ("torch", "AveragePooling2D", "channels_last", 1),
    ("torch", "GlobalAveragePooling2D", "channels_last", 0),   # a mean over axes: no transpose
    ("torch", "Dense", "channels_last", 0),
    ("torch", "Conv2D", "channels_first", 0),
    ("torch", "Conv2D", None, 0),
    ("jax", "Conv2D", "channels_last", 0),               # XLA takes NHWC as it is
    ("tensorflow", "MaxPooling2D", "channels_last", 0),
])
def test_which_layers_the_torch_backend_copies(backend, layer_type, data_format, passes):
    assert layout_copy_passes(backend, layer_type, data_format) == passes


def conv(data_format="channels_last"):
    # 2 MFLOP reading a 1e8 B input and 1e5 B of weights: memory-bound at HBM 1e11 B/s
    return LayerCost(name="c", type="Conv2D", flops=2_000_000, bytes_read=100_100_000, bytes_written=0,
                     compute_dtype="bfloat16", op_class=OP_MATMUL, tensor_core=True, params=50_000,
                     extra={"data_format": data_format})


def pool():
    return LayerCost(name="p", type="MaxPooling2D", flops=1_000_000, bytes_read=100_000_000, bytes_written=0,
                     compute_dtype="bfloat16", op_class=OP_ELEMENTWISE, tensor_core=False, extra={"data_format": "channels_last"})


def test_a_channels_last_torch_conv_carries_the_bound_of_two_copies_of_its_input():
    (row,) = Predictor(profile(), MODE, backend="torch").rows_for_costs([conv()])
    assert row.input_bytes == 100_000_000                     # 100.1 MB read less 50,000 bf16 weights
    # two passes, each reading and writing 1e8 B, at 1e11 B/s: 4e8 / 1e11 = 4 ms
    assert row.layout_copy_s == pytest.approx(4e-3)
    (pooled,) = Predictor(profile(), MODE, backend="torch").rows_for_costs([pool()])
    assert pooled.layout_copy_s == pytest.approx(2e-3)        # one pass, reading and writing its 1e8 B input


def test_no_copy_on_channels_first_or_on_another_backend():
    (first,) = Predictor(profile(), MODE, backend="torch").rows_for_costs([conv("channels_first")])
    (jax,) = Predictor(profile(), MODE, backend="jax").rows_for_costs([conv()])
    (unknown,) = Predictor(profile(), MODE).rows_for_costs([conv()])
    assert first.layout_copy_s == jax.layout_copy_s == unknown.layout_copy_s == 0.0
    assert "layout_copy_s" not in first.to_dict()


def test_the_calibrated_time_holds_the_copies():
    # a calibration without the copies seam (copies_time_s) counts them at their bound
    (row,) = Predictor(profile(), MODE, backend="torch", calibration=FixedEfficiency(0.5)).rows_for_costs([conv()])
    bound = 100_100_000 / 1e11                                # 1.001 ms on the HBM slope
    assert row.predicted_time_s == pytest.approx(bound)
    assert row.calibrated_time_s == pytest.approx(bound / 0.5 + 4e-3)


def test_a_measured_layer_learns_its_efficiency_without_its_copies():
    (row,) = Predictor(profile(), MODE, backend="torch").rows_for_costs([conv()])
    row.measured, row.time_s = True, 6.002e-3                  # 4 ms of copies + 2.002 ms of work
    (sample,) = samples_from_rows([row], "torch", "m")
    assert sample.measured_time_s == pytest.approx(2.002e-3)
    assert sample.efficiency == pytest.approx(0.5)
    row.time_s = 3e-3                                          # faster than its copies' bound: kept at the layer's bound
    (sample,) = samples_from_rows([row], "torch", "m")
    assert sample.measured_time_s == pytest.approx(1.001e-3)


def test_the_layout_advice_predicts_the_gain_of_the_copies_the_calibrated_time_holds(monkeypatch):
    from test_analysis import round_profile

    import carm_advisor.advise.analyze as analysis

    # every torch convolution and pooling layer at half its bound (three samples each: MIN_SAMPLES); pure data
    # movement at its bound, so the copies take their bound (tests/test_layout_copy_form.py: below it)
    half = calibration.Calibration(samples=[calibration.Sample("torch", "Conv2D", "float32", 1e-3, 2e-3)] * 3
                                   + [calibration.Sample("torch", "pooling", "float32", 1e-3, 2e-3)] * 3
                                   + [calibration.Sample("torch", "data-movement", "float32", 1e-4, 1e-4)] * 3)
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    inputs = keras.Input(shape=(64, 64, 32))
    x = keras.layers.Conv2D(32, 3, padding="same", use_bias=False, name="conv")(inputs)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    report = analysis.analyze(keras.Model(inputs, x), batch_size=16, profile=round_profile(), measure=False,
                              calibration=half)
    rec = next(r for r in report.recommendations if "channels_first" in r.title)
    tensor = 16 * 64 * 64 * 32 * 4                            # float32 input of each layer, bytes
    conv_copy_s, pool_copy_s = 4 * tensor / 1e11, 2 * tensor / 1e11
    conv_row, pool_row = report.layers
    assert (conv_row.layout_copy_s, pool_row.layout_copy_s) == pytest.approx((conv_copy_s, pool_copy_s))
    assert conv_row.calibrated_time_s == pytest.approx(2 * conv_row.predicted_time_s + conv_copy_s)
    assert pool_row.calibrated_time_s == pytest.approx(2 * pool_row.predicted_time_s + pool_copy_s)
    work_s = 2 * (conv_row.predicted_time_s + pool_row.predicted_time_s)
    assert rec.speedup == pytest.approx((work_s + conv_copy_s + pool_copy_s) / work_s)
    assert rec.layers == ["conv", "pool"]
    assert "50.3 MB" in rec.detail          # 2 passes x 2 x 8.39 MB (conv) + 2 x 8.39 MB (pool) of extra traffic
