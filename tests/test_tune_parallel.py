"""Several workers, one study (tune/parallel.py): worker processes that do not import Keras, trials of
0.1-0.5 s, figures typed in tests/tune_support/multi_support.py. Every measurement a runner really makes is
appended to a log file, so 'measured twice' is counted outside the study's own bookkeeping.

Robust under CPU load (a shared 2-core machine): no test depends on how long a step takes. The workers'
heartbeat is 2 s (a trial is stale after 6 s without one: a busy SQLite file or a starved process must
not fail a live trial); a worker is killed while it is provably inside a trial (multi_support's
MULTI_HOLD), and the study a worker joins is held open until the test has what it needs (MULTI_GATE)."""

from __future__ import annotations

import collections
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from carm_advisor.cli import main
from carm_advisor.tune.parallel import parse_gpus, shares

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).parent / "tune_support"
BASELINE_KEY = "torch/float32/b32/channels_last/eager/auto"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)


def _env(tmp_path, delay_s: float, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join((str(REPO_ROOT), str(SUPPORT))),
                MULTI_LOG=str(tmp_path / "measured.log"), MULTI_DELAY_S=str(delay_s), **extra)


def _wait_for(predicate, timeout_s: float = 90.0, poll_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    return None


def _driver(storage: str, trials: int, gpus: str, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SUPPORT / "multi_driver.py"), storage, "s", str(trials), gpus],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _measured(tmp_path) -> list[tuple[str, str]]:
    """(CUDA_VISIBLE_DEVICES, config key) of every real measurement."""
    return [(line.split()[1], line.split()[2]) for line in (tmp_path / "measured.log").read_text().splitlines()]


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    from carm_advisor.tune.storage import open_storage

    return optuna.load_study(study_name="s", storage=open_storage(storage, "s")).get_trials()


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_four_workers_share_one_study_of_40_trials_none_lost_none_duplicated(tmp_path, kind):
    storage = str(tmp_path / "s.db") if kind == "sqlite" else f"journal:{tmp_path / 's.log'}"
    proc = _driver(storage, 40, "0,1,2,3", _env(tmp_path, 0.1))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-2000:]
    trials = _trials(storage)
    assert sorted(t.number for t in trials) == list(range(40)), out[-3000:]   # each number once, none lost
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {t.user_attrs["gpu"]["visible"] for t in trials} == {"0", "1", "2", "3"}   # all four worked
    measured = _measured(tmp_path)
    per_key = collections.Counter(key for _, key in measured)
    # Each configuration measured once; the baseline also once per GPU for its normalisation (not a trial).
    assert {k: n for k, n in per_key.items() if n > 1} == {BASELINE_KEY: 5}
    assert sorted(gpu for gpu, key in measured if key == BASELINE_KEY) == sorted(["0", "1", "2", "3", _first_gpu(trials)])
    # The study's trials that measured are exactly the log's measurements (minus the four GPU baselines).
    assert len([t for t in trials if "repeat_of" not in t.user_attrs]) == len(measured) - 4


def _first_gpu(trials) -> str:
    baseline = next(t for t in trials if t.user_attrs.get("role") == "baseline")
    return baseline.user_attrs["gpu"]["visible"]


def test_gains_are_over_each_gpus_own_baseline(tmp_path):
    storage = str(tmp_path / "g.db")
    proc = _driver(storage, 12, "0,1", _env(tmp_path, 0.05))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-2000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{storage}")
    assert sorted(k for k in study.user_attrs if k.startswith("gpu_baseline:")) == \
        sorted(f"gpu_baseline:{os.uname().nodename}/{g}" for g in ("0", "1"))
    # Baseline: float32 at batch 32 = 32 samples / 4.0 J = 8 samples/J (multi_support.TABLE).
    assert all(r["values"] == [8.0] for k, r in study.user_attrs.items() if k.startswith("gpu_baseline:"))
    bf16 = [t for t in study.trials if t.params.get("precision") == "mixed_bfloat16" and "repeat_of" not in t.user_attrs]
    for t in bf16:   # bfloat16 at any batch: 32 samples / 2.0 J = 16 samples/J, 2x the baseline
        assert t.user_attrs["gain_over_gpu_baseline"] == [pytest.approx(2.0)]


def _pid_in(path: Path) -> int | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.strip() else None


def test_a_worker_killed_mid_trial_leaves_a_failed_trial_and_the_study_is_finished(tmp_path):
    storage = str(tmp_path / "k.db")
    hold = tmp_path / "hold.pid"   # the worker that writes it is inside a trial's measurement, and stays there
    proc = _driver(storage, 16, "0,1", _env(tmp_path, 0.2, MULTI_HOLD=str(hold)))
    try:
        victim = _wait_for(lambda: _pid_in(hold))
        assert victim is not None and proc.poll() is None, proc.stdout.read() if proc.poll() is not None else "no hold"
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-2000:]
    assert "exited with code -9" in out and out.count("started on GPU") == 3   # the dead worker's GPU restarted
    trials = _trials(storage)
    assert sorted(t.number for t in trials) == list(range(16))
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 1 and failed[0].user_attrs["error"] == "its worker process died"
    assert all(t.state in FINISHED for t in trials)


