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

from carm_advisor.tune.space import SearchSpace, TrialConfig  # noqa: E402

TABLE = {"float32": (0.02, 4.0, 0.0), "float32_tf32": (0.015, 3.0, 0.0), "mixed_float16": (0.012, 2.2, 0.0),
         "mixed_bfloat16": (0.01, 2.0, 0.0)}
SPACE = SearchSpace(backends=("torch",), precisions=tuple(TABLE), batch_sizes=(8, 16, 32, 64, 128, 256),
                    layouts=("channels_last", "channels_first"), compilers={"torch": ("eager",)})
BASELINE = TrialConfig("torch")


class LoggedRunner(ScriptedRunner):
    def __init__(self, delay_s: float, log_path: str | None) -> None:
        super().__init__(TABLE)
        self.delay_s = delay_s
        self.log_path = log_path

    def run(self, config):
        if self.log_path:
            with open(self.log_path, "a") as f:   # O_APPEND: whole lines from several processes
                f.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')} {config.key}\n")
        time.sleep(self.delay_s)
        return super().run(config)


def predictor() -> TablePredictor:
    return TablePredictor({k: v[:2] for k, v in TABLE.items()})


def make(run):
    return predictor(), LoggedRunner(float(os.environ.get("MULTI_DELAY_S", "0.1")), os.environ.get("MULTI_LOG"))


make.source = "fake"
