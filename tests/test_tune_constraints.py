"""The tuner's ranking of calibrated values: what counts as 'uncalibrated, not ranked'; the 'uncalibrated' constraint on
Optuna without trial.set_constraint (4.x: the sampler's constraints_func); the calibration a worker process
loads. Every expected figure is worked out in the comments."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

import carm_advisor.tune.objective as objective_mod
import carm_advisor.tune.study as study_mod
from carm_advisor.calibration import Calibration
from carm_advisor.trials.predicted import resolve_calibration
from carm_advisor.trials.space import TrialConfig
from carm_advisor.tune.study import tune

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))
from stubs import BackendTablePredictor, three_backend_space  # noqa: E402

BASE = TrialConfig("torch", "float32", 32, "channels_last", "eager")


class Table(BackendTablePredictor):
    """Bound and calibrated (time_s, energy_j) per backend at batch 32 (32e9 FLOPs).

    throughput = 32 / time_s; slowdown against the baseline (torch) = its time_s / torch's time_s."""

    def __init__(self, calibrated=True):
        super().__init__({"torch": (0.01, 1.0), "jax": (0.04, 1.0), "tensorflow": (0.005, 0.5)},
                         {"torch": (0.03, 3.0), "jax": (0.09, 2.0)}, calibrated)


def _space():
    return three_backend_space()


def _tune(tmp_path, predictor, n_trials=3, **kw):
    # a calibrated study enqueues the calibrated backends only: tensorflow comes from the sampler (seed 0)
    return tune("vgg16", n_trials=n_trials, storage=str(tmp_path / "s.db"), space=_space(), baseline=BASE, predict=True,
                predictor=predictor, progress=False, carm_pruning=False, **kw)


def _text(result) -> str:
    console = Console(record=True, width=400)
    console.print(result)
    return console.export_text()


def _by_backend(r):
    return {t.config.backend: t for t in r.trials if t.state == "COMPLETE" and t.repeat_of is None}


# ---- 1. 'uncalibrated_not_ranked' counts the 'uncalibrated' constraint, not every infeasible bound -----

def test_no_calibration_a_bound_rejected_by_max_slowdown_is_not_called_uncalibrated(tmp_path):
    # every value a bound; jax: 0.04 s vs torch 0.01 s -> slowdown 4 > 2: infeasible by --max-slowdown only
    r = _tune(tmp_path, Table(calibrated=False), max_slowdown=2.0)
    jax = _by_backend(r)["jax"]
    assert jax.value_source == "CARM bound" and not jax.feasible
    assert r.counts["infeasible"] == 1 and r.counts["uncalibrated_not_ranked"] == 0
    text = _text(r)
    assert "1 infeasible" in text and "only a CARM bound" not in text


def test_calibrated_study_counts_only_the_bound_valued_trials(tmp_path):
    # calibrated: torch 0.03 s (baseline), jax 0.09 s -> slowdown 3 > 2: infeasible, but calibrated;
    # tensorflow: a bound only (uncalibrated constraint 1) -> 2 infeasible, 1 of them uncalibrated
    r = _tune(tmp_path, Table(), n_trials=6, max_slowdown=2.0)
    b = _by_backend(r)
    assert b["jax"].value_source == "calibrated" and not b["jax"].feasible
    assert b["tensorflow"].value_source == "CARM bound" and not b["tensorflow"].feasible
    assert r.counts["infeasible"] == 2 and r.counts["uncalibrated_not_ranked"] == 1
    assert "(1 of them with only a CARM bound" in _text(r)


# ---- 2. Optuna 4.x (no trial.set_constraint): the sampler sees the 'uncalibrated' constraint -------------

