"""Advice bounded by measurement: capped gains, measured dispatch overhead, named causes (hand numbers)."""

import pytest

from carm_advisor.advise.measured import cap_by_measured_gap, dispatch_overhead, far_below_roof
from carm_advisor.report.model import Report
from carm_advisor.results import LayerRow, MeasurementInfo, ModelInfo, Recommendation


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
    # times read as the report's header prints them (units.seconds: 58 ms, not 58.0 ms or 58.00 ms)
    assert "58 ms per call eagerly, 17 ms for the same GPU work" in rec.detail and "41 ms (71%)" in rec.detail
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


# ---- compiling on the same backend (compilation_switch) ---------------------------------------------
# The two rows' CARM bounds sum to 6 + 4 = 10 ms: no compiled run is faster.

from types import SimpleNamespace  # noqa: E402

from carm_advisor.advise.measured import compilation_switch  # noqa: E402


class CompiledFit:
    """A calibration with a whole-model fit for `execution` only: `time_s` whatever the rows."""

    def __init__(self, execution, time_s):
        self.execution, self.time_s, self.calls = execution, time_s, []

    def whole_time_s(self, rows, backend, execution, model=None):
        self.calls.append((backend, execution))
        return self.time_s if execution == self.execution else None

    def whole_describe(self, backend, execution, rows=None, model=None):
        return f"stub {backend} {execution} fit"


def _predict(calibration=None):
    return SimpleNamespace(predictor=SimpleNamespace(calibration=calibration))


EAGER_AND_GRAPH = {"inference": {"time_s": 0.058, "energy_j": 20.0, "execution": "eager"},
                   "inference_graph": {"time_s": 0.017, "energy_j": 10.0, "execution": "cuda_graph"}}


def test_without_a_compiled_fit_torch_compile_is_assumed_to_take_the_measured_graph_time():
    report = _report(EAGER_AND_GRAPH)
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", None)))
    assert rec.change == {"compile": "torch.compile"}
    assert rec.speedup == pytest.approx(58 / 17)          # 3.41x, below the gap 58 / 10 = 5.8
    assert rec.energy_ratio == pytest.approx(20 / 10)
    assert rec.basis == "assumed: compiled = the measured CUDA-graph time"
    assert "ASSUMED" in rec.detail and "model.compile(jit_compile=True)" in rec.detail
    assert "predict_on_batch" in rec.detail and "paid once" in rec.detail
    assert rec.expected_gain == "3.41x faster, 2.00x less energy (assumed: compiled = the measured CUDA-graph time)"


def test_a_calibrated_torch_compile_fit_is_used_and_labelled_calibrated():
    report = _report(EAGER_AND_GRAPH)
    calib = CompiledFit("torch.compile", 0.029)
    rec = compilation_switch(report, report.layers, _predict(calib))
    assert ("torch", "torch.compile") in calib.calls
    assert rec.speedup == pytest.approx(2.0)               # 58 / 29 ms
    assert rec.basis == "calibrated prediction"
    assert "measured" in rec.detail and "stub torch torch.compile fit" in rec.detail


def test_a_compiled_gain_never_exceeds_the_gap_between_the_measured_time_and_the_bound():
    report = _report(EAGER_AND_GRAPH)
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.005)))
    # 58 / 5 = 11.6x predicted, but the bound is 10 ms: at most 58 / 10 = 5.8x
    assert rec.speedup == pytest.approx(5.8)
    assert "capped by the gap to the CARM bound" in rec.expected_gain


def test_unmeasured_torch_compares_calibrated_eager_with_the_calibrated_graph_assumption():
    report = _report({})
    for r in report.layers:
        r.measured, r.time_s = False, None
    report.measurement = None
    report.calibration = {"execution": "eager", "whole_time_s": 0.030, "graph_time_s": 0.015, "whole_source": "fit"}
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", None)))
    assert rec.speedup == pytest.approx(2.0)               # 30 / 15 ms
    assert rec.basis == "assumed: compiled = the calibrated CUDA-graph time"
    assert "calibrated eager" in rec.detail


