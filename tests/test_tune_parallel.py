"""Several workers, one study (tune/parallel.py): worker processes that do not import Keras, trials of
0.1-0.4 s, figures typed in tests/tune_support/multi_support.py. Every measurement a runner really makes is
appended to a log file, so 'measured twice' is counted outside the study's own bookkeeping."""

from __future__ import annotations

import collections
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


def _env(tmp_path, delay_s: float) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join((str(REPO_ROOT), str(SUPPORT))),
                MULTI_LOG=str(tmp_path / "measured.log"), MULTI_DELAY_S=str(delay_s))


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


def _pids_of_children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def test_a_worker_killed_mid_trial_leaves_a_failed_trial_and_the_study_is_finished(tmp_path):
    storage = str(tmp_path / "k.db")
    proc = _driver(storage, 16, "0,1", _env(tmp_path, 0.4))
    deadline = time.monotonic() + 60
    victim = None
    while time.monotonic() < deadline and victim is None:
        time.sleep(0.2)
        log = tmp_path / "measured.log"
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= 5:   # both GPU baselines and a few trials measured: a worker is mid-trial
            victim = _pids_of_children(proc.pid)[0]
    assert victim is not None and proc.poll() is None
    os.kill(victim, signal.SIGKILL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-2000:]
    assert "exited with code -9" in out and out.count("started on GPU") == 3   # the dead worker's GPU restarted
    trials = _trials(storage)
    assert sorted(t.number for t in trials) == list(range(16))
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 1 and failed[0].user_attrs["error"] == "its worker process died"
    assert all(t.state in FINISHED for t in trials)


def test_carm_advise_worker_joins_by_url_and_name_and_a_killed_one_fails_by_heartbeat(tmp_path):
    storage = str(tmp_path / "j.db")
    env = _env(tmp_path, 0.5)   # 40 trials on 2 workers: ~10 s, so the others outlive the 3 s grace period
    proc = _driver(storage, 40, "0,1", env)
    joiner = None
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            if joiner is None and (tmp_path / "measured.log").exists():   # the study exists: join it
                joiner = subprocess.Popen([sys.executable, "-m", "carm_advisor.cli", "worker", "--storage",
                                           f"sqlite:///{storage}", "--study", "s"], cwd=tmp_path,
                                          env=dict(env, CUDA_VISIBLE_DEVICES="7"), stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
            if joiner is not None:
                mine = [t for t in _trials(storage) if t.user_attrs.get("gpu", {}).get("visible") == "7"]
                states = {t.state for t in mine}
                if optuna.trial.TrialState.COMPLETE in states and optuna.trial.TrialState.RUNNING in states:
                    break
        assert joiner is not None and joiner.poll() is None, joiner.stderr.read() if joiner else "no joiner"
        joiner.send_signal(signal.SIGKILL)
        joiner.wait()
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-2000:]
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