def test_carm_advise_worker_joins_by_url_and_name_and_a_killed_one_fails_by_heartbeat(tmp_path):
    storage = str(tmp_path / "j.db")
    gate = tmp_path / "gate"
    # The launched workers (GPUs 0 and 1) wait in their first measurement (their GPU's baseline, before they
    # hold any trial: the joiner never waits for a configuration they hold) until the gate opens: the study
    # stays open however long the joining worker takes to start on a loaded machine.
    env = _env(tmp_path, 0.3, MULTI_GATE=str(gate), MULTI_GATE_GPUS="0,1", MULTI_GATE_AFTER="1")
    proc = _driver(storage, 40, "0,1", env)
    joiner = None
    try:
        assert _wait_for(lambda: (tmp_path / "measured.log").exists()), "the study did not start"
        joiner = subprocess.Popen([sys.executable, "-m", "carm_advisor.cli", "worker", "--storage",
                                   f"sqlite:///{storage}", "--study", "s"], cwd=tmp_path,
                                  env=dict(env, CUDA_VISIBLE_DEVICES="7"), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)

        def joiner_mid_trial() -> bool:   # one trial of the joiner done and the next one running
            states = {t.state for t in _trials(storage) if t.user_attrs.get("gpu", {}).get("visible") == "7"}
            return optuna.trial.TrialState.COMPLETE in states and optuna.trial.TrialState.RUNNING in states

        assert _wait_for(joiner_mid_trial), joiner.stderr.read() if joiner.poll() is not None else "joiner idle"
        assert joiner.poll() is None and proc.poll() is None
        joiner.send_signal(signal.SIGKILL)
        joiner.wait()
        gate.touch()
        out, _ = proc.communicate(timeout=180)
    finally:
        gate.touch()
        proc.kill()
        if joiner is not None:
            joiner.kill()
    assert proc.returncode == 0, out[-2000:]
    # The killed joiner's trial is failed by the heartbeat check (no "error": nobody saw it die), by the
    # workers while they run or at the study's end; if the study ended within the 6 s grace, the next
    # check (as when the study resumes) does it once the grace has passed.
    from carm_advisor.tune.storage import open_storage

    study = optuna.load_study(study_name="s", storage=open_storage(storage, "s", 2.0))
    if any(t.state == optuna.trial.TrialState.RUNNING for t in study.get_trials()):
        time.sleep(7)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    trials = _trials(storage)
    mine = [t for t in trials if t.user_attrs.get("gpu", {}).get("visible") == "7"]
    assert any(t.state == optuna.trial.TrialState.COMPLETE for t in mine)          # it ran trials of the study
    killed = [t for t in mine if t.state == optuna.trial.TrialState.FAIL]
    assert len(killed) == 1 and "error" not in killed[0].user_attrs                # failed by the heartbeat
    assert all(t.state in FINISHED for t in trials)
    # The joined worker's trials count towards the 40: the launched workers stopped at the target (the
    # joiner may have started one trial as they counted: at most one over).
    assert 40 <= len(trials) <= 41


def test_gpus_parsing():
    assert parse_gpus("0,1,2,3") == (0, 1, 2, 3) and parse_gpus("3") == (3,)
    for bad, match in (("0,x", "Expected GPU indices"), ("", "Expected GPU indices"), ("-1", ">= 0"),
                       ("1,1", "each GPU once")):
        with pytest.raises(ValueError, match=match):
            parse_gpus(bad)
    assert shares(40, 4) == [10, 10, 10, 10] and shares(10, 4) == [3, 3, 2, 2] and shares(1, 2) == [1, 0]


@pytest.mark.parametrize("gpus", ["0,x", "1,1", "-2"])
def test_bad_gpus_are_one_line_and_exit_2(capsys, gpus):
    with pytest.raises(SystemExit) as exc:
        main(["tune", "vgg16", "--objective", "throughput", "--gpus", gpus])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--gpus" in err and err.count("\n") == 1


def test_joining_a_study_that_is_not_there_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["worker", "--storage", str(tmp_path / "none.db"), "--study", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no study 'nope'" in err and err.count("\n") == 1


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the dev extra installs its CPU build)")
def test_benchmark_compares_the_same_study_on_one_and_on_two_gpus(tmp_path, monkeypatch):
    import importlib.util
    import json

    monkeypatch.syspath_prepend(str(SUPPORT))
    for key, value in _env(tmp_path, 0.2).items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("vgg16_tuning", REPO_ROOT / "benchmarks" / "vgg16_tuning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--model", "tiny_models:tiny_cnn", "--fake", "--backends", "torch", "--batch-sizes", "32,64",
                        "--precisions", "float32,mixed_bfloat16", "--trials", "8", "--gpus", "0,1", "--compare-1-vs-n",
                        "--runner-factory", "multi_support:make", "--storage", str(tmp_path / "c.db"),
                        "--out", str(tmp_path)]) == 0
    doc = json.loads(next(tmp_path.glob("*x2-vgg16-tuning-*.json")).read_text())
    assert doc["n_gpus"] == 2 and doc["trials"] == 8
    assert len(doc["runs"]["1gpu"]["trials"]) == 8 and len(doc["runs"]["2gpu"]["trials"]) == 8
    # multi_support.TABLE: bfloat16 costs half float32's joules per sample at every batch: both runs find it.
    assert doc["best_1gpu"]["config"]["precision"] == doc["best_2gpu"]["config"]["precision"] == "mixed_bfloat16"
    assert doc["same_best_within_spread"] and doc["speedup"] == doc["wall_s_1gpu"] / doc["wall_s_2gpu"]
    assert (tmp_path / "c-1gpu.db").exists() and (tmp_path / "c-2gpu.db").exists()
