"""One recommendation about compiling, with one figure or one stated reason: fusing the elementwise layers is what
the compiler does, so 'fuse them (compile with XLA)' at a CARM figure and 'compile with XLA: not quantified' are one
piece of advice, not two that contradict each other."""

from __future__ import annotations

import keras
import pytest

import carm_advisor as advisor
from carm_advisor.advise.recommend import FUSE_TITLE, one_compile_advice
from carm_advisor.report.model import Report
from carm_advisor.results import LayerRow, MeasurementInfo, ModelInfo, Recommendation

COMPILING = ("jit_compile", "torch.compile", "XLA")


def about_compiling(rec) -> bool:
    return any(word in f"{rec.title} {rec.detail}" for word in COMPILING)


def conv_bn_relu():
    inputs = keras.Input(shape=(56, 56, 64))
    x = keras.layers.Conv2D(64, 3, padding="same", name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(name="relu")(x)
    return keras.Model(inputs, x, name="conv_bn_relu")


def test_tensorflow_gets_one_compile_advice_with_the_fusion_figure():
    """A tensorflow model compiled without XLA, no calibration: the one compile advice carries the fusion's CARM
    figure, the bound time of the model over that without its memory-bound elementwise layers (bn, relu)."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("XLA by jit_compile is the tensorflow backend's choice; jax runs jitted, torch has calibrations")
    model = conv_bn_relu()
    model.compile(jit_compile=False)
    report = advisor.analyze(model, batch_size=64, measure=False, calibration=False)
    (rec,) = [r for r in report.recommendations if about_compiling(r)]
    rows = {r.name: r.predicted_time_s for r in report.layers if r.predicted_time_s}
    total = sum(rows.values())
    assert rec.speedup == pytest.approx(total / (total - rows["bn"] - rows["relu"]))
    assert "not quantified" not in rec.expected_gain
    assert rec.change == {"compile": "xla"} and rec.layers == ["bn", "relu"]
    assert "fold BatchNormalization into the preceding convolution" in rec.detail
    assert rec.title.startswith("Compile the model with XLA")


def test_tensorflow_under_xla_is_not_told_to_compile_with_it():
    """Keras runs model.predict under XLA on a GPU (jit_compile='auto'): an uncompiled tensorflow model is analysed
    so, and no advice tells it to compile with XLA; the fusion advice says XLA fuses them."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("XLA by jit_compile is the tensorflow backend's choice")
    report = advisor.analyze(conv_bn_relu(), batch_size=64, measure=False, calibration=False)
    assert not [r for r in report.recommendations if (r.change or {}).get("compile")]
    (fusion,) = [r for r in report.recommendations if r.title == FUSE_TITLE]
    assert "XLA fuses these" in fusion.detail and "jit_compile=True" not in fusion.detail


def _rows():
    def row(name, type_, bound, time_s):
        return LayerRow(name=name, type=type_, dtype="float32", flops=1e9, bytes=1e6, ai=1e3, ai_source="analytic",
                        path="tc_tf32", level="hbm", bound=bound, attainable_flops_per_s=1e12,
                        predicted_time_s=time_s, predicted_energy_j=None, tensor_core=type_ == "Conv2D", known=True)

    # 6 ms of convolution, 3 + 1 ms of memory-bound BatchNormalization and ReLU
    return [row("conv", "Conv2D", "compute:tc_tf32", 0.006), row("bn", "BatchNormalization", "memory:hbm", 0.003),
            row("relu", "ReLU", "memory:hbm", 0.001)]


def _report(backend="torch", execution="eager"):
    model = ModelInfo(name="m", batch_size=8, precision="float32", layout="channels_last", backend=backend,
                      math_mode={})
    measurement = MeasurementInfo(inference={"time_s": 0.02, "execution": execution}, training_step=None,
                                  inference_graph=None, date=None, command=None)
    return Report(model=model, device={}, ceilings={}, layers=_rows(), recommendations=[], measurement=measurement)


FUSION = Recommendation(title=FUSE_TITLE, detail="...", expected_gain="1.67x faster (CARM prediction)",
                        speedup=10 / 6, layers=["bn", "relu"])   # 10 ms / (10 - 4) ms


def test_a_calibrated_compile_figure_is_the_one_figure_and_the_fusion_is_said_in_it():
    compiled = Recommendation(title="Compile the model with torch.compile (stays on the torch backend)",
                              detail="model.compile(jit_compile=True) ...", expected_gain="1.25x faster (calibrated)",
                              speedup=1.25, change={"compile": "torch.compile"})
    report = _report()
    (rec,) = one_compile_advice(report, report.layers, [FUSION, compiled])
    assert rec.speedup == 1.25 and rec.expected_gain == "1.25x faster (calibrated)"
    assert "2 elementwise layers (1 BatchNormalization, 1 ReLU; 40% of the predicted time)" in rec.detail
    assert rec.layers == ["bn", "relu"] and rec.change == {"compile": "torch.compile"}


def test_an_unquantified_compile_advice_takes_the_fusion_figure_and_says_what_it_counts():
    compiled = Recommendation(title="Compile the model with XLA (jit_compile=True) (stays on the tensorflow backend)",
                              detail="model.compile(jit_compile=True) ...",
                              expected_gain="not quantified (no tensorflow xla record in the calibration)",
                              change={"compile": "xla"})
    report = _report("tensorflow")
    (rec,) = one_compile_advice(report, report.layers, [FUSION, compiled])
    assert rec.speedup == pytest.approx(10 / 6)
    assert rec.expected_gain.startswith("1.67x faster (CARM prediction of the fused elementwise traffic alone")
    assert "not quantified" not in rec.expected_gain


def test_where_compiling_is_predicted_to_gain_nothing_no_fusion_figure_contradicts_it():
    """No compile advice for an eager torch model: the calibrated compiled model is no faster; the fusion's 1.67x
    from the same compiler would say the opposite."""
    report = _report()
    assert one_compile_advice(report, report.layers, [FUSION]) == []


def test_jax_keeps_its_fusion_advice_which_says_jit_already_fuses():
    report = _report("jax", "jit")
    assert one_compile_advice(report, report.layers, [FUSION]) == [FUSION]