def test_tensorflow_is_told_xla_unquantified_without_records_and_jax_is_already_jitted():
    report = _report({"inference": {"time_s": 0.058, "execution": "eager"}})
    report.model.backend = "tensorflow"
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.02)))
    assert rec.change == {"compile": "xla"} and rec.speedup is None
    assert "not quantified" in rec.expected_gain and "at most 5.80x" in rec.expected_gain
    assert "jit_compile=True" in rec.detail
    report.model.backend = "jax"
    assert compilation_switch(report, report.layers, _predict()) is None


def test_another_backends_calibrated_time_is_never_below_its_bound():
    from carm_advisor.advise.measured import at_least_bound

    # calibrated 2 ms, 1 J against a 3 ms bound: raised to 3 ms, energy x 1.5
    assert at_least_bound((0.002, 1.0, False), 0.003) == ((0.003, 1.5, False), True)
    assert at_least_bound((0.004, None, False), 0.003) == ((0.004, None, False), False)


def test_no_compile_advice_where_the_calibrated_compiled_model_is_predicted_slower():
    # measured eager 58 ms, calibrated torch.compile 116 ms: 58 / 116 = 0.50x (no energy figure): below 1.03
    report = _report(EAGER_AND_GRAPH)
    assert compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.116))) is None
    # 58 / 57 = 1.018x: still below MIN_GAIN 1.03; 58 / 56 = 1.036x: advised
    assert compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.057))) is None
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.056)))
    assert rec.speedup == pytest.approx(58 / 56)


class FailingFit(CompiledFit):
    def whole_time_s(self, rows, backend, execution, model=None):
        raise ValueError("no median of an empty list")


def test_a_failing_compiled_fit_falls_back_to_the_graph_assumption_and_says_why():
    report = _report(EAGER_AND_GRAPH)
    rec = compilation_switch(report, report.layers, _predict(FailingFit("torch.compile", None)))
    assert rec.speedup == pytest.approx(58 / 17)          # the measured CUDA-graph replay, as without a fit
    assert rec.basis == ("assumed: compiled = the measured CUDA-graph time (the calibrated torch.compile fit failed: "
                         "ValueError: no median of an empty list)")
    assert "ValueError: no median of an empty list" in rec.expected_gain
    report.model.backend = "tensorflow"                   # no graph assumption on tensorflow: unquantified, with why
    rec = compilation_switch(report, report.layers, _predict(FailingFit("xla", None)))
    assert rec.speedup is None
    assert "the calibration's tensorflow xla fit failed: ValueError: no median of an empty list" in rec.expected_gain


def test_without_a_carm_bound_the_compile_advice_says_so_not_that_a_time_is_missing():
    report = _report(EAGER_AND_GRAPH)
    for r in report.layers:
        r.predicted_time_s = None                         # no roof: the whole-model bound sums to 0
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.029)))
    assert rec.speedup is None
    assert rec.expected_gain == "not quantified (no CARM bound of the whole model: none of its known layers has one)"


# ---- energy of a predicted configuration: predicted time x the power at the CARM operating point -----
# As the tuner (tune/predicted.py): bound energy / bound time of the known layers. Here conv 4.2 J over its
# 6 ms bound, bn 2.0 J over 4 ms: (4.2 + 2.0) J / 10 ms = 620 W.


def _powered_report(measurement):
    report = _report(measurement)
    conv, bn = report.layers
    conv.predicted_energy_j, bn.predicted_energy_j = 4.2, 2.0
    # calibrated layers and a constant power: what the former "stretched" energy (dynamic energy of the
    # calibrated layers + constant power x the new time) was computed from
    conv.calibrated_time_s, conv.calibrated_energy_j = 0.009, 5.0
    bn.calibrated_time_s, bn.calibrated_energy_j = 0.005, 2.0
    report.profile = SimpleNamespace(power_model=SimpleNamespace(constant_w=100.0))
    return report


def test_the_predicted_power_is_bound_energy_over_bound_time():
    from carm_advisor.advise.measured import bound_power_w

    report = _powered_report({})
    assert bound_power_w(report.layers) == pytest.approx(620.0)
    report.layers[1].predicted_energy_j = None              # a known layer without energy: no power
    assert bound_power_w(report.layers) is None


