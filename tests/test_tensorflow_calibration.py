"""TensorFlow gets calibrated figures: Keras on TensorFlow runs model.predict under XLA on a GPU, the compiler jax's
jit records measured, and no TensorFlow run is recorded on the calibrated GPUs; so its XLA figures come from jax's jit records, said
wherever they show ("calibrated from XLA runs on jax; TensorFlow not measured on this GPU"). Without XLA it keeps its
CARM bound, and the header says what would give calibrated figures. A tiny model's layers, far below any kernel
launch, carry a caution instead of standing at picosecond bounds alone.

Reference figures are computed independently of the borrowing: the jax path of the same calibration on the same
rows, and the launch floors read from the shipped JSON files."""

from __future__ import annotations

import io
import json
import sys
from importlib import resources
from pathlib import Path

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.calibration import shipped_calibration
from carm_advisor.calibration.samples import WholeSample
from carm_advisor.calibration.store import borrowed_note, with_borrowed
from carm_advisor.predict import Predictor, resolve_math_mode
from carm_advisor.profiles.profile import load_profile
from carm_advisor.report.render import header_warnings, print_report
from carm_advisor.trials.space import SearchSpace, TrialConfig, installed_backends
from carm_advisor.units import seconds

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

NOTE = "calibrated from XLA runs on jax; TensorFlow not measured on this GPU"
tensorflow_only = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                     reason="analyze's TensorFlow figures need the tensorflow backend")


def conv_net():
    inputs = keras.Input(shape=(32, 32, 16))
    x = keras.layers.Conv2D(32, 3, name="conv")(inputs)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(16, name="predictions")(x), name="net")


def tiny():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="d1"), keras.layers.Dense(2, name="d2")],
                            name="tiny")


def text_of(report, width=400):
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=width))
    return " ".join(buf.getvalue().replace("│", " ").split())


def header_of(report):
    return text_of(report).split("Layers on the CARM")[0]


# ---- the calibration: jax's jit records stand in for tensorflow's XLA -----------------------------------

def test_tensorflow_xla_takes_the_jax_jit_fit_and_says_so():
    shipped = shipped_calibration("NVIDIA H200")
    borrowed = with_borrowed(shipped, "tensorflow", "jit")
    rows = Predictor(load_profile(), resolve_math_mode("jax"), backend="jax", calibration=shipped).rows(conv_net(), 64)
    jax_time = shipped.whole_time_s(rows, "jax", "jit", "net")
    assert jax_time and borrowed.whole_time_s(rows, "tensorflow", "jit", "net") == pytest.approx(jax_time)
    assert shipped.whole_time_s(rows, "tensorflow", "jit", "net") is None     # before: no tensorflow record
    assert NOTE in borrowed.whole_describe("tensorflow", "jit", rows, "net")
    assert NOTE not in borrowed.whole_describe("jax", "jit", rows, "net")
    assert borrowed_note(borrowed, "tensorflow") == NOTE and borrowed_note(borrowed, "jax") is None
    conv = next(r for r in rows if r.name == "conv")
    assert borrowed.efficiency(conv, "tensorflow") == pytest.approx(shipped.efficiency(conv, "jax"))
    assert NOTE in borrowed.describe(conv, "tensorflow")


def test_a_calibration_with_tensorflow_records_of_its_own_keeps_them():
    shipped = shipped_calibration("NVIDIA H200")
    own = WholeSample(backend="tensorflow", execution="jit", time_s=0.01, matmul_sum_s=0.0, other_sum_s=0.0,
                      layer_calls=3, model="m")
    mine = shipped.extended(type(shipped)([], [own], {}))
    assert with_borrowed(mine, "tensorflow", "jit") is mine
    assert with_borrowed(shipped, "tensorflow", "eager") is shipped       # TensorFlow without XLA: nothing stands in
    assert with_borrowed(None, "tensorflow", "jit") is None


# ---- analyze: the header and the JSON -------------------------------------------------------------------

