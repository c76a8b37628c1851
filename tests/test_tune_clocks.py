"""--apply-clocks: SM clocks locked per trial through the ClockController (fake NVML) and restored on
every way out: a normal trial, a trial whose worker dies, SIGTERM of the process; refused cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from carm_advisor.errors import NoPermissionError
from carm_advisor.power import ENV_NO_CLOCK_CONTROL, FakeGPU
from carm_advisor.trials.space import SearchSpace, TrialConfig
from carm_advisor.tune.clocks import clock_gpu, clock_lock, default_clocks
from carm_advisor.tune.study import tune

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))
from stubs import ScriptedRunner, TablePredictor  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clock_control_allowed(monkeypatch):
    monkeypatch.delenv(ENV_NO_CLOCK_CONTROL, raising=False)


class ClockRecordingRunner(ScriptedRunner):
    """Notes the locked SM clock while each trial runs; dies (TrialFailed) on mixed_float16."""

    def __init__(self, gpu, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gpu = gpu
        self.locked_during: list = []

    def run(self, config):
        self.locked_during.append((config.sm_clock_mhz, self.gpu.locked_sm_clocks_mhz))
        return super().run(config)


def test_each_trial_runs_at_its_locked_clock_and_the_gpu_is_restored_after_every_trial(tmp_path):
    gpu = FakeGPU()
    table = {"float32": (0.02, 4.0, 0.0), "mixed_float16": (0.01, 2.0, 0.0)}
    runner = ClockRecordingRunner(gpu, table, fail_precisions={"mixed_float16"})
    space = SearchSpace(backends=("torch",), precisions=tuple(table), batch_sizes=(32,), layouts=("channels_last",),
                        compilers={"torch": ("eager",)}, sm_clocks_mhz=(1980.0, 1410.0))
    result = tune("vgg16", n_trials=6, storage=str(tmp_path / "c.db"), space=space, runner=runner,
                  predictor=TablePredictor({k: v[:2] for k, v in table.items()}), baseline=TrialConfig("torch"),
                  apply_clocks=True, clock_gpu=gpu, carm_pruning=False, progress=False)
    locked = [(want, got) for want, got in runner.locked_during if want is not None]
    assert locked and all(got == (want, want) for want, got in locked)
    assert any(t.state == "FAIL" for t in result.trials)         # a dying trial ...
    assert gpu.locked_sm_clocks_mhz is None                      # ... left no lock behind
    resets = [c for c in gpu.calls if c[0] == "reset_sm_clocks"]
    assert len(resets) == len(locked) + 1                        # one per locked trial, one after the probe


def test_clock_lock_restores_when_the_trial_raises():
    gpu = FakeGPU()
    with pytest.raises(RuntimeError):
        with clock_lock(gpu, 1410.0):
            assert gpu.locked_sm_clocks_mhz == (1410.0, 1410.0)
            raise RuntimeError("worker died")
    assert gpu.locked_sm_clocks_mhz is None


def test_refused_without_permission_and_with_the_kill_switch(monkeypatch):
    with pytest.raises(NoPermissionError, match="needs root"):
        clock_gpu(True, FakeGPU(permission=False))
    monkeypatch.setenv(ENV_NO_CLOCK_CONTROL, "1")
    gpu = FakeGPU()
    with pytest.raises(NoPermissionError, match=ENV_NO_CLOCK_CONTROL):
        clock_gpu(True, gpu)
    assert gpu.attempts == []                                    # nothing was even tried


def test_default_clocks_are_supported_steps_from_the_top_down():
    # The fake's H200 steps run 345-1980 MHz: the top, then steps nearest 90/80/70/55% of it.
    clocks = default_clocks(FakeGPU())
    assert clocks[0] == 1980.0 and len(clocks) == 5
    assert all(c in FakeGPU().supported_sm_clocks_mhz() for c in clocks)


CHILD = r"""
import sys, time
from carm_advisor.power import FakeGPU
from carm_advisor.tune.clocks import clock_lock

class Logged(FakeGPU):
    def reset_sm_clocks(self):
        super().reset_sm_clocks()
        with open(sys.argv[1], "a") as f:
            f.write("reset\n")

with clock_lock(Logged(), 1410.0):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_sigterm_of_a_process_holding_a_trial_clock_lock_restores_the_clock(tmp_path):
    log = tmp_path / "restore.log"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    env.pop(ENV_NO_CLOCK_CONTROL, None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline().strip() == "locked"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert log.read_text() == "reset\n"