def test_a_calibrated_compiled_energy_is_its_time_at_the_carm_operating_point_power():
    # measured eager 58 ms, 20 J; calibrated torch.compile 29 ms x 620 W = 17.98 J: 20 / 17.98 = 1.112x less.
    # The former stretched energy, (5 - 100 x 0.009) + (2 - 100 x 0.005) + 100 x 0.029 = 4.1 + 1.5 + 2.9 = 8.5 J,
    # said 20 / 8.5 = 2.35x: this assertion fails on it.
    report = _powered_report(EAGER_AND_GRAPH)
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.029)))
    assert rec.speedup == pytest.approx(2.0)
    assert rec.energy_ratio == pytest.approx(20 / 17.98)
    # the report's power model has no duty curve method (a bare constant): the CARM operating point's power
    assert rec.expected_gain == ("2.00x faster, 1.11x less energy (calibrated prediction; energy: predicted time x "
                                 "the predicted whole-model power (the layers' duty powers; the CARM operating "
                                 "point's without a calibration))")
    # 58 ms and 29 ms as the header prints times; 17.98 J as it prints energies (units.si: 18 J)
    assert "torch now: 58 ms per call (measured); compiled: 29 ms" in rec.detail
    assert "18 J at 620 W, predicted" in rec.detail


def test_a_capped_compiled_energy_keeps_the_power_over_the_bound_time():
    # calibrated 5 ms raised to the 10 ms bound: 620 W x 10 ms = 6.2 J; 20 / 6.2 = 3.23x less energy
    report = _powered_report(EAGER_AND_GRAPH)
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", 0.005)))
    assert rec.speedup == pytest.approx(5.8)
    assert rec.energy_ratio == pytest.approx(20 / 6.2)
    # the measured CUDA-graph energy stays measured: 20 / 10 J, no power-model label
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", None)))
    assert rec.energy_ratio == pytest.approx(2.0)
    assert "CARM operating point" not in rec.expected_gain


def test_unmeasured_current_and_compiled_energies_share_the_predicted_power():
    # calibrated eager 30 ms x 620 W = 18.6 J; calibrated graph 15 ms x 620 W = 9.3 J: 2.0x, as the time
    report = _powered_report({})
    report.measurement = None
    report.calibration = {"execution": "eager", "whole_time_s": 0.030, "graph_time_s": 0.015, "whole_source": "fit"}
    rec = compilation_switch(report, report.layers, _predict(CompiledFit("torch.compile", None)))
    assert rec.energy_ratio == pytest.approx(18.6 / 9.3)
    assert "CARM operating point" in rec.basis


def test_another_backends_calibrated_energy_is_its_time_at_its_own_predicted_power():
    from carm_advisor.advise.measured import _whole

    # jax calibrated 20 ms at the rows' 620 W: 12.4 J (the former stretched energy: 5.6 + 100 x 0.020 = 7.6 J)
    report = _powered_report({})
    assert _whole(report, report.layers, CompiledFit("jit", 0.020), "jax", "jit") == pytest.approx((0.020, 12.4, False))


def test_the_advice_asks_the_calibration_for_the_model_by_its_name():
    # a compiled model with records of its own is predicted from them (Calibration._bound_fit): the advice
    # must name the model, or every model gets the other models' fit
    from carm_advisor.advise.measured import _whole

    seen = []

    class Named(CompiledFit):
        def whole_time_s(self, rows, backend, execution, model=None):
            seen.append(("time", execution, model))
            return super().whole_time_s(rows, backend, execution, model)

        def whole_describe(self, backend, execution, rows=None, model=None):
            seen.append(("describe", execution, model))
            return super().whole_describe(backend, execution, rows, model)

    report = _report(EAGER_AND_GRAPH)
    compilation_switch(report, report.layers, _predict(Named("torch.compile", 0.029)))
    _whole(_report({}), report.layers, Named("jit", 0.020), "jax", "jit")
    assert ("time", "torch.compile", "m") in seen and ("describe", "torch.compile", "m") in seen
    assert ("time", "jit", "m") in seen


# ---- a larger batch, judged on the whole model as its user runs it -----------------------------------------

class EagerFit:
    """A calibration whose eager whole-model time is host-bound: 50 ms at batch 64, 80 ms for `changed` rows."""

    def __init__(self, changed):
        self.changed = changed

    def whole_time_s(self, rows, backend, execution, model=None):
        assert execution == "eager"
        return 0.080 if rows is self.changed else 0.050


