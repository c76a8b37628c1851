"""A study process for the kill -9 test: tune() with hand-built bounds and a runner that takes 0.4 s per
trial (no Keras import, so the process starts in a second or two)."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from stubs import ScriptedRunner, TablePredictor  # noqa: E402

from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.options import TuneOptions  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402


class SlowRunner(ScriptedRunner):
    def run(self, config):
        time.sleep(0.4)
        return super().run(config)


TABLE = {"float32": (0.02, 4.0, 0.0), "float32_tf32": (0.015, 3.0, 0.0), "mixed_float16": (0.012, 2.2, 0.0),
         "mixed_bfloat16": (0.01, 2.0, 0.0)}

if __name__ == "__main__":
    db, n_trials = sys.argv[1], int(sys.argv[2])
    space = SearchSpace(backends=("torch",), precisions=tuple(TABLE), batch_sizes=(32, 64, 128, 256),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    options = TuneOptions(objective="samples_per_joule", n_trials=n_trials, storage=db, study_name="resume",
                          space=space, baseline=TrialConfig("torch"), runner=SlowRunner(TABLE),
                          predictor=TablePredictor({k: v[:2] for k, v in TABLE.items()}), carm_pruning=False,
                          heartbeat_s=1, progress=False)
    result = tune("vgg16", options)
    print(result.counts)