@tensorflow_only
def test_analyze_on_tensorflow_gives_the_xla_calibrated_figure_labelled():
    report = advisor.analyze(conv_net(), batch_size=64, measure=False)
    shipped = shipped_calibration("NVIDIA H200")
    rows = Predictor(load_profile(), resolve_math_mode("jax"), backend="jax", calibration=shipped).rows(conv_net(), 64)
    assert report.calibration["whole_time_s"] == pytest.approx(shipped.whole_time_s(rows, "jax", "jit", "net"))
    assert report.calibration["execution"] == "jit" and report.calibration["borrowed"] == NOTE
    assert report.totals()["time_source"] == "calibrated prediction"
    header = header_of(report)
    assert f"(jit; {NOTE})" in header and "calibrated prediction none" not in header
    saved = json.loads(report.to_json_text())
    assert saved["calibration"]["borrowed"] == NOTE and NOTE in saved["calibration"]["whole_source"]
    assert all(NOTE in layer["calibration"] for layer in saved["layers"] if layer.get("calibrated_time_s"))
    # already under XLA: no advice to compile with it
    assert not any("jit_compile=True" in r.title for r in report.recommendations)


@tensorflow_only
def test_tensorflow_without_xla_keeps_the_bound_and_names_what_gives_calibrated_figures():
    model = conv_net()
    model.compile(jit_compile=False)
    report = advisor.analyze(model, batch_size=64, measure=False)
    assert not report.calibration.get("whole_time_s")
    assert all(not r.calibrated_time_s for r in report.layers)
    header = header_of(report)
    assert "calibrated prediction none for tensorflow without XLA (the model is compiled with jit_compile=False" \
        in header
    assert ("model.compile(jit_compile=True) (XLA) or KERAS_BACKEND=jax or KERAS_BACKEND=torch gives calibrated "
            "figures on this GPU") in header


@tensorflow_only
def test_a_tiny_models_bound_below_the_launch_floor_is_cautioned_in_the_header():
    """H200: the profile measured no launch floor; the shipped calibration's kernel floor (the GPU side of one
    launch, 6.99 us) is the floor. Both Dense layers' bounds are picoseconds: far below it, and so is the model's."""
    floor = json.loads(resources.files("carm_advisor.profiles").joinpath("nvidia_h200_calibration.json").read_text())[
        "provenance"]["kernel_floor"]["value_s"]
    model = tiny()
    model.compile(jit_compile=False)
    report = advisor.analyze(model, batch_size=1, measure=False)
    header = header_of(report)
    bound = sum(r.predicted_time_s for r in report.layers)
    assert bound < 1e-9 and bound == pytest.approx(report.totals()["time_s"])   # the headline is the bound
    assert (f"the whole model is launch-bound: its CARM bound ({seconds(bound)}) is below launching the kernels of "
            f"its 2 layers (2 x {seconds(floor)}); 2 of 2 layers have a CARM bound below the GPU's launch floor "
            f"({seconds(floor)}, the GPU side of one kernel launch, measured on this GPU model): d1, d2") in header
    assert "host-bound" in header
    assert header_warnings(report) == []        # a caution, not a batch that cannot run: the CLI refuses none
    # under XLA the calibrated times include the launches: no caution
    calibrated = advisor.analyze(tiny(), batch_size=1, measure=False)
    assert all(r.calibrated_time_s and r.calibrated_time_s > floor for r in calibrated.layers)
    assert "launch floor" not in " ".join(calibrated.warnings)


@tensorflow_only
def test_a_model_whose_few_small_layers_lie_below_the_floor_is_told_below_not_in_the_header():
    """VGG16 at batch 64 without XLA: its last pooling and output layers are below the floor (bounds of a few us),
    the model as a whole (5.6 ms) is not."""
    model = keras.applications.VGG16(weights=None)
    model.compile(jit_compile=False)
    report = advisor.analyze(model, batch_size=64, measure=False)
    said = [w for w in report.warnings if "launch floor" in w]
    # 13 Conv2D + 5 MaxPooling2D + 3 Dense do work (Flatten moves nothing)
    assert len(said) == 1 and said[0].startswith("2 of 21 layers have a CARM bound below the GPU's launch floor")
    assert "block5_pool, predictions" in said[0]
    assert "launch floor" not in header_of(report)