def test_a_larger_batch_on_a_host_paced_eager_model_is_judged_on_the_whole_model():
    import dataclasses

    from carm_advisor.advise.recommend import _larger_batch

    report = _report({"inference": {"time_s": 0.058, "energy_j": 20.0, "execution": "eager"}})
    # at batch 256 every layer takes 4x as long: per sample the layers' sum gains nothing (the former basis)
    alt = [dataclasses.replace(r, predicted_time_s=r.predicted_time_s * 4, predicted_energy_j=e)
           for r, e in zip(report.layers, (2.4, 1.6))]
    calib = EagerFit(alt)
    predict = SimpleNamespace(predictor=SimpleNamespace(calibration=calib), rows=lambda batch_size: alt)
    rec = _larger_batch(report, report.layers, predict)
    # measured now 58 ms / 64 = 0.906 ms per sample; calibrated eager at 256: 80 ms / 256 = 0.3125 ms: 2.90x.
    # Energy: measured 20 J / 64; 80 ms at the bound power of the changed rows, (2.4 + 1.6) J / (24 + 16) ms =
    # 100 W (no profile power model here): 8 J / 256 -> 10x less per sample.
    assert rec.change == {"batch_size": 256}
    assert rec.speedup == pytest.approx(0.058 / 64 / (0.080 / 256))
    assert rec.energy_ratio == pytest.approx((20 / 64) / (8 / 256))
    assert rec.expected_gain == "2.90x faster, 10.00x less energy (measured now vs calibrated, whole model) per sample"


def test_verify_compares_a_compile_advice_on_the_power_basis_the_advice_used():
    # A real power model with a duty curve: 100 W constant, d = min(1, t_bound / t) ** 0.5. Unmeasured report:
    # conv busy 700 W, bound 6 ms, calibrated 9 ms; bn busy 500 W, bound 4 ms, calibrated 5 ms.
    # eager (host-paced, 30 ms; its GPU share = cuda_graph 15 ms / 30 ms = 0.5) and torch.compile (12 ms).
    #   conv: 100 + 600 * (6/9) ** 0.5 = 589.90 W; bn: 100 + 400 * (4/5) ** 0.5 = 457.77 W
    #   time-weighted over 9 + 5 ms: (589.90 * 9 + 457.77 * 5) / 14 = 542.71 W
    #   eager: 100 + 442.71 * 0.5 = 321.35 W; compiled: 542.71 W
    from carm_advisor.advise.analyze import _whole_model_calibration
    from carm_advisor.advise.verify import on_worker_baseline
    from carm_advisor.carm.power_model import DutyCurve, PowerModel

    class Fit:
        samples, provenance = [], {}

        def whole_time_s(self, rows, backend, execution, model=None):
            return {"eager": 0.030, "cuda_graph": 0.015, "torch.compile": 0.012}[execution]

        def whole_describe(self, *args, **kwargs):
            return "fit"

    report = _report({})
    report.measurement = None
    conv, bn = report.layers
    conv.predicted_energy_j, bn.predicted_energy_j = 4.2, 2.0
    conv.predicted_power_w, bn.predicted_power_w = 700.0, 500.0
    conv.calibrated_time_s, bn.calibrated_time_s = 0.009, 0.005
    pm = PowerModel(constant_w=100.0, duty=DutyCurve(None, 0.5, variable="efficiency"))
    report.profile = SimpleNamespace(power_model=pm)
    calib = Fit()
    report.calibration = _whole_model_calibration(report.layers, calib, "torch", "m", pm)
    busy = (100 + 600 * (6 / 9) ** 0.5) * 9 / 14 + (100 + 400 * (4 / 5) ** 0.5) * 5 / 14
    eager_w, compiled_w = 100 + (busy - 100) * 0.5, busy
    assert report.calibration["whole_power_w"] == pytest.approx(eager_w)
    rec = compilation_switch(report, report.layers, _predict(calib))
    assert rec.energy_ratio == pytest.approx(0.030 * eager_w / (0.012 * compiled_w))
    # the worker measured 25 ms and 10 J uncompiled: against it, the compiled run is predicted at 12 ms x the
    # compiled power (before the fix: the eager energy at the CARM operating point's power, another basis)
    _, energy_ratio, _ = on_worker_baseline(report, rec, {"ok": True, "time_s": 0.025, "energy_j": 10.0},
                                            {"compile": "eager"})
    assert energy_ratio == pytest.approx(10.0 / (0.012 * compiled_w))
