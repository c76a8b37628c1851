"""Advice bounded by measurement: capped gains, measured dispatch overhead, named causes (hand numbers)."""

import pytest

from carm_advisor.measured_advice import cap_by_measured_gap, dispatch_overhead, far_below_roof
from carm_advisor.report.model import LayerRow, MeasurementInfo, ModelInfo, Recommendation, Report


def _row(name, type_, bound_s, measured_s, flops, attainable, bound="compute:tc_bf16", channels=(), tc=False):
    return LayerRow(name=name, type=type_, dtype="bfloat16", flops=flops, bytes=1, ai=1.0, ai_source="analytic",
                    path="tc_bf16" if tc else "cuda_fp32", level="hbm", bound=bound, attainable_flops_per_s=attainable,
                    predicted_time_s=bound_s, predicted_energy_j=None, tensor_core=tc, known=True, time_s=measured_s,
                    measured=True, channels=channels)


def _report(measurement):
    rows = [
        # conv: 1e12 FLOP in 8 ms = 125 TFLOP/s of a 1000 TFLOP/s roof (12.5%), 3 input channels
        _row("conv", "Conv2D", 0.006, 0.008, 1e12, 1e15, channels=(3, 64), tc=True),
        # bn: 1e9 FLOP in 4 ms = 0.25 TFLOP/s of a 2 TFLOP/s slope (12.5%)
        _row("bn", "BatchNormalization", 0.004, 0.004, 1e9, 2e12, bound="memory:hbm"),
    ]
    model = ModelInfo(name="m", batch_size=64, precision="mixed_bfloat16", layout="channels_first", backend="torch",
                      math_mode={})
    info = MeasurementInfo(inference=measurement.get("inference"), training_step=None,
                           inference_graph=measurement.get("inference_graph"), date=None, command=None)
    return Report(model=model, device={}, ceilings={}, layers=rows, recommendations=[], measurement=info)


def test_a_same_configuration_gain_is_capped_by_the_measured_gap_but_a_switch_is_not():
    # graph 12 ms against a 10 ms bound: gap 1.2; fusing bn saves at most its 4 of 12 ms: 1.5
    report = _report({"inference_graph": {"time_s": 0.012, "execution": "cuda_graph"}})
    fusion = Recommendation("fuse", "d", "2.36x faster", speedup=2.36, layers=["bn"])
    precision = Recommendation("bf16", "d", "3x faster", speedup=3.0, change={"precision": "mixed_bfloat16"})
    for rec in (fusion, precision):
        cap_by_measured_gap(report, report.layers, rec)
    assert fusion.speedup == pytest.approx(1.2)
    assert "capped by the measured gap" in fusion.expected_gain
    assert precision.speedup == 3.0


def test_dispatch_overhead_is_eager_minus_graph_time():
    report = _report({"inference": {"time_s": 0.058, "energy_j": 20.0, "execution": "eager"},
                      "inference_graph": {"time_s": 0.017, "energy_j": 10.0, "execution": "cuda_graph"}})
    rec = dispatch_overhead(report)
    assert rec.speedup == pytest.approx(58 / 17)
    assert rec.energy_ratio == pytest.approx(2.0)
    assert "41.0 ms (71%)" in rec.detail
    assert rec.change == {"compile": "cuda_graph"}


def test_no_dispatch_advice_without_a_graph_measurement():
    assert dispatch_overhead(_report({"inference": {"time_s": 0.058, "execution": "eager"}})) is None


def test_layers_far_below_roof_are_named_with_their_cause():
    report = _report({})
    rec = far_below_roof(report, report.layers)
    assert rec.layers == ["conv", "bn"]     # conv lost 2 ms, bn 0 ms: most lost first
    assert "leave Tensor Core tiles empty" in rec.detail
    assert "a compiler would fuse" in rec.detail
    # they lost 2 ms of 12 ms measured: 12 / 10
    assert rec.speedup == pytest.approx(1.2)