@pytest.mark.filterwarnings("ignore:.constraints_func. has been deprecated:FutureWarning")
def test_without_set_constraint_the_sampler_gets_the_uncalibrated_constraint(tmp_path, monkeypatch):
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    monkeypatch.setattr(objective_mod, "HAS_SET_CONSTRAINT", False)
    # no --max-slowdown / --max-output-error: only the calibration makes the study constrained
    r = _tune(tmp_path, Table(), n_trials=6)
    seen = {t.user_attrs["config_key"].split("/")[0]: list(t.system_attrs.get(_CONSTRAINTS_KEY) or [])
            for t in r.study.get_trials() if t.state.name == "COMPLETE"}
    # [output error - limit, slowdown - limit, uncalibrated]: no limits -> 0, 0; tensorflow is a bound -> 1
    assert seen == {"torch": [0.0, 0.0, 0.0], "jax": [0.0, 0.0, 0.0], "tensorflow": [0.0, 0.0, 1.0]}
    # best: jax calibrated 32 GF / 2 J = 16 GF/W (torch 32/3 = 10.7), not tensorflow's bound 32/0.5 = 64
    assert r.best.config.backend == "jax" and r.counts["uncalibrated_not_ranked"] == 1


def test_constraints_func_defaults_as_many_zeros_as_the_study_has_constraints(monkeypatch):
    monkeypatch.setattr(objective_mod, "HAS_SET_CONSTRAINT", False)

    class Pruned:   # a trial that set no constraints of its own
        user_attrs: dict = {}

    assert objective_mod.constraints_func_for(False, False) is None
    assert objective_mod.constraints_func_for(False, True)(Pruned()) == [0.0, 0.0, 0.0]
    assert objective_mod.constraints_func_for(True, True)(Pruned()) == [0.0, 0.0, 0.0]
    assert objective_mod.constraints_func_for(True, False)(Pruned()) == [0.0, 0.0]
    monkeypatch.setattr(objective_mod, "HAS_SET_CONSTRAINT", True)
    assert objective_mod.constraints_func_for(True, True) is None   # Optuna 5: trial.set_constraint instead


# ---- 3. the calibration a worker loads is the study's own, not the shipped one ---------------------------

class BuiltHere(Table):
    """Stands in for ConfigPredictor (no Keras model built): resolves `calibration` as it does."""

    def __init__(self, spec, profile=None, model=None, calibration=None, policies_fixed=None, input_shapes=None):
        super().__init__(calibrated=False)
        self.calibration = resolve_calibration(calibration, None)


def _saved_calibration(tmp_path) -> str:
    return str(Calibration(provenance={"device": "h12 test GPU"}).save(tmp_path / "mine.json"))


def _worker_calibration(run):
    from carm_advisor.tune.parallel import runner_from_run

    predictor, _ = runner_from_run(dict(run, source="predicted"))
    return predictor.calibration


def test_a_calibration_path_reaches_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(study_mod, "ConfigPredictor", BuiltHere)
    path = _saved_calibration(tmp_path)
    r = _tune(tmp_path, None, calibration=path)
    run = r.study.user_attrs["run"]
    assert run["calibration"] == os.path.abspath(path)
    assert _worker_calibration(run).provenance == {"device": "h12 test GPU"}


def test_a_calibration_object_is_saved_for_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(study_mod, "ConfigPredictor", BuiltHere)
    r = _tune(tmp_path, None, calibration=Calibration(provenance={"device": "h12 object"}),
              log_dir=str(tmp_path / "logs"))
    ref = r.study.user_attrs["run"]["calibration"]
    assert isinstance(ref, str) and ref.startswith(str(tmp_path / "logs"))
    assert _worker_calibration(r.study.user_attrs["run"]).provenance == {"device": "h12 object"}


def test_no_calibration_stays_none_for_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(study_mod, "ConfigPredictor", BuiltHere)
    r = _tune(tmp_path, None, calibration=False)
    assert r.study.user_attrs["run"]["calibration"] is False


def test_a_calibration_that_cannot_be_saved_is_refused_on_several_gpus(tmp_path):
    p = Table(calibrated=False)
    p.calibration = object()   # no save(): a worker process could not load it
    with pytest.raises(ValueError, match="several GPUs: the workers cannot load this calibration"):
        # a fake runner factory: a predicted study names no GPUs (tune refuses them)
        _tune(tmp_path, p, gpus=(0, 1), runner_factory="multi_support:make")
