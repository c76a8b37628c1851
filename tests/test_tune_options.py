"""TuneOptions: one checked value for everything tune() takes besides the model; tune() takes it or its fields as
keywords; the CLI builds one; a study's worker processes read their part back from the study."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from carm_advisor.trials.runner import WorkerSettings
from carm_advisor.trials.space import SearchSpace, TrialConfig
from carm_advisor.tune.options import FIELD_NAMES, TuneOptions, run_attributes
from carm_advisor.tune.study import tune

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))
from stubs import ScriptedRunner, TablePredictor  # noqa: E402

TABLE = {"float32": (0.02, 4.0, 0.0), "mixed_float16": (0.012, 2.2, 0.0)}
SPACE = SearchSpace(backends=("torch",), precisions=tuple(TABLE), batch_sizes=(32, 64), layouts=("channels_last",),
                    compilers={"torch": ("eager",)})


def test_the_defaults_are_tunes_defaults():
    o = TuneOptions()
    assert (o.objective, o.n_trials, o.mode, o.predict, o.calibration) == ("gflops_per_watt", 30, "inference", "auto",
                                                                            "auto")
    assert (o.carm_pruning, o.carm_order, o.prune_margin, o.trial_timeout_s, o.seed) == (True, True, 0.10, 900.0, 0)
    assert len(FIELD_NAMES) == 37 and "model_or_builder" not in FIELD_NAMES


def test_a_reference_is_parsed_once_from_text_or_a_pair():
    assert TuneOptions(reference="hf-bert=25.7").reference == ("hf-bert", 25.7)
    assert TuneOptions(reference=("hf-bert", 25.7)).reference == ("hf-bert", 25.7)
    with pytest.raises(ValueError, match="NAME=VALUE"):
        TuneOptions(reference="hf-bert")


def test_sequences_become_tuples_and_the_value_is_frozen():
    o = TuneOptions(backends=["torch"], batch_sizes=[64, 32], objective=["latency", "throughput"], gpus=[0, 1])
    assert o.backends == ("torch",) and o.batch_sizes == (64, 32) and o.gpus == (0, 1)
    assert o.objective == ("latency", "throughput") and o.objectives == ("latency", "throughput")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.n_trials = 5


@pytest.mark.parametrize("field, value, message", [
    ("n_trials", 0, "Expected n_trials to be an integer >= 1, Received: n_trials=0"),
    ("n_trials", True, "Expected n_trials to be an integer >= 1, Received: n_trials=True"),
    ("objective", "joules", "Expected objective to be one or more names from gflops_per_watt"),
    ("objective", ("latency", "latency"), "Expected objective to be names that differ"),
    ("mode", "serving", "Expected mode to be one of inference, training, Received: mode='serving'"),
    ("timeout_s", 0, "Expected timeout_s to be a finite number > 0 or None, Received: timeout_s=0"),
    ("timeout_s", -5.0, "Received: timeout_s=-5.0"),
    ("budget_s", float("nan"), "Expected budget_s to be a finite number > 0 or None, Received: budget_s=nan"),
    ("max_slowdown", float("inf"), "Received: max_slowdown=inf"),
    ("backends", ("cuda",), "Expected backends to be names from torch, jax, tensorflow"),
    ("batch_sizes", (32, 0), "Expected batch_sizes to be integers >= 1, Received: batch_sizes=(32, 0)"),
    ("gpus", (1, 1), "Expected gpus to be distinct NVML indices >= 0"),
    ("predict", "yes", "Expected predict to be 'auto', True or False, Received: predict='yes'"),
    ("prune_margin", -0.1, "Expected prune_margin to be a fraction >= 0"),
    ("study_name", "a\nb", "Expected study_name to be text without control characters"),
    ("study_name", "", "Expected study_name to be text that is not empty"),
    ("runner_factory", "module", "Expected runner_factory to be 'package.module:function'"),
    ("heartbeat_s", 0, "Expected heartbeat_s to be a finite number > 0, Received: heartbeat_s=0"),
    ("space", "torch", "Expected space to be a SearchSpace or None"),
])
def test_bad_values_are_refused_when_made(field, value, message):
    with pytest.raises(ValueError) as exc:
        TuneOptions(**{field: value})
    assert message in str(exc.value)


def test_replace_derives_a_checked_copy_and_names_the_valid_fields():
    o = TuneOptions(n_trials=10)
    wider = o.replace(batch_sizes=(32, 64))
    assert wider.n_trials == 10 and wider.batch_sizes == (32, 64) and o.batch_sizes is None
    with pytest.raises(ValueError, match="n_trials"):
        o.replace(n_trials=-1)
    with pytest.raises(TypeError) as exc:
        o.replace(n_trial=3)
    assert "unknown tune option 'n_trial' (did you mean 'n_trials'?); valid options: objective, pareto" in \
        str(exc.value)


def _options(tmp_path, name):
    return TuneOptions(objective="samples_per_joule", n_trials=4, storage=str(tmp_path / f"{name}.db"), space=SPACE,
                       baseline=TrialConfig("torch"), predictor=TablePredictor({k: v[:2] for k, v in TABLE.items()}),
                       carm_pruning=False, progress=False)


def test_tune_takes_options_or_the_same_fields_as_keywords(tmp_path):
    given = tune("vgg16", _options(tmp_path, "a"), runner=ScriptedRunner(TABLE))
    options = _options(tmp_path, "b")
    keywords = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.name != "runner"}
    spelled = tune("vgg16", **keywords, runner=ScriptedRunner(TABLE))
    def seen(result):
        return [(t.state, t.config.key, t.values) for t in result.trials]

    assert seen(given) == seen(spelled) and len(seen(given)) == 4
    # ScriptedRunner: samples per joule = 32 / 4.0 J (float32) and 32 / 2.2 J (mixed_float16) at batch 32
    assert given.to_dict()["best"]["values"] == [pytest.approx(32 / 2.2)]


def test_an_unknown_keyword_or_a_positional_objective_is_a_type_error_before_any_work(tmp_path):
    with pytest.raises(TypeError, match="unknown tune option 'n_trial' .*valid options: objective"):
        tune("vgg16", n_trial=3, storage=str(tmp_path / "s.db"))
    with pytest.raises(TypeError, match="takes its options as a TuneOptions or as keywords, received: 'latency'"):
        tune("vgg16", "latency")
    assert list(tmp_path.iterdir()) == []


def test_a_workers_options_come_back_from_the_studys_run_attributes():
    o = TuneOptions(mode="training", carm_pruning=False, prune_margin=0.25, max_slowdown=2.0, max_output_error=0.01,
                    profile="/p/h100.json", seed=7, heartbeat_s=3.0, trial_timeout_s=60.0,
                    worker_settings=WorkerSettings(window_s=1.0), runner_factory="pkg.mod:make")
    run = run_attributes(o, model="vgg16", trial_target=12, calibration=True, fake_delay_s=None)
    assert run["worker_settings"]["mode"] == "training" and run["trial_target"] == 12 and run["model"] == "vgg16"
    back = TuneOptions.from_run(run)
    for name in ("mode", "carm_pruning", "prune_margin", "max_slowdown", "max_output_error", "profile", "seed",
                 "heartbeat_s", "trial_timeout_s", "runner_factory"):
        assert getattr(back, name) == getattr(o, name), name
    assert back.worker_settings == WorkerSettings(window_s=1.0, mode="training")


def test_the_cli_builds_the_options_its_flags_say(monkeypatch, tmp_path):
    import carm_advisor.tune.study as study_mod
    from carm_advisor.cli import main

    seen = []

    class Stop(Exception):
        pass

    def capture(model, options):
        seen.append((model, options))
        raise Stop

    monkeypatch.setattr(study_mod, "tune", capture)
    monkeypatch.setenv("CARM_ADVISOR_DEBUG", "1")   # the CLI lets our exception through
    with pytest.raises(Stop):
        main(["tune", "vgg16", "--objective", "latency", "--objective", "throughput", "--trials", "7", "--timeout",
              "30", "--storage", str(tmp_path / "s.db"), "--study", "mine", "--backends", "torch,jax",
              "--batch-sizes", "64,32", "--max-slowdown", "1.5", "--predict", "--no-calibration",
              "--no-carm-pruning"])
    model, o = seen[0]
    assert model == "vgg16" and isinstance(o, TuneOptions)
    assert (o.objective, o.n_trials, o.timeout_s, o.storage, o.study_name) == (
        ("latency", "throughput"), 7, 30.0, str(tmp_path / "s.db"), "mine")
    assert (o.backends, o.batch_sizes, o.max_slowdown, o.predict, o.calibration, o.carm_pruning) == (
        ("torch", "jax"), (64, 32), 1.5, True, False, False)
