"""The VGG16 energy-efficiency study end to end: tune, print, save JSON and plots.

    python examples/vgg/tune_vgg16.py [--trials 30] [--out DIR] [--predict]

On a machine with an NVIDIA GPU every trial is measured (NVML energy windows of >= 2 s, in one child
process per Keras backend); elsewhere the study is PREDICTED from the embedded H200 profile and says so.
The model is given as a builder, so each trial rebuilds it under its own dtype policy and layout.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def vgg16(config=None):
    """Built under the trial's dtype policy and image data format (set by the tuner around this call)."""
    import keras

    return keras.applications.VGG16(weights=None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--out", default=".")
    parser.add_argument("--predict", action="store_true", help="predict only, even on a GPU")
    args = parser.parse_args(argv)

    from rich.console import Console

    import carm_advisor as advisor
    from carm_advisor.tune import TuneOptions

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # "module:function" travels to the worker processes; this file's directory must be importable there.
    here = str(Path(__file__).resolve().parent)
    sys.path.insert(0, here)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    options = TuneOptions(objective="gflops_per_watt", n_trials=args.trials, storage=str(out / "vgg16-study.db"),
                          study_name="vgg16-example", predict=True if args.predict else "auto",
                          progress=sys.stderr.isatty())
    result = advisor.tune("tune_vgg16:vgg16", options)
    Console().print(result)
    result.to_json(out / "vgg16-tune.json")
    result.plot(out)
    return result


if __name__ == "__main__":
    main()
