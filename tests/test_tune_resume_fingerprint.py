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

from stubs import ScriptedRunner, TablePredictor  # noqa: E402
from tiny_models import tiny_cnn  # noqa: E402

from carm_advisor.calibration import Calibration, WholeSample  # noqa: E402
from carm_advisor.errors import CarmError  # noqa: E402
from carm_advisor.profiles.profile import load_profile  # noqa: E402
from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402

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
    first = predicted(tmp_path, n_trials=1)
    again = predicted(tmp_path, n_trials=2)   # an equal calibration (another object, same content)
    assert len([t for t in again.trials if t.state in ("COMPLETE", "PRUNED")]) == 2
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


def test_a_predicted_study_made_by_another_cost_model_is_not_resumed(tmp_path):
    r = predicted(tmp_path)
    stored = r.study.user_attrs["fingerprint"]
    assert isinstance(stored["cost_model"], int)
    r.study.set_user_attr("fingerprint", {k: v for k, v in stored.items() if k != "cost_model"})   # an older one
    with pytest.raises(CarmError, match="different cost_model"):
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


# ---- the model's content, not its name --------------------------------------------------------------


def save_net(path, filters, built_before=0):
    """A small CNN file: Conv2D(filters, 3) on 32x32x3, pooling, Dense(10), saved to `path`. `built_before`
    layers built first shift Keras' generated names (conv2d_1, dense_1...) without changing the model."""
    import keras

    for _ in range(built_before):
        keras.layers.Conv2D(1, 1)
        keras.layers.Dense(1)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(filters, 3)(inputs))
    keras.Model(inputs, keras.layers.Dense(10)(x)).save(path)
    return str(path)


def predicted_file(tmp_path, model, n_trials=1):
    return tune(model, n_trials=n_trials, storage=str(tmp_path / "f.db"), study_name="f", space=SPACE, predict=True,
                progress=False, calibration=False)


def test_an_unchanged_model_file_resumes_wherever_it_lies_and_whatever_was_built_before(tmp_path):
    first = predicted_file(tmp_path, save_net(tmp_path / "net.keras", 8))
    # the same model, saved again after other layers were built (other generated names), in another folder
    (tmp_path / "other").mkdir()
    again = predicted_file(tmp_path, save_net(tmp_path / "other" / "net.keras", 8, built_before=3), n_trials=2)
    assert len([t for t in again.trials if t.state in ("COMPLETE", "PRUNED")]) == 2
    fp = again.study.user_attrs["fingerprint"]
    assert fp == first.study.user_attrs["fingerprint"] and fp["model_identity"].startswith("file sha256:")
    assert predicted_file(tmp_path, str(tmp_path / "net.keras"), n_trials=3).study.user_attrs["fingerprint"] == fp


def test_an_edited_model_file_of_the_same_name_is_refused(tmp_path):
    """net.keras with 8 filters, then rewritten with 16 under the same stem 'net': another model's values."""
    path = save_net(tmp_path / "net.keras", 8)
    predicted_file(tmp_path, path)
    save_net(tmp_path / "net.keras", 16)
    with pytest.raises(CarmError, match="different model_identity") as exc:
        predicted_file(tmp_path, path, n_trials=2)
    assert "\n" not in str(exc.value)


def test_a_builder_of_the_same_name_in_another_module_is_refused(tmp_path, monkeypatch):
    """pkg_a:build and pkg_b:build both have the name 'build'; pkg_b's convolution has 8 filters, not 4."""
    body = ("import keras\n\ndef build():\n    inputs = keras.Input((8, 8, 3))\n"
            "    x = keras.layers.Flatten()(keras.layers.Conv2D({}, 3)(inputs))\n"
            "    return keras.Model(inputs, keras.layers.Dense(5)(x))\n")
    (tmp_path / "pkg_a_fp.py").write_text(body.format(4))
    (tmp_path / "pkg_b_fp.py").write_text(body.format(8))
    monkeypatch.syspath_prepend(str(tmp_path))
    first = predicted_file(tmp_path, "pkg_a_fp:build")
    assert first.study.user_attrs["fingerprint"]["model_identity"].startswith("pkg_a_fp:build sha256:")
    predicted_file(tmp_path, "pkg_a_fp:build", n_trials=2)   # the same builder resumes
    with pytest.raises(CarmError, match="different model_identity"):
        predicted_file(tmp_path, "pkg_b_fp:build", n_trials=2)


def test_a_predicted_study_without_the_models_identity_is_refused(tmp_path):
    r = predicted_file(tmp_path, save_net(tmp_path / "net.keras", 8))
    old = {k: v for k, v in r.study.user_attrs["fingerprint"].items() if k != "model_identity"}
    r.study.set_user_attr("fingerprint", old)   # as an older carm_advisor stored it
    with pytest.raises(CarmError, match="no record of the model's content"):
        predicted_file(tmp_path, str(tmp_path / "net.keras"), n_trials=2)


# ---- a measured study: its GPU model ----------------------------------------------------------------


class MeasuredRunner(ScriptedRunner):
    source = "measured"


def measured_on(monkeypatch, tmp_path, gpu_name, n_trials=2):
    from carm_advisor.tune import parallel

    monkeypatch.setattr(parallel, "this_gpu", lambda source: {"index": 0, "uuid": "GPU-x", "name": gpu_name,
                                                              "host": "h", "visible": None})
    bounds = {"float32": (0.01, 2.0), "mixed_bfloat16": (0.005, 1.0)}
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.01, 2.0, 0.0)}
    return tune("vgg16", runner=MeasuredRunner(measured), predictor=TablePredictor(bounds), n_trials=n_trials,
                storage=str(tmp_path / "m.db"), study_name="m", space=SPACE, progress=False,
                baseline=TrialConfig("torch", "float32", 32, "channels_last", "eager"))


def test_a_measured_study_resumed_on_another_gpu_model_is_refused(tmp_path, monkeypatch):
    r = measured_on(monkeypatch, tmp_path, "NVIDIA H200")
    assert r.study.user_attrs["fingerprint"]["gpu"] == "NVIDIA H200"
    assert r.study.user_attrs["fingerprint"]["model_identity"] == "application vgg16"
    measured_on(monkeypatch, tmp_path, "NVIDIA H200", n_trials=3)   # the same GPU model resumes
    with pytest.raises(CarmError, match="different gpu") as exc:
        measured_on(monkeypatch, tmp_path, "NVIDIA H100 80GB HBM3", n_trials=4)
    assert "stored 'NVIDIA H200', now 'NVIDIA H100 80GB HBM3'" in str(exc.value)


def test_an_older_measured_study_without_its_gpu_or_model_identity_takes_them(tmp_path, monkeypatch):
    r = measured_on(monkeypatch, tmp_path, "NVIDIA H200")
    old = {k: v for k, v in r.study.user_attrs["fingerprint"].items() if k not in ("gpu", "model_identity")}
    r.study.set_user_attr("fingerprint", old)   # as an older carm_advisor stored it
    again = measured_on(monkeypatch, tmp_path, "NVIDIA H200", n_trials=3)
    assert len([t for t in again.trials if t.state in ("COMPLETE", "PRUNED")]) == 3
    fp = again.study.user_attrs["fingerprint"]
    assert fp["gpu"] == "NVIDIA H200" and fp["model_identity"] == "application vgg16"
    with pytest.raises(CarmError, match="different gpu"):   # stored now: another GPU model is refused
        measured_on(monkeypatch, tmp_path, "NVIDIA A100", n_trials=4)
