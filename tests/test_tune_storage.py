"""Study storage: the URL forms, and a study killed with SIGKILL resumes without losing or re-measuring
a finished trial (the study run as a subprocess, trials slowed to 0.4 s each)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from carm_advisor.tune.storage import default_storage_url, open_storage, storage_url

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).parent / "tune_support"


def test_storage_url_forms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert storage_url(None, "vgg16") == f"sqlite:///{tmp_path / 'carm-tune-vgg16.db'}" == default_storage_url("vgg16")
    assert storage_url("study.db", "m") == f"sqlite:///{tmp_path / 'study.db'}"
    assert storage_url("postgresql://u@host/db", "m") == "postgresql://u@host/db"
    assert storage_url("journal:j.log", "m") == f"journal:{tmp_path / 'j.log'}"
    assert storage_url("runs.log", "m") == f"journal:{tmp_path / 'runs.log'}"
    with pytest.raises(ValueError, match="Expected a storage URL"):
        storage_url("notes.txt", "m")
    with pytest.raises(ValueError, match="directory does not exist"):
        storage_url(str(tmp_path / "missing" / "s.db"), "m")


def test_journal_and_sqlite_storages_hold_a_study(tmp_path):
    for spec in (str(tmp_path / "a.db"), f"journal:{tmp_path / 'b.log'}"):
        store = open_storage(spec, "m")
        study = optuna.create_study(storage=store, study_name="s", load_if_exists=True)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        again = optuna.load_study(storage=open_storage(spec, "m"), study_name="s")
        assert len(again.trials) == 2


def test_a_malformed_database_url_is_one_clear_error():
    with pytest.raises(ValueError, match="could not open the storage|needs a database driver"):
        open_storage("nosuchdialect://x/y", "m")


def _cli(db: Path, trials: int) -> list[str]:
    # tune() as the CLI calls it, with a stub predictor and a 0.4 s fake measurement per trial: the CLI
    # itself would spend 15-30 s importing Keras on a loaded 2-core machine, twice.
    return [sys.executable, str(SUPPORT / "resume_driver.py"), str(db), str(trials)]


def _complete_count(db: Path) -> int:
    """Read-only peek (opening an Optuna storage here would race the study's own schema creation)."""
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0


def _finished(db: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="resume", storage=f"sqlite:///{db}")
    return [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]


def test_kill_9_then_the_same_command_loses_and_remeasures_nothing(tmp_path):
    db = tmp_path / "resume.db"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(_cli(db, 14), cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
        if _complete_count(db) >= 3:
            break
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {t.number: t for t in _finished(db)}
    time.sleep(3.5)   # the killed trial's heartbeat (1 s, grace 3 s) goes stale
    done = subprocess.run(_cli(db, 14), cwd=REPO_ROOT, env=env, capture_output=True, timeout=180)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    study = optuna.load_study(study_name="resume", storage=f"sqlite:///{db}")
    trials = study.get_trials()
    after = {t.number: t for t in trials if t.state == optuna.trial.TrialState.COMPLETE}
    for number, t in before.items():     # kept as they were: same values, same completion time
        assert after[number].values == t.values and after[number].datetime_complete == t.datetime_complete
    finished = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(finished) == 14
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    stale = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert all("error" not in t.user_attrs for t in stale)   # failed by the heartbeat, not by a measurement
    measured_keys = [t.user_attrs["config_key"] for t in after.values() if "repeat_of" not in t.user_attrs]
    assert len(measured_keys) == len(set(measured_keys))      # no configuration measured twice


def test_a_trial_whose_process_died_before_its_first_heartbeat_is_failed_on_resume(tmp_path):
    # Optuna's fail_stale_trials only sees trials with a heartbeat: a process SIGKILLed between creating a
    # trial and its first heartbeat left it RUNNING for good (seen in CI). The recorded process finds it.
    import socket

    from carm_advisor.tune.objective import fail_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study = optuna.create_study(study_name="s", storage=open_storage(str(tmp_path / "s.db"), "s", heartbeat_s=1.0))
    orphan, live, elsewhere, unmarked = study.ask(), study.ask(), study.ask(), study.ask()
    orphan.set_user_attr("process", {"host": socket.gethostname(), "pid": dead.pid})
    live.set_user_attr("process", {"host": socket.gethostname(), "pid": os.getpid()})
    elsewhere.set_user_attr("process", {"host": "another-machine", "pid": dead.pid})
    fail_stale(study)   # `unmarked` (killed before writing anything) is younger than the grace period: kept
    running, failed = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL
    states = {t.number: t.state for t in study.get_trials()}
    assert states == {orphan.number: failed, live.number: running, elsewhere.number: running, unmarked.number: running}
    time.sleep(3.2)      # past the grace period (3 x the 1 s heartbeat): no process recorded means it died first
    live.set_user_attr("process", {"host": socket.gethostname(), "pid": os.getpid()})
    fail_stale(study)
    states = {t.number: t.state for t in study.get_trials()}
    assert states[unmarked.number] == failed and states[live.number] == running and states[elsewhere.number] == running
