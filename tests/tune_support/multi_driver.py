"""tune() on several (pretend) GPUs: argv = storage, study name, trials, gpus (0,1,2,3)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from multi_support import BASELINE, SPACE, predictor  # noqa: E402

from carm_advisor.tune.options import TuneOptions  # noqa: E402
from carm_advisor.tune.parallel import parse_gpus  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402

if __name__ == "__main__":
    storage, name, n_trials, gpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), parse_gpus(sys.argv[4])
    options = TuneOptions(objective="samples_per_joule", n_trials=n_trials, storage=storage, study_name=name,
                          space=SPACE, baseline=BASELINE, predictor=predictor(), runner_factory="multi_support:make",
                          carm_pruning=False, heartbeat_s=float(os.environ.get("MULTI_HEARTBEAT_S", "2")),
                          progress=False, gpus=gpus, log=print)
    result = tune("vgg16", options)
    print("counts", result.counts, flush=True)
