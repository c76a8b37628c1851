"""carm-advise tune: search a model's configurations for energy efficiency (measured on a GPU, predicted
elsewhere); carm-advise worker: join a running study with this process's GPU."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from carm_advisor.cli.common import (
    SUBCOMMANDS,
    add_input_shape_flags,
    benchmark_names,
    import_keras_quietly,
    input_shapes_of,
    int_list,
    positive_float,
    positive_int,
)
from carm_advisor.files import OutputPathError, Outputs, check_writable_dir


def check_shorthand_model(model: str) -> None:
    """`carm-advise WORD`: say that WORD is neither a subcommand nor a model, before a study is stored."""
    from carm_advisor.errors import ModelLoadError
    from carm_advisor.models.loader import application_names, is_model_file, is_preset

    if is_model_file(model) or ":" in model:
        return
    if model.lower().replace("-", "").replace("_", "") not in application_names() and not is_preset(model):
        raise ModelLoadError(f"'{model}' is neither a subcommand ({', '.join(SUBCOMMANDS)}) nor a model file "
                             "nor a keras.applications model (vgg16, resnet50, ...) nor a keras_hub preset; see "
                             "carm-advise --help")


def backend_list(text: str) -> tuple[str, ...]:
    from carm_advisor.trials.space import BACKENDS

    names = benchmark_names(text)
    bad = [n for n in names if n not in BACKENDS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected backends from {','.join(BACKENDS)}, received: {text!r}")
    return names


def add_parser(sub) -> None:
    from carm_advisor.tune.objectives import OBJECTIVES

    t = sub.add_parser("tune", help="search precision, batch size, layout, compilation, backend (and clocks) "
                                    "for the best objective: measured on a GPU, predicted elsewhere")
    t.add_argument("model", help="a keras.applications name (vgg16, ...), a keras_hub preset (bert_base_en), a .keras "
                                 "file, or package.module:builder")
    add_input_shape_flags(t)
    t.add_argument("--objective", action="append", choices=tuple(OBJECTIVES),
                   help="what to optimise (default gflops_per_watt); twice: a multi-objective study")
    t.add_argument("--pareto", action="store_true", help="multi-objective: energy efficiency and throughput")
    t.add_argument("--trials", type=positive_int, default=30, help="trials in the study in all (default 30)")
    t.add_argument("--timeout", type=positive_float, help="stop starting trials after this many seconds")
    t.add_argument("--storage", help="Optuna storage: sqlite:///x.db, a .db file, postgresql://..., journal:PATH "
                                     "(default carm-tune-MODEL.db here); the same storage and study resume")
    t.add_argument("--study", type=study_name, help="study name (default: model, objectives, mode and source)")
    t.add_argument("--mode", choices=("inference", "training"), default="inference")
    t.add_argument("--max-slowdown", type=positive_float, help="infeasible if slower than the baseline by more than X times")
    t.add_argument("--max-output-error", type=positive_float,
                   help="infeasible if max |y - y_ref| / max |y_ref| against float32 (TF32 off) exceeds E")
    t.add_argument("--reference", metavar="NAME=VALUE", type=reference_figure,
                   help="a figure to hold the best against, in the first objective's unit (e.g. the same model run by "
                        "hand, measured: hf-bert-bf16=25.7); the result says how far the best is from it and where "
                        "its time goes on the CARM")
    t.add_argument("--backends", type=backend_list, help="Keras backends to search (default: those installed)")
    t.add_argument("--batch-sizes", type=int_list, help="batch sizes to search (default 32,64,128,256)")
    t.add_argument("--apply-clocks", action="store_true",
                   help="lock SM clocks per trial through NVML (needs root; restored on every exit)")
    t.add_argument("--predict", action="store_true", help="predict from the CARM only, even on a GPU")
    t.add_argument("--profile", help="GPU profile JSON for the CARM bounds (default: the recorded H200 / this GPU's)")
    t.add_argument("--json", dest="json_path", help="write the result as JSON here")
    t.add_argument("--plot", dest="plot_dir", help="write Optuna's history, importance (and Pareto) plots into this directory")
    t.add_argument("--no-carm-pruning", action="store_true", help="measure every configuration the sampler proposes")
    t.add_argument("--no-calibration", action="store_true",
                   help="predicted study: report CARM bounds (best cases) instead of calibrated predictions "
                        "(a separate study: the default one's name ends in -calibrated)")
    t.add_argument("--gpus", type=gpu_list, help="NVML indices of the GPUs to tune on at once, one worker process "
                                                  "each, e.g. 0,1,2,3 (default: the current GPU)")
    t.add_argument("--heartbeat-s", type=positive_float, default=None, help=argparse.SUPPRESS)
    t.add_argument("--fake-measure-s", type=float, default=None, help=argparse.SUPPRESS)  # tests: FakeRunner


def study_name(text: str) -> str:
    from carm_advisor.tune.options import check_study_name

    try:
        return check_study_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reference_figure(text: str) -> tuple[str, float]:
    from carm_advisor.tune.breakdown import parse_reference

    try:
        return parse_reference(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpu_list(text: str) -> tuple[int, ...]:
    from carm_advisor.tune.parallel import parse_gpus

    try:
        return parse_gpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_worker_parser(sub) -> None:
    w = sub.add_parser("worker", help="join a running tuning study (from this or another machine) and run its "
                                      "trials on this process's GPU (CUDA_VISIBLE_DEVICES picks it)")
    w.add_argument("--storage", required=True, help="the study's storage URL (postgresql://..., sqlite:///..., journal:PATH)")
    w.add_argument("--study", required=True, help="the study's name (printed by carm-advise tune)")
    w.add_argument("--share", type=int, default=None, help=argparse.SUPPRESS)   # the launcher's exact share
    w.add_argument("--worker-id", default=None, help=argparse.SUPPRESS)
    w.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)


def run_worker(args) -> int:
    from carm_advisor.tune.parallel import join_study
    from carm_advisor.tune.storage import StorageError, storage_url

    if not args.storage.strip():   # storage_url would name the default file here: a new, empty study
        raise StorageError("--storage: a worker joins an existing study; give that study's storage as its result "
                           "shows it (sqlite:///.../carm-tune-MODEL.db, journal:PATH, postgresql://...), not an "
                           "empty string")
    url = storage_url(args.storage, "study")
    done = join_study(url, args.study, share=args.share, worker_id=args.worker_id, seed=args.seed,
                      log=lambda line: print(line, flush=True))
    print(f"worker done: {done} trials of study {args.study!r} in {url}", flush=True)
    return 0


def run(args) -> int:
    from carm_advisor.tune.storage import storage_url

    outputs = Outputs()   # output paths and a bad storage are reported before Keras takes seconds to load
    outputs.plan(args.json_path, "JSON result", "--json")
    if args.plot_dir:
        check_writable_dir(args.plot_dir, "--plot")
    storage_url(args.storage, args.model)
    import_keras_quietly()
    if getattr(args, "shorthand", False):
        check_shorthand_model(args.model)
    from carm_advisor.report.console import make_console
    from carm_advisor.tune.study import tune

    console = make_console()
    result = tune(args.model, tune_options(args, console.is_terminal))
    console.print(result)
    json_written, plots = write_outputs(result, outputs, args.json_path, args.plot_dir)
    if json_written:
        console.print(f"result written to {args.json_path}")
    for path in plots:
        console.print(f"plot written to {path}")
    return 0


def tune_options(args, terminal: bool):
    """The TuneOptions the command line asks for."""
    from carm_advisor.tune.options import TuneOptions

    runner = None
    input_shapes = input_shapes_of(args.input_shape)
    if args.fake_measure_s is not None:
        from carm_advisor.models.builder import model_spec
        from carm_advisor.profiles.profile import load_profile
        from carm_advisor.trials.predicted import ConfigPredictor
        from carm_advisor.trials.runner import FakeRunner

        profile = load_profile(args.profile) if args.profile else None
        runner = FakeRunner(ConfigPredictor(model_spec(args.model, input_shapes=input_shapes), profile,
                                            input_shapes=input_shapes), delay_s=args.fake_measure_s)
    options = TuneOptions(
        objective=tuple(args.objective or ("gflops_per_watt",)), n_trials=args.trials, storage=args.storage,
        study_name=args.study, mode=args.mode, pareto=args.pareto, backends=args.backends,
        batch_sizes=args.batch_sizes, timeout_s=args.timeout, max_slowdown=args.max_slowdown,
        max_output_error=args.max_output_error, reference=args.reference,
        predict=True if args.predict else "auto", profile=args.profile,
        apply_clocks=args.apply_clocks, runner=runner, carm_pruning=not args.no_carm_pruning, progress=terminal,
        gpus=args.gpus, calibration=False if args.no_calibration else "auto",
        input_shapes=input_shapes,
        log=None if terminal or not args.gpus else (lambda line: print(line, flush=True)))
    return options if args.heartbeat_s is None else options.replace(heartbeat_s=args.heartbeat_s)


def write_outputs(result, outputs, json_path: str | None, plot_dir: str | None) -> tuple[bool, list]:
    """The JSON result and the plots, renamed into place together once every one is written (files.Outputs), as
    analyze's are: a full disk or Ctrl-C while drawing leaves every file that was there as it was. The plots are
    drawn into a hidden folder in `plot_dir` (the same file system) and staged from there."""
    plots = []
    with outputs:
        if json_path:
            outputs.stage(json_path, lambda tmp: tmp.write_text(result.to_json_text()))
        if plot_dir:
            with tempfile.TemporaryDirectory(prefix=".carm-advise-plots.", dir=plot_dir) as scratch:
                try:
                    drawn = result.plot(scratch)
                except OSError as exc:   # a full disk, a folder gone: the path given, not the scratch folder
                    raise OutputPathError(f"cannot write --plot {plot_dir}: {exc.strerror or exc}") from None
                for path in drawn:
                    target = outputs.plan(Path(plot_dir) / path.name, f"plot {path.name}", "--plot")
                    outputs.stage(target, lambda tmp, path=path: os.replace(path, tmp))
                    plots.append(target)
        outputs.commit()
    return bool(json_path), plots