@tensorflow_only
def test_the_profiles_own_launch_floor_is_used_where_it_has_one():
    """The shipped H100 profile measured one launch + sync: 33.3 us on the host, 7.36 us of it on the GPU."""
    doc = json.loads(resources.files("carm_advisor.profiles").joinpath("nvidia_h100_80gb_hbm3.json").read_text())
    floor = doc["launch_floor"]["provenance"]["gpu_time_s"]
    report = advisor.analyze(tiny(), batch_size=1, measure=False, calibration=False, profile="h100")
    (said,) = [w for w in report.warnings if "launch floor" in w]
    assert f"({seconds(floor)}, the GPU side of one kernel launch, the profile's measured launch floor)" in said


# ---- a predicted tune study ------------------------------------------------------------------------------

def _predictor():
    from tiny_models import tiny_cnn

    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor

    return ConfigPredictor(model_spec(tiny_cnn), calibration=True)


def test_a_predicted_studys_tensorflow_xla_is_calibrated_from_jax_and_graph_keeps_its_bound():
    p = _predictor()
    tf_xla = p.value_prediction(TrialConfig("tensorflow", "float32", 64, "channels_last", "xla"))
    jax_xla = p.value_prediction(TrialConfig("jax", "float32", 64, "channels_last", "xla"))
    assert tf_xla.value_source == "calibrated" and tf_xla.time_s == pytest.approx(jax_xla.time_s)
    assert NOTE in tf_xla.detail and NOTE not in jax_xla.detail
    graph_cfg = TrialConfig("tensorflow", "float32", 64, "channels_last", "graph")
    graph = p.value_prediction(graph_cfg)
    assert graph.value_source == "CARM bound" and graph.time_s == p.predict(graph_cfg).time_s
    assert "without XLA" in graph.detail
    assert p.calibrates("tensorflow", "xla") and not p.calibrates("tensorflow", "graph")
    assert p.calibration_note("tensorflow").startswith(NOTE) and p.calibration_note("jax") is None


def test_the_tune_panel_marks_tensorflows_borrowed_values(tmp_path):
    from carm_advisor.tune.render import render
    from carm_advisor.tune.study import tune

    base = TrialConfig("tensorflow", "float32", 32, "channels_last", "xla")
    space = SearchSpace(backends=("tensorflow",), precisions=("float32",), batch_sizes=(32, 64),
                        layouts=("channels_last",), compilers={"tensorflow": ("graph", "xla")})
    result = tune("tiny_models:tiny_cnn", n_trials=3, storage=str(tmp_path / "s.db"), space=space, baseline=base,
                  predict=True, predictor=_predictor(), progress=False, carm_pruning=False)
    assert result.baseline.value_source == "calibrated"
    assert result.calibration_notes["tensorflow"].startswith(NOTE)
    assert result.to_dict()["calibration_notes"] == result.calibration_notes
    buf = io.StringIO()
    for part in render(result):
        Console(file=buf, width=250).print(part)
    text = buf.getvalue()
    assert "calibrated\u00a7" in text and f"\u00a7 tensorflow: {NOTE}" in text
    # model.predict's own default on a GPU is XLA: a calibrated reference for the best, marked as borrowed
    assert result.default_gain("tensorflow") is not None
    assert "over the Keras defaults on tensorflow\u00a7 (tensorflow, float32, b32, channels_last, xla)" in text


def test_tune_searches_every_installed_backend_by_default():
    assert SearchSpace.default().backends == installed_backends()
    assert "tensorflow" in installed_backends()     # the README's install


@tensorflow_only
def test_a_measured_eager_tensorflow_model_is_told_the_xla_gain_from_jax_records():
    """model(x) measured eagerly on TensorFlow (what a measured analysis times): compiling with XLA is quantified by
    jax's jit fit of the same rows, labelled."""
    from types import SimpleNamespace

    from carm_advisor.advise.measured import compilation_switch
    from carm_advisor.results import MeasurementInfo

    shipped = shipped_calibration("NVIDIA H200")
    report = advisor.analyze(conv_net(), batch_size=64, measure=False, calibration=False)
    jax_time = shipped.whole_time_s(report.layers, "jax", "jit", "net")
    report.measurement = MeasurementInfo(inference={"time_s": 2 * jax_time, "execution": "eager"},
                                         training_step=None, inference_graph=None, date=None, command=None)
    report.calibration = {}
    rec = compilation_switch(report, report.layers, SimpleNamespace(predictor=SimpleNamespace(calibration=shipped)))
    assert rec.change == {"compile": "xla"} and rec.speedup == pytest.approx(2.0)
    assert NOTE in rec.detail
