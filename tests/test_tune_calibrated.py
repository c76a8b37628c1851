"""Predicted studies report the CALIBRATED prediction as each trial's value: per compiler the
calibration's whole-model execution, energy = calibrated time x the configuration's predicted power,
a CARM bound only where no calibration applies (labelled, and not ranked against calibrated values).
Every expected figure is worked out in the comments."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

from stubs import BackendTablePredictor, three_backend_space  # noqa: E402

from carm_advisor.trials.predicted import VALUE_BOUND, VALUE_CALIBRATED, WHOLE_EXECUTION, ConfigPredictor  # noqa: E402
from carm_advisor.trials.runner import PredictedRunner  # noqa: E402
from carm_advisor.trials.space import TrialConfig  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402


class StubCalibration:
    """Whole-model fits for torch eager / cuda_graph and jax jit only; the whole time is a fixed multiple
    of the bound time per execution (x3 eager, x2 graph, x1.5 jit); every layer calibrated (x2)."""

    FACTOR = {("torch", "eager"): 3.0, ("torch", "cuda_graph"): 2.0, ("jax", "jit"): 1.5}

    def __init__(self):
        self.whole_calls = []

    def efficiency(self, row, backend):
        return 0.5 if backend in ("torch", "jax") else None

    def describe(self, row, backend):
        return "stub"

    def whole_fit(self, backend, execution):
        return object() if (backend, execution) in self.FACTOR else None

    def whole_describe(self, backend, execution, rows=None, model=None):
        return f"stub {execution}"

    def whole_time_s(self, rows, backend, execution, model=None):
        self.whole_calls.append((backend, execution))
        bound = sum(r.predicted_time_s for r in rows if r.known and r.predicted_time_s is not None)
        return self.FACTOR[(backend, execution)] * bound


def _predictor(calibration):
    from tiny_models import tiny_cnn

    from carm_advisor.models.builder import model_spec

    return ConfigPredictor(model_spec(tiny_cnn), calibration=calibration)


def test_compiler_picks_the_calibrations_whole_model_execution():
    assert WHOLE_EXECUTION == {("torch", "eager"): "eager", ("torch", "torch.compile"): "cuda_graph",
                               ("jax", "xla"): "jit", ("tensorflow", "xla"): "jit"}
    calib = StubCalibration()
    p = _predictor(calib)
    for backend, compiler, factor in (("torch", "eager", 3.0), ("torch", "torch.compile", 2.0), ("jax", "xla", 1.5)):
        config = TrialConfig(backend, "mixed_bfloat16", 32, "channels_last", compiler)
        bound = p.predict(config)
        value = p.value_prediction(config)
        assert value.value_source == VALUE_CALIBRATED and "calibrated" in value.source
        assert value.time_s == pytest.approx(factor * bound.time_s)
        # energy = calibrated time x the predicted whole-model power (predict.whole_model_power_w, checked by
        # hand in tests/test_whole_model_power.py): above the constant power, at most the busiest layer's,
        # and not the CARM operating point's power (the former basis: the duty curve lowers it)
        from carm_advisor.predict import whole_model_power_w

        pm = p.profile.power_model
        power_w = value.energy_j / value.time_s
        assert power_w == pytest.approx(whole_model_power_w(bound.rows, pm, calib, backend,
                                                            WHOLE_EXECUTION[(backend, compiler)], p.spec.name))
        busiest = max(r.predicted_power_w for r in bound.rows if r.known and r.predicted_power_w)
        assert pm.constant_w < power_w <= busiest
        assert power_w < bound.energy_j / bound.time_s
        assert value.flops == bound.flops
    assert ("torch", "cuda_graph") in calib.whole_calls
    # torch.compile's mapping is an assumption and says so
    assert "ASSUMED" in p.value_prediction(TrialConfig("torch", "float32", 32, "channels_last", "torch.compile")).detail


class CompiledStubCalibration(StubCalibration):
    """As StubCalibration, plus a whole-model fit of measured torch.compile runs: x1.25 the bound."""

    FACTOR = {**StubCalibration.FACTOR, ("torch", "torch.compile"): 1.25}


def test_torch_compile_uses_the_calibrations_own_fit_where_it_has_one():
    calib = CompiledStubCalibration()
    p = _predictor(calib)
    config = TrialConfig("torch", "mixed_bfloat16", 32, "channels_last", "torch.compile")
    bound = p.predict(config)
    value = p.value_prediction(config)
    # 1.25 x the bound (the torch.compile fit), not 2 x (the CUDA-graph assumption)
    assert value.time_s == pytest.approx(1.25 * bound.time_s)
    assert value.value_source == VALUE_CALIBRATED
    assert "ASSUMED" not in value.detail and "torch.compile whole-model fit" in value.detail
    assert ("torch", "torch.compile") in calib.whole_calls and ("torch", "cuda_graph") not in calib.whole_calls
    assert p.calibrates("torch", "torch.compile")


def test_no_calibration_or_no_records_keeps_the_bound_and_says_why():
    p = _predictor(StubCalibration())
    tf = TrialConfig("tensorflow", "float32", 32, "channels_last", "graph")
    v = p.value_prediction(tf)
    assert v.value_source == VALUE_BOUND and v.time_s == p.predict(tf).time_s
    assert "tensorflow" in v.detail
    assert not p.calibrates("tensorflow", "xla") and p.calibrates("jax", "xla")
    none = _predictor(False)
    t = TrialConfig("torch", "float32", 32, "channels_last", "eager")
    v = none.value_prediction(t)
    assert v.value_source == VALUE_BOUND and "no calibration" in v.detail and v.time_s == none.predict(t).time_s


def test_predicted_runner_labels_each_trial():
    p = _predictor(StubCalibration())
    m = PredictedRunner(p).run(TrialConfig("jax", "float32", 32, "channels_last", "xla"))
    assert m.extra["value_source"] == VALUE_CALIBRATED
    assert m.time_s == pytest.approx(1.5 * m.extra["bound_time_s"])


# ---- the study: a hand-made predictor (no Keras) -------------------------------------------------

class TablePredictor(BackendTablePredictor):
    """Bound and calibrated (time_s, energy_j) per backend at batch 32, 32e9 FLOPs: GF/W = 32 / energy_j.

    torch eager: bound 0.01 s / 1 J (32 GF/W), calibrated 0.03 s / 3 J (10.7 GF/W)
    jax xla:     bound 0.01 s / 1 J (32 GF/W), calibrated 0.02 s / 2 J (16 GF/W)
    tensorflow graph: bound only 0.005 s / 0.5 J (64 GF/W): would win if it were ranked."""

    def __init__(self, calibrated=True):
        super().__init__({"torch": (0.01, 1.0), "jax": (0.01, 1.0), "tensorflow": (0.005, 0.5)},
                         {"torch": (0.03, 3.0), "jax": (0.02, 2.0)}, calibrated)


def _space():
    return three_backend_space()


def test_calibrated_study_ranks_calibrated_values_and_never_lets_a_bound_win(tmp_path):
    base = TrialConfig("torch", "float32", 32, "channels_last", "eager")
    r = tune("vgg16", n_trials=6, storage=str(tmp_path / "s.db"), space=_space(), baseline=base, predict=True,
             predictor=TablePredictor(), progress=False, carm_pruning=False)
    assert r.study_name.endswith("-calibrated")
    by_backend = {t.config.backend: t for t in r.trials if t.state == "COMPLETE" and t.repeat_of is None}
    assert by_backend["torch"].value_source == "calibrated" and by_backend["torch"].values[0] == pytest.approx(32 / 3)
    assert by_backend["tensorflow"].value_source == "CARM bound" and by_backend["tensorflow"].values[0] == pytest.approx(64)
    assert not by_backend["tensorflow"].feasible
    # best: jax 16 GF/W (calibrated), not tensorflow's 64 (a bound); gain 16 / 10.67 = 1.5
    assert r.best.config.backend == "jax" and r.best.value_source == "calibrated"
    assert r.gain() == pytest.approx(1.5)
    d = r.to_dict()
    assert d["counts"]["uncalibrated_not_ranked"] == 1
    assert d["value_sources"] == {"calibrated": 2, "CARM bound": 1}
    assert "not ranked" in d["value_policy"] and "random weights" in d["caveats"]["top1_agreement"]


def test_a_bound_baseline_gives_no_gain_against_a_calibrated_best(tmp_path):
    base = TrialConfig("tensorflow", "float32", 32, "channels_last", "graph")
    r = tune("vgg16", n_trials=4, storage=str(tmp_path / "s.db"), space=_space(), baseline=base, predict=True,
             predictor=TablePredictor(), progress=False, carm_pruning=False)
    assert r.best.value_source == "calibrated" and r.gain() is None and "not comparable" in r.gain_note


def test_without_calibration_every_value_is_the_bound_and_all_compete(tmp_path):
    base = TrialConfig("torch", "float32", 32, "channels_last", "eager")
    r = tune("vgg16", n_trials=5, storage=str(tmp_path / "s.db"), space=_space(), baseline=base, predict=True,
             predictor=TablePredictor(calibrated=False), progress=False, carm_pruning=False)
    assert not r.study_name.endswith("-calibrated")
    assert r.best.config.backend == "tensorflow" and r.best.values[0] == pytest.approx(64)   # 32 / 0.5
    assert r.value_policy.startswith("CARM bounds")


def test_carm_pruning_compares_the_bound_with_calibrated_values(tmp_path):
    """Baseline torch calibrated 10.7 GF/W; a jax bound of 32 GF/W could beat it: run (16 calibrated). With a
    bound under the best calibrated value (+10%) the configuration is pruned unevaluated."""
    class Low(TablePredictor):
        def __init__(self):
            super().__init__()
            self.bound = {"torch": (0.01, 1.0), "jax": (0.01, 1.0), "tensorflow": (0.01, 4.0)}   # tf bound 8 GF/W
    base = TrialConfig("torch", "float32", 32, "channels_last", "eager")
    r = tune("vgg16", n_trials=6, storage=str(tmp_path / "s.db"), space=_space(), baseline=base, predict=True,
             predictor=Low(), progress=False)
    tf = [t for t in r.trials if t.config and t.config.backend == "tensorflow"]
    # 8 * 1.1 = 8.8 < 10.7 (the baseline's calibrated value): pruned, never evaluated
    assert tf and all(t.pruned_reason == "carm_bound" for t in tf)


def test_cli_no_calibration_reaches_tune(monkeypatch, tmp_path):
    import carm_advisor.tune.study as study_mod
    from carm_advisor.cli import main

    seen = []

    class Stop(Exception):
        pass

    def fake_tune(model, options):
        seen.append(options.calibration)
        raise Stop

    monkeypatch.setattr(study_mod, "tune", fake_tune)
    monkeypatch.setenv("CARM_ADVISOR_DEBUG", "1")   # the CLI lets our exception through
    for extra in ([], ["--no-calibration"]):
        with pytest.raises(Stop):
            main(["tune", "vgg16", "--trials", "1", "--storage", str(tmp_path / "s.db"), *extra])
    assert seen == ["auto", False]


def test_the_tuner_asks_the_calibration_for_its_model_by_name():
    # the tuner's whole-model time and its description name the model (its own records first)
    seen = []

    class Named(StubCalibration):
        def whole_time_s(self, rows, backend, execution, model=None):
            seen.append(("time", model))
            return super().whole_time_s(rows, backend, execution, model)

        def whole_describe(self, backend, execution, rows=None, model=None):
            seen.append(("describe", model, bool(rows)))
            return super().whole_describe(backend, execution, rows, model)

    p = _predictor(Named())
    p.value_prediction(TrialConfig("jax", "mixed_bfloat16", 32, "channels_last", "xla"))
    name = p.spec.name
    assert name and ("time", name) in seen and ("describe", name, True) in seen


# ---- recurrent layers: the predicted times ignore the dependence between steps, and the result says so ----

def _row(name, type_, notes):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, type=type_, known=True, notes=notes, predicted_time_s=0.004,
                           bound="compute:tc_tf32", path="tensor")


class RecurrentPredictor(TablePredictor):
    """TablePredictor's figures; its bound's rows: an LSTM of 50 steps, a GRU of 30, a Dense (the notes the
    mapping writes for recurrent layers: 'N sequential steps: ...')."""

    ROWS = [_row("lstm", "LSTM", "50 sequential steps: gate matmuls on Tensor Cores, gate arithmetic on CUDA cores"),
            _row("gru", "GRU", "30 sequential steps: gate matmuls on Tensor Cores; slowed by the power limit (predicted)"),
            _row("head", "Dense", "")]

    def predict(self, config):
        import dataclasses

        return dataclasses.replace(super().predict(config), rows=self.ROWS)


def _recurrent_study(tmp_path, predictor=None, **kwargs):
    base = TrialConfig("torch", "float32", 32, "channels_last", "eager")
    return tune("vgg16", n_trials=4, storage=str(tmp_path / "r.db"), space=_space(), baseline=base, predict=True,
                predictor=predictor or RecurrentPredictor(), progress=False, carm_pruning=False, **kwargs)


def _text(result):
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(result)
    return out.getvalue()


RECURRENT_WARNING = ("recurrent layers (lstm: 50 steps, gru: 30 steps): each step waits for the one before, and the "
                     "predicted times (CARM bound and calibrated) ignore that dependence; the real time can be far longer")


def test_a_predicted_study_of_recurrent_layers_warns_in_one_line(tmp_path):
    r = _recurrent_study(tmp_path)
    assert r.warnings.count(RECURRENT_WARNING) == 1 and "\n" not in RECURRENT_WARNING
    d = r.to_dict()
    assert RECURRENT_WARNING in d["warnings"]
    assert d["recurrent"] == [{"layer": "lstm", "steps": 50}, {"layer": "gru", "steps": 30}]
    # 50 + 30 steps, one after the other
    assert d["gain_caveat"] == ("every gain is a prediction ignoring the 80 sequential steps of lstm, gru "
                                "(each waits for the one before)")
    assert f"warning: {RECURRENT_WARNING}" in _text(r)


def test_its_gain_lines_say_they_are_predictions_ignoring_the_steps(tmp_path):
    r = _recurrent_study(tmp_path)
    text = _text(r)
    # best jax 16 GF/W over the torch baseline's 32/3: 1.50x; the same over torch's Keras defaults (the baseline)
    assert r.gain() == pytest.approx(1.5)
    main_line = next(line for line in text.splitlines() if "gain 1.50x in gflops_per_watt   " in line)
    assert main_line.rstrip(" │").endswith("; a prediction ignoring the 80 sequential steps of lstm, gru "
                                           "(each waits for the one before)")
    assert ("gain 1.50x in gflops_per_watt over the Keras defaults on torch (torch, float32, b32, channels_last, "
            "eager), both calibrated predictions ignoring the 80 sequential steps of lstm, gru") in text


def test_no_recurrent_layer_no_warning(tmp_path):
    class Plain(RecurrentPredictor):
        ROWS = [_row("head", "Dense", "")]

    r = _recurrent_study(tmp_path, Plain())
    assert r.recurrent == [] and not any("recurrent" in w for w in r.warnings)
    assert r.to_dict()["gain_caveat"] is None and "sequential steps" not in _text(r)


def test_a_measured_style_study_carries_no_recurrent_warning(tmp_path):
    # a runner's figures (here scripted, source 'fake') are not CARM predictions: nothing to caution
    from stubs import ScriptedRunner

    runner = ScriptedRunner({"float32": (0.02, 4.0, 0.0)})
    r = _recurrent_study(tmp_path, runner=runner)
    assert r.source == "fake" and r.recurrent and not any("recurrent" in w for w in r.warnings)


def test_a_real_lstm_model_is_named_with_its_steps(tmp_path):
    import keras

    inputs = keras.Input((7, 4))
    x = keras.layers.LSTM(6, name="enc")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, name="out")(x), name="tiny_rnn")
    r = tune(model, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "t.db"), backends=("jax",))
    assert r.recurrent == [{"layer": "enc", "steps": 7}]
    assert ("recurrent layers (enc: 7 steps): each step waits for the one before, and the predicted times "
            "(CARM bound and calibrated) ignore that dependence; the real time can be far longer") in r.warnings
