"""Resuming a study checks what its stored values depend on (the fingerprint in its user attrs): a predicted
study made with another profile or calibration (or mode, objective, model) is refused in one line, never
silently reused; the same inputs resume it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import optuna
import pytest

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

from carm_advisor.calibration import Calibration, WholeSample  # noqa: E402
from carm_advisor.errors import CarmError  # noqa: E402
from carm_advisor.profiles.profile import load_profile  # noqa: E402
from carm_advisor.tune.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402
from stubs import ScriptedRunner, TablePredictor  # noqa: E402
from tiny_models import tiny_cnn  # noqa: E402

SPACE = SearchSpace(backends=("torch",), precisions=("float32", "mixed_bfloat16"), batch_sizes=(32,),
                    layouts=("channels_last",), compilers={"torch": ("eager",)})


def calibration(time_s=0.01):
    return Calibration([], [WholeSample("torch", "eager", time_s, 0.008, 0.001, 10, "tiny_cnn", batch_size=32)])


def predicted(tmp_path, n_trials=2, **kwargs):
    options = dict(n_trials=n_trials, storage=str(tmp_path / "p.db"), study_name="p", space=SPACE, predict=True,
                   progress=False, calibration=calibration())
    options.update(kwargs)
    return tune(tiny_cnn, **options)


def test_the_same_inputs_resume_and_keep_the_finished_trials(tmp_path):
    first = predicted(tmp_path)
    again = predicted(tmp_path, n_trials=3)   # an equal calibration (another object, same content)
    assert len([t for t in again.trials if t.state in ("COMPLETE", "PRUNED")]) == 3
    assert [t.number for t in first.trials] == [t.number for t in again.trials][:len(first.trials)]
    fp = again.study.user_attrs["fingerprint"]
    assert fp["source"] == "predicted" and fp["mode"] == "inference" and fp["objectives"] == ["gflops_per_watt"]
    assert fp["model"] == "tiny_cnn" and fp["profile"].startswith("NVIDIA H200 sha256:")
    assert fp["calibration"].startswith("sha256:")


def test_another_calibration_stops_the_resume_in_one_line(tmp_path):
    predicted(tmp_path)
    with pytest.raises(CarmError) as exc:
        predicted(tmp_path, calibration=calibration(time_s=0.02))   # one record's time differs
    text = str(exc.value)
    assert "\n" not in text
    assert f"study 'p' in sqlite:///{tmp_path / 'p.db'}" in text
    assert "different calibration" in text and "--study" in text and "--storage" in text
    assert "profile" not in text.split("(")[0]   # only what differs is named


def test_another_profile_stops_the_resume(tmp_path):
    predicted(tmp_path)
    base = load_profile()
    changed = dataclasses.replace(base, device={**base.device, "memory_bytes": base.device["memory_bytes"] // 2})
    with pytest.raises(CarmError, match="different profile"):
        predicted(tmp_path, profile=changed)


def test_another_objective_stops_the_resume(tmp_path):
    predicted(tmp_path)
    with pytest.raises(CarmError, match="different objectives"):
        predicted(tmp_path, objective="samples_per_joule")


def test_a_predicted_study_without_a_fingerprint_is_not_resumed(tmp_path):
    """A study made before fingerprints were stored (its attribute absent): what made its values is unknown."""
    r = predicted(tmp_path)
    r.study.set_user_attr("fingerprint", None)
    with pytest.raises(CarmError, match="older carm_advisor"):
        predicted(tmp_path)


def test_a_new_study_with_only_enqueued_trials_takes_the_fingerprint(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}", study_name="p", direction="maximize")
    study.enqueue_trial(TrialConfig("torch", "mixed_bfloat16", 32, "channels_last", "eager").params())
    r = predicted(tmp_path)
    assert r.study.user_attrs["fingerprint"]["source"] == "predicted"


def test_a_measured_study_resumed_in_another_mode_is_refused(tmp_path):
    """Measured values hold no profile or calibration (the fingerprint has none), but a study named by hand
    could still be resumed for another mode or objective: its measurements would be reused there."""
    bounds = {"float32": (0.01, 2.0), "mixed_bfloat16": (0.005, 1.0)}
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.01, 2.0, 0.0)}
    options = dict(n_trials=2, storage=str(tmp_path / "m.db"), study_name="m", space=SPACE,
                   baseline=TrialConfig("torch", "float32", 32, "channels_last", "eager"), progress=False)
    r = tune("vgg16", runner=ScriptedRunner(measured), predictor=TablePredictor(bounds), **options)
    assert "calibration" not in r.study.user_attrs["fingerprint"]
    tune("vgg16", runner=ScriptedRunner(measured), predictor=TablePredictor(bounds), **dict(options, n_trials=3))
    with pytest.raises(CarmError, match="different mode"):
        tune("vgg16", runner=ScriptedRunner(measured), predictor=TablePredictor(bounds), mode="training", **options)


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path, capsys):
    from carm_advisor.cli import main

    model = tmp_path / "tiny.keras"
    tiny_cnn().save(model)
    db = tmp_path / "c.db"
    argv = ["tune", str(model), "--objective", "throughput", "--predict", "--backends", "torch", "--batch-sizes", "32",
            "--trials", "1", "--storage", str(db), "--study", "c"]
    assert main(argv) == 0
    doc = load_profile().to_dict()
    doc["device"]["memory_bytes"] = 80 * 10**9
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(argv + ["--profile", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "study 'c'" in err and "different profile" in err and "--study" in err
