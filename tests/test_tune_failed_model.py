"""A tune whose model cannot load stops before any storage is created: no carm-tune-*.db (with a WAITING
baseline trial) is left behind."""

from __future__ import annotations

import pytest

from carm_advisor.errors import ModelLoadError
from carm_advisor.tune.study import tune


@pytest.mark.parametrize("model", ["nosuchmodel", "junk.keras", "missing.keras"])
def test_a_model_that_cannot_load_leaves_no_storage(tmp_path, monkeypatch, model):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.keras").write_text("not a zip archive")
    with pytest.raises(ModelLoadError):
        tune(model, n_trials=1, predict=True, progress=False)   # the default storage: carm-tune-<model>.db here
    with pytest.raises(ModelLoadError):
        tune(model, n_trials=1, predict=True, progress=False, storage=str(tmp_path / "given.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.keras"]


def test_the_cli_fails_in_one_line_and_leaves_no_storage(tmp_path, monkeypatch, capsys):
    from carm_advisor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["tune", "nosuchmodel", "--objective", "throughput", "--predict"]) == 2
    assert "neither a model file nor a keras.applications model" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_stub_predictor_still_gets_the_name_checked_first(tmp_path):
    """With a predictor given (no model to build), an unknown application name still fails before the storage."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "tune_support"))
    from stubs import ScriptedRunner, TablePredictor

    with pytest.raises(ModelLoadError):
        tune("nosuchmodel", n_trials=1, storage=str(tmp_path / "s.db"), progress=False,
             runner=ScriptedRunner({"float32": (0.01, 1.0, 0.0)}), predictor=TablePredictor({"float32": (0.01, 1.0)}))
    assert not (tmp_path / "s.db").exists()
