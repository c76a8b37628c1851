"""Worker processes for the multi-GPU tests: a runner factory (named in the study, so every worker process
builds the same runner) whose trials sleep, then return figures typed in TABLE, and log every real
measurement to a file (one line per call, appended) so a test can count measurements without trusting
the study's own bookkeeping. No Keras import: a worker starts in about a second."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from stubs import ScriptedRunner, TablePredictor  # noqa: E402

from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402

TABLE = {"float32": (0.02, 4.0, 0.0), "float32_tf32": (0.015, 3.0, 0.0), "mixed_float16": (0.012, 2.2, 0.0),
         "mixed_bfloat16": (0.01, 2.0, 0.0)}
SPACE = SearchSpace(backends=("torch",), precisions=tuple(TABLE), batch_sizes=(8, 16, 32, 64, 128, 256),
                    layouts=("channels_last", "channels_first"), compilers={"torch": ("eager",)})
BASELINE = TrialConfig("torch")


class LoggedRunner(ScriptedRunner):
    """Sleeps `delay_s` per measurement. Two hooks make the kill tests independent of timing (a loaded
    2-core machine stretches every step of a worker between its trials):

    MULTI_HOLD=path: the first process whose measurement is not its first (so a study trial, not its GPU's
    baseline) to create `path` writes its pid there and never returns (the test kills it mid-trial).
    MULTI_GATE=path, MULTI_GATE_GPUS=0,1, MULTI_GATE_AFTER=n: processes on those GPUs wait, before
    their n-th measurement and later ones, until `path` exists (the study stays unfinished while a test
    joins a worker to it; n=1 waits in the GPU's baseline, before the worker holds any trial)."""

    def __init__(self, delay_s: float, log_path: str | None) -> None:
        super().__init__(TABLE)
        self.delay_s = delay_s
        self.log_path = log_path
        self.n = 0

    def run(self, config):
        self.n += 1
        if self.log_path:
            with open(self.log_path, "a") as f:   # O_APPEND: whole lines from several processes
                f.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')} {config.key}\n")
        self._gate()
        self._hold()
        time.sleep(self.delay_s)
        return super().run(config)

    def _gate(self) -> None:
        gate = os.environ.get("MULTI_GATE")
        gpus = os.environ.get("MULTI_GATE_GPUS", "").split(",")
        if not gate or os.environ.get("CUDA_VISIBLE_DEVICES") not in gpus or self.n < int(os.environ.get("MULTI_GATE_AFTER", "1")):
            return
        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _hold(self) -> None:
        hold = os.environ.get("MULTI_HOLD")
        if not hold or self.n < 2:
            return
        try:
            fd = os.open(hold, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(600)   # killed by the test long before


def predictor() -> TablePredictor:
    return TablePredictor({k: v[:2] for k, v in TABLE.items()})


def make(run):
    return predictor(), LoggedRunner(float(os.environ.get("MULTI_DELAY_S", "0.1")), os.environ.get("MULTI_LOG"))


make.source = "fake"
