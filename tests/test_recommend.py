"""Recommendations' shares and bounds on one time basis: calibrated where a layer has a calibrated time (hand numbers)."""

import pytest

from carm_advisor.advise.recommend import _depthwise, _fusion, _share, _tensor_core_alignment
from carm_advisor.report.model import Report
from carm_advisor.results import LayerRow, ModelInfo


def _row(name, type_, bound_s, calibrated_s, channels=(), tc=False):
    return LayerRow(name=name, type=type_, dtype="bfloat16", flops=1e9, bytes=1, ai=1.0, ai_source="analytic",
                    path="tc_bf16" if tc else "cuda_fp32", level="hbm", bound="compute:tc_bf16",
                    attainable_flops_per_s=1e15, predicted_time_s=bound_s, predicted_energy_j=None, tensor_core=tc,
                    known=True, channels=channels, calibrated_time_s=calibrated_s)


def _rows():
    # dw: bound 1 ms, calibrated 4 ms; conv: bound 1 ms, calibrated 1 ms. Calibrated total 5 ms.
    return [_row("dw", "DepthwiseConv2D", 0.001, 0.004),
            _row("conv", "Conv2D", 0.001, 0.001, channels=(60, 64), tc=True)]


def test_a_share_is_calibrated_time_over_calibrated_time():
    assert _share(_rows(), lambda r: r.name == "dw") == pytest.approx(0.8)      # 4 of 5 ms, not 1 of 5


def test_a_share_falls_back_to_the_bound_where_no_layer_is_calibrated():
    rows = [_row("a", "Dense", 0.001, None), _row("b", "Dense", 0.003, None)]
    assert _share(rows, lambda r: r.name == "a") == pytest.approx(0.25)


def test_depthwise_advice_states_the_calibrated_share_and_its_ceiling():
    rec = _depthwise(None, _rows())
    assert "80% of the predicted time" in rec.detail
    assert rec.expected_gain.startswith("up to 5.00x")                          # 1 / (1 - 0.8)


def test_a_grouped_conv_with_one_channel_per_group_is_depthwise_advice_too():
    # ConvNeXt's 7x7 convs: Conv2D(groups=C), mapped off Tensor Cores with a note. 3 of 4 ms: 75%.
    grouped = _row("dwconv", "Conv2D", 0.001, 0.003)
    grouped.notes = "groups=96 with one input channel per group: depthwise, CUDA cores in cuDNN"
    other_grouped = _row("gconv", "Conv2D", 0.001, 0.001, tc=True)
    other_grouped.notes = "groups=4"
    rec = _depthwise(None, [grouped, other_grouped])
    assert rec.layers == ["dwconv"] and "75% of the predicted time" in rec.detail


def test_padding_bound_is_the_empty_tile_part_of_the_layers_calibrated_time():
    rows = _rows()
    rows[0].calibrated_time_s = 0.001    # dw 1 ms, conv 1 ms calibrated: conv is half the time
    rows[1].calibrated_time_s = 0.001
    rows[1].predicted_time_s = 0.0001    # its bound is a tenth of that: the bound must not be what is scaled
    rec = _tensor_core_alignment(None, rows)
    # 60 input channels, multiple of 8: tile 64, empty 4/64 = 6.25% of conv's 1 ms over 2 ms = 3.1%
    assert "at most 3% of the model's time" in rec.expected_gain
    assert "(50% of the predicted time)" in rec.detail


def test_fusion_saves_the_calibrated_time_of_the_fusible_layers():
    rows = _rows()
    rows[0].type, rows[0].bound = "Add", "memory:hbm"   # dw becomes a memory-bound Add: 4 of 5 calibrated ms
    model = ModelInfo(name="m", batch_size=8, precision="float32", layout="channels_last", backend="torch", math_mode={})
    rec = _fusion(Report(model=model, device={}, ceilings={}, layers=rows, recommendations=[]), rows)
    assert rec.speedup == pytest.approx(5.0)            # 5 / (5 - 4); the bound (1 of 5 ms) gave 1.25
    assert "80% of the predicted time" in rec.detail


def test_a_grouped_conv_mapped_as_depthwise_gets_the_depthwise_advice_end_to_end():
    # The mapping's own note, not a hand-written one: Conv2D(groups=C) with one input channel per group.
    import keras

    import carm_advisor as advisor

    inputs = keras.Input((56, 56, 96))
    x = keras.layers.Conv2D(96, 7, padding="same", groups=96, name="dw7")(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(96, 1, name="pw")(x))
    report = advisor.analyze(model, batch_size=8, measure=False)
    rec = next(r for r in report.recommendations if r.title == "Depthwise convolutions run on CUDA cores")
    assert rec.layers == ["dw7"]
