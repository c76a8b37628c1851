"""carm-advise: the command line. Bad input -> one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
import time

EXIT_USAGE = 2
EXIT_INTERNAL = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message over several lines; we print one
        sys.stderr.write(f"carm-advise: error: {message} (see carm-advise {self.prog.split()[-1] if ' ' in self.prog else ''} --help)\n".replace("  ", " "))
        sys.exit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received: {text!r}")
    return value


def benchmark_names(text: str) -> tuple[str, ...]:
    """`a, b,c` -> ('a', 'b', 'c'): the argparse type of --exclude (here and in benchmarks/)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an input shape like 224,224,3, received: {text!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected positive dimensions like 224,224,3, received: {text!r}")
    return dims


def _call_shape(text: str) -> tuple[str | None, tuple[int, ...], str | None]:
    """`--call-shape [NAME=]D,D[:DTYPE]` -> (name or None, dims without the batch, dtype or None)."""
    name, eq, rest = text.partition("=")
    if not eq:
        name, rest = None, text
    elif not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=DIMS with NAME an argument of call(), received: {text!r}")
    dims_text, colon, dtype = rest.partition(":")
    try:   # no dimensions: one value per sample, shape (batch,) (a diffusion model's timestep)
        dims = tuple(int(t) for t in dims_text.split(",")) if dims_text.strip() else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape without the batch like 77 or 64,64,3 (then :int32 for "
                                         f"integer ids), received: {text!r}") from None
    if any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected positive dimensions, received: {text!r}")
    if colon and not dtype.strip().isalnum():
        raise argparse.ArgumentTypeError(f"expected a dtype after ':' (int32, float32, ...), received: {text!r}")
    return (name.strip() if name else None), dims, (dtype.strip() if colon else None)


def call_input_shapes(given: list[tuple[str | None, tuple[int, ...], str | None]] | None):
    """The --call-shape flags as analyze()'s input_shapes: a list in order, or {name: shape} when named (all or
    none); a dtype makes a keras.Input of it (integer ids stay integers). None where none were given."""
    from carm_advisor.errors import MappingError

    if not given:
        return None
    named = [n is not None for n, _, _ in given]
    if any(named) and not all(named):
        raise MappingError("--call-shape: name every argument (NAME=DIMS) or none of them, not some")

    def shape(dims, dtype):
        if dtype is None:
            return (None, *dims)
        import keras

        try:
            return keras.Input(dims, dtype=keras.backend.standardize_dtype(dtype))
        except ValueError:
            raise MappingError(f"--call-shape: expected a dtype after ':' (int32, float32, ...), received: "
                               f"{dtype!r}") from None

    if all(named):
        names = [n for n, _, _ in given]
        if len(set(names)) < len(names):
            raise MappingError(f"--call-shape: an argument given twice: {', '.join(names)}")
        return {n: shape(d, t) for n, d, t in given}
    return [shape(d, t) for _, d, t in given]


def build_parser() -> argparse.ArgumentParser:
    from carm_advisor.models.loader import KERAS_POLICIES

    parser = _Parser(prog="carm-advise", description="Cache-Aware Roofline advice for Keras models on NVIDIA Tensor Cores.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    a = sub.add_parser("analyze", help="map a model's layers onto the CARM and recommend changes")
    a.add_argument("model", help="a keras.applications name in lower case (vgg16, resnet50, mobilenetv2, ...), a "
                                 ".keras file, or package.module:builder (a function that returns a built model)")
    a.add_argument("--batch-size", type=_positive_int, default=1, help="samples per call (default 1)")
    a.add_argument("--precision", choices=KERAS_POLICIES, help="Keras dtype policy to build/analyse the model with")
    a.add_argument("--layout", choices=("channels_last", "channels_first"),
                   help="image data format to build an application model with (default: Keras' setting)")
    a.add_argument("--input-shape", type=_shape, help="input shape of an application model, e.g. 160,160,3")
    a.add_argument("--call-shape", type=_call_shape, action="append", metavar="[NAME=]DIMS[:DTYPE]",
                   help="a subclassed model whose call() takes several tensors: one flag per tensor argument, in "
                        "order or by name, its shape without the batch (:int32 for integer ids; no DIMS for one "
                        "value per sample), e.g. --call-shape image=224,224,3 --call-shape tokens=77:int32")
    a.add_argument("--profile", help="GPU profile JSON (default: this GPU's measured profile, else the recorded H200)")
    a.add_argument("--json", dest="json_path", help="write the report as JSON here")
    a.add_argument("--plot", dest="plot_path", help="write the CARM chart (PNG/SVG/PDF) here")
    a.add_argument("--plot-energy", dest="plot_energy_path",
                   help="write the energy-efficiency CARM (GFLOP/s per W against AI) with the layer dots here")
    a.add_argument("--from-measurements", help="replay per-layer measurements recorded on a GPU (JSON)")
    a.add_argument("--no-measure", action="store_true", help="predict only, even on a GPU")
    a.add_argument("--training-step", action="store_true", help="on a GPU, also measure a whole training step")
    a.add_argument("--counters", action="store_true", help="also read hardware counters with Nsight Compute (ncu)")
    a.add_argument("--top", type=_positive_int, help="show only the N layers with the largest share of time")
    a.add_argument("--strict", action="store_true", help="fail on layers without a cost model")
    a.add_argument("--verify", action="store_true",
                   help="apply each recommended configuration change in a child process and measure it")
    a.add_argument("--measure-method", choices=("profiled", "layers"), default="profiled",
                   help="torch on a GPU: one profiled pass (default) or each layer timed alone")
    a.add_argument("--no-calibration", action="store_true", help="predict with the CARM bound alone")

    c = sub.add_parser("ceilings", help="measure (or show) the GPU's CARM roofs")
    c.add_argument("--json", dest="json_path", help="write the measured profile here")
    c.add_argument("--plot", dest="plot_path", help="write the CARM roofs chart here")
    c.add_argument("--quick", action="store_true", help="shorter windows and fewer repeats (<= 15 s)")
    c.add_argument("--device", type=int, default=0, help="GPU index (default 0)")
    c.add_argument("--verify-counters", action="store_true",
                   help="with Nsight Compute installed, check that counters see each benchmark's FLOPs and bytes")
    c.add_argument("--all", dest="everything", action="store_true",
                   help="also run benchmarks that set no roof here (mma.sync on Hopper)")
    c.add_argument("--exclude", type=benchmark_names, default=(), metavar="NAME[,NAME]",
                   help="benchmarks not to run (names as in kernels/README.md), e.g. one that fails on this GPU")
    c.add_argument("--binding", choices=("ctypes", "tensorflow"),
                   help="how to call the kernels' C ABI (default: tensorflow when Keras runs on it, else ctypes)")
    c.add_argument("--show", action="store_true", help="show the profile that analyze would use, measure nothing")
    c.add_argument("--profile", help="with --show: a profile JSON to show")

    _add_tune_parser(sub)
    _add_worker_parser(sub)

    b = sub.add_parser("build-kernels", help="compile the CUDA micro-benchmarks (and the TensorFlow op)")
    b.add_argument("--arch", help="e.g. sm_90a; default: the visible GPU's, else sm_90a and sm_80")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up chatter is not our output
    parser = build_parser()
    given = sys.argv[1:] if argv is None else list(argv)
    expanded = tune_shorthand(given)
    args = parser.parse_args(expanded)
    args.shorthand = expanded != given   # `carm-advise MODEL ...` for `carm-advise tune MODEL ...`
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from carm_advisor.errors import CarmError

    try:
        return {"analyze": _analyze, "ceilings": _ceilings, "build-kernels": _build, "tune": _tune,
                "worker": _worker}[args.command](args)
    except CarmError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except (ValueError, OSError) as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130
    except Exception as exc:  # a bug of ours: still one line, with a way to see the traceback
        if os.environ.get("CARM_ADVISOR_DEBUG"):
            raise
        _fail(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(set CARM_ADVISOR_DEBUG=1 for the traceback)")
        return EXIT_INTERNAL


def _fail(message: str) -> None:
    sys.stderr.write("carm-advise: error: " + " ".join(message.split()) + "\n")


def _import_keras(lean: bool = False) -> None:
    from carm_advisor.models.keras_import import import_keras

    import_keras(lean=lean)   # loads the backend once, quietly; a missing backend is a one-line error


def _analyze(args) -> int:
    started_s = time.perf_counter()
    from carm_advisor.files import Outputs

    outputs = Outputs()   # paths checked first, not after Keras' import and the whole analysis
    outputs.plan(args.json_path, "JSON report", "--json")
    outputs.plan(args.plot_path, "CARM chart", "--plot")
    outputs.plan(args.plot_energy_path, "energy-efficiency chart", "--plot-energy")
    for out in (args.plot_path, args.plot_energy_path):
        if out:
            from carm_advisor.report.plot import check_plot_format

            check_plot_format(out)
    _import_keras(lean=True)   # without the optional packages Keras imports and the analysis never uses
    timings_s = {"keras_import": time.perf_counter() - started_s}
    from carm_advisor.advise.analyze import analyze
    from carm_advisor.models.loader import file_at_precision, is_model_file, load_model
    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.report.console import make_console

    from carm_advisor.errors import ModelLoadError
    from carm_advisor.models.builder import build, model_spec

    profile = load_profile(args.profile) if args.profile else None
    input_shapes = call_input_shapes(args.call_shape)
    console = make_console()
    is_file = is_model_file(args.model)
    spec = model_spec(args.model)
    if spec.kind == "builder" and args.input_shape is not None:
        raise ModelLoadError(f"--input-shape applies to keras.applications models; the builder {args.model} "
                             "builds its own inputs")
    if args.layout and not is_file:   # a file's layout is its own: load_model refuses --layout for it
        import keras

        keras.config.set_image_data_format(args.layout)
    phase_s = time.perf_counter()
    with console.status(f"loading {args.model}"):
        if spec.kind == "builder":   # built under the precision's policy and the layout asked for, as tune does
            model, name = build(spec, args.precision, args.layout, seed=0), spec.name
        else:
            model, name = load_model(args.model, precision=args.precision, input_shape=args.input_shape,
                                     layout=args.layout if is_file else None)
        # An application is built under the policy; a file is rebuilt at it, its layers pinned to another policy
        # keeping theirs; one whose policies cannot be replaced is analysed at it (analyze's precision, which also
        # leaves pinned layers at theirs).
        precision = None
        if is_file:
            model, precision = file_at_precision(model, args.precision)
    timings_s["model_build"] = time.perf_counter() - phase_s
    phase_s = time.perf_counter()
    report = analyze(
        model,
        batch_size=args.batch_size,
        profile=profile,
        precision=precision,
        measure=False if args.no_measure else "auto",
        from_measurements=args.from_measurements,
        counters=args.counters,
        strict=args.strict,
        measure_options={"training_step": args.training_step, "method": args.measure_method},
        name=name,
        calibration=not args.no_calibration,
        verify=args.verify,
        input_shapes=input_shapes,
    )
    timings_s["analysis"] = time.perf_counter() - phase_s
    report.timings_s = timings_s
    if precision is not None:
        report.warnings.append(f"--precision {precision}: {name}'s dtype policies cannot be replaced by a rebuild, "
                               f"so its weights stay as saved; the layers under its own policy are analysed at "
                               f"{precision}'s compute dtype")
    from carm_advisor.report.render import print_report

    if report.measurement is None:   # these flags only change a measurement, and nothing was measured
        why = "--no-measure was given" if args.no_measure else "no NVIDIA GPU is usable here"
        for flag, used in (("--counters", args.counters), ("--training-step", args.training_step),
                           ("--measure-method layers", args.measure_method == "layers")):
            if used:
                report.warnings.append(f"{flag} ignored: {why}, so every figure is a prediction")
    print_report(report, console, top=args.top)
    with outputs:   # every file is renamed into place only once all of them were written
        if args.json_path:
            outputs.stage(args.json_path, lambda tmp: tmp.write_text(report.to_json_text()))
        if args.plot_path:
            from carm_advisor.report.plot import plot_report

            outputs.stage(args.plot_path, lambda tmp: plot_report(report, tmp))
        if args.plot_energy_path:
            from carm_advisor.report.plot_energy import plot_energy

            outputs.stage(args.plot_energy_path, lambda tmp: plot_energy(report, tmp))
        outputs.commit()
    if args.json_path:
        console.print(f"report written to {args.json_path}")
    if args.plot_path:
        console.print(f"CARM chart written to {args.plot_path}")
    if args.plot_energy_path:
        console.print(f"energy-efficiency CARM chart written to {args.plot_energy_path}")
    console.print("took " + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in timings_s.items())
                  + f"; {time.perf_counter() - started_s:.1f} s since start-up of the CLI", style="dim")
    return 0


def _ceilings(args) -> int:
    """carm-advise ceilings: measure (or --show) the roofs, print a table, optionally save JSON and a chart."""
    from carm_advisor.files import Outputs

    outputs = Outputs()   # before the minutes of measuring
    outputs.plan(args.json_path, "profile", "--json")
    outputs.plan(args.plot_path, "CARM roofs chart", "--plot")
    if args.plot_path:
        from carm_advisor.report.plot import check_plot_format

        check_plot_format(args.plot_path)
    if args.show and args.exclude:
        _check_recorded_benchmarks(args.exclude, args.profile)
    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.report.console import make_console
    from carm_advisor.report.render import ceilings_table

    console = make_console()
    if args.show:
        profile = load_profile(args.profile) if args.profile else _profile_for_show()
    else:
        from carm_advisor.measure.profile import measure_ceilings

        profile = measure_ceilings(device=args.device, quick=args.quick, everything=args.everything,
                                   verify_counters=args.verify_counters, exclude=args.exclude, binding=args.binding,
                                   command=" ".join(["carm-advise"] + sys.argv[1:]))
    console.print(ceilings_table(profile))
    for flag in profile.provenance.get("flags") or []:
        console.print(f"[bold red]flag:[/] {flag}")
    with outputs:   # both files renamed into place once both were written
        if args.json_path:
            outputs.stage(args.json_path, profile.save)
        if args.plot_path:
            from carm_advisor.report.plot import plot_profile

            outputs.stage(args.plot_path, lambda tmp: plot_profile(profile, tmp))
        outputs.commit()
    if args.json_path:
        console.print(f"profile written to {args.json_path}")
    if args.plot_path:
        console.print(f"CARM roofs chart written to {args.plot_path}")
    return 0


def _profile_for_show():
    """This GPU's cached measured profile, else the recorded one."""
    from carm_advisor.errors import PowerError
    from carm_advisor.power.nvml import open_gpu
    from carm_advisor.measure.profile import measured_profile_for
    from carm_advisor.profiles.profile import load_profile

    try:
        gpu = open_gpu(0)
        cached = measured_profile_for({"uuid": gpu.uuid(), "driver": gpu.driver_version()})
    except PowerError:   # no NVML or no GPU here: show the recorded profile
        cached = None
    return cached if cached is not None else load_profile()


def _check_recorded_benchmarks(names: tuple[str, ...], profile_path: str | None) -> None:
    """--exclude with --show: the benchmark table is read from the built CUDA library, which --show
    neither needs nor builds, so names are checked against those the profile recorded."""
    from carm_advisor.errors import CarmError
    from carm_advisor.profiles.profile import load_profile

    profile = load_profile(profile_path)
    recorded = {b.get("name") for b in profile.extra.get("benchmarks") or [] if isinstance(b, dict)}
    unknown = sorted(set(names) - recorded)
    if unknown:
        raise CarmError(f"--exclude: unknown benchmark(s) {', '.join(unknown)}; expected names the profile of "
                        f"{profile.name} recorded (see kernels/README.md), e.g. {', '.join(sorted(recorded)[:4])}")


def _build(args) -> int:
    from carm_advisor.measure.build import build_kernels, detect_arch

    started = time.perf_counter()
    # The visible GPU's arch, as its help says and as `ceilings` builds: one cached build serves both.
    r = build_kernels(arch=args.arch or detect_arch(), force=args.force)
    elapsed_s = time.perf_counter() - started
    what = "reused the cached build (sources unchanged)" if r.cached else f"compiled with {r.nvcc}"
    tf_op = str(r.tf_op_path) if r.tf_op_path else "not built (TensorFlow is not installed here)"
    from carm_advisor.report.console import make_console

    make_console(highlight=False).print(
        f"CUDA micro-benchmarks for {', '.join(r.archs)}: {what} in {elapsed_s:.1f} s\n"
        f"  library:       {r.lib_path}\n  TensorFlow op: {tf_op}\n  build log:     {r.log_path}", soft_wrap=True)
    return 0


# ---- tune ---------------------------------------------------------------------------------------

_SUBCOMMANDS = ("analyze", "ceilings", "build-kernels", "tune", "worker")


def tune_shorthand(argv: list[str]) -> list[str]:
    """`carm-advise MODEL [tune options]` means `carm-advise tune MODEL [tune options]`.

    Whenever the first argument is neither a subcommand nor an option (`carm-advise`, `--help` and the
    subcommands stay as they are); a near miss of a subcommand (`analyse`) stays too, for argparse to
    name the choices."""
    import difflib

    if not argv or argv[0] in _SUBCOMMANDS or argv[0].startswith("-"):
        return argv
    first = argv[0]
    if (not os.path.exists(first) and not any(c in first for c in "./:")
            and difflib.get_close_matches(first.lower(), _SUBCOMMANDS, n=1, cutoff=0.75)):
        return argv
    return ["tune", *argv]


def _check_shorthand_model(model: str) -> None:
    """`carm-advise WORD`: say that WORD is neither a subcommand nor a model, before a study is stored."""
    from carm_advisor.errors import ModelLoadError
    from carm_advisor.models.loader import application_names, is_model_file

    if is_model_file(model) or ":" in model:
        return
    if model.lower().replace("-", "").replace("_", "") not in application_names():
        raise ModelLoadError(f"'{model}' is neither a subcommand ({', '.join(_SUBCOMMANDS)}) nor a model file "
                             "nor a keras.applications model (vgg16, resnet50, ...); see carm-advise --help")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, received: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, received: {text!r}")
    return value


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 32,64,128, received: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers like 32,64,128, received: {text!r}")
    return values


def _backend_list(text: str) -> tuple[str, ...]:
    from carm_advisor.trials.space import BACKENDS

    names = benchmark_names(text)
    bad = [n for n in names if n not in BACKENDS]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected backends from {','.join(BACKENDS)}, received: {text!r}")
    return names


def _add_tune_parser(sub) -> None:
    from carm_advisor.tune.objectives import OBJECTIVES

    t = sub.add_parser("tune", help="search precision, batch size, layout, compilation, backend (and clocks) "
                                    "for the best objective: measured on a GPU, predicted elsewhere")
    t.add_argument("model", help="a keras.applications name (vgg16, ...), a .keras file, or package.module:builder")
    t.add_argument("--call-shape", type=_call_shape, action="append", metavar="[NAME=]DIMS[:DTYPE]",
                   help="with --predict, a subclassed model whose call() takes several tensors: one flag per "
                        "tensor argument (as for analyze)")
    t.add_argument("--objective", action="append", choices=tuple(OBJECTIVES),
                   help="what to optimise (default gflops_per_watt); twice: a multi-objective study")
    t.add_argument("--pareto", action="store_true", help="multi-objective: energy efficiency and throughput")
    t.add_argument("--trials", type=_positive_int, default=30, help="trials in the study in all (default 30)")
    t.add_argument("--timeout", type=_positive_float, help="stop starting trials after this many seconds")
    t.add_argument("--storage", help="Optuna storage: sqlite:///x.db, a .db file, postgresql://..., journal:PATH "
                                     "(default carm-tune-MODEL.db here); the same storage and study resume")
    t.add_argument("--study", help="study name (default: model, objectives, mode and source)")
    t.add_argument("--mode", choices=("inference", "training"), default="inference")
    t.add_argument("--max-slowdown", type=_positive_float, help="infeasible if slower than the baseline by more than X times")
    t.add_argument("--max-output-error", type=_positive_float,
                   help="infeasible if max |y - y_ref| / max |y_ref| against float32 (TF32 off) exceeds E")
    t.add_argument("--backends", type=_backend_list, help="Keras backends to search (default: those installed)")
    t.add_argument("--batch-sizes", type=_int_list, help="batch sizes to search (default 32,64,128,256)")
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
    t.add_argument("--gpus", type=_gpu_list, help="NVML indices of the GPUs to tune on at once, one worker process "
                                                  "each, e.g. 0,1,2,3 (default: the current GPU)")
    t.add_argument("--heartbeat-s", type=_positive_float, default=None, help=argparse.SUPPRESS)
    t.add_argument("--fake-measure-s", type=float, default=None, help=argparse.SUPPRESS)  # tests: FakeRunner


def _gpu_list(text: str) -> tuple[int, ...]:
    from carm_advisor.tune.parallel import parse_gpus

    try:
        return parse_gpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_worker_parser(sub) -> None:
    w = sub.add_parser("worker", help="join a running tuning study (from this or another machine) and run its "
                                      "trials on this process's GPU (CUDA_VISIBLE_DEVICES picks it)")
    w.add_argument("--storage", required=True, help="the study's storage URL (postgresql://..., sqlite:///..., journal:PATH)")
    w.add_argument("--study", required=True, help="the study's name (printed by carm-advise tune)")
    w.add_argument("--share", type=int, default=None, help=argparse.SUPPRESS)   # the launcher's exact share
    w.add_argument("--worker-id", default=None, help=argparse.SUPPRESS)
    w.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)


def _worker(args) -> int:
    from carm_advisor.tune.parallel import join_study
    from carm_advisor.tune.storage import storage_url

    url = storage_url(args.storage, "study")
    done = join_study(url, args.study, share=args.share, worker_id=args.worker_id, seed=args.seed,
                      log=lambda line: print(line, flush=True))
    print(f"worker done: {done} trials of study {args.study!r} in {url}", flush=True)
    return 0


def _tune(args) -> int:
    from carm_advisor.files import check_output_path, check_writable_dir
    from carm_advisor.tune.storage import storage_url

    if args.json_path:   # output paths and a bad storage are reported before Keras takes seconds to load
        check_output_path(args.json_path, "--json")
    if args.plot_dir:
        check_writable_dir(args.plot_dir, "--plot")
    storage_url(args.storage, args.model)
    _import_keras()
    if getattr(args, "shorthand", False):
        _check_shorthand_model(args.model)
    from carm_advisor.report.console import make_console
    from carm_advisor.tune.study import tune

    objectives = args.objective or ["gflops_per_watt"]
    runner = None
    kwargs = {}
    if args.heartbeat_s is not None:
        kwargs["heartbeat_s"] = args.heartbeat_s
    if args.fake_measure_s is not None:
        from carm_advisor.profiles.profile import load_profile
        from carm_advisor.models.builder import model_spec
        from carm_advisor.trials.predicted import ConfigPredictor
        from carm_advisor.trials.runner import FakeRunner

        runner = FakeRunner(ConfigPredictor(model_spec(args.model), load_profile(args.profile) if args.profile else None),
                            delay_s=args.fake_measure_s)
    console = make_console()
    result = tune(
        args.model, objective=objectives, n_trials=args.trials, storage=args.storage, study_name=args.study,
        mode=args.mode, pareto=args.pareto, backends=args.backends, batch_sizes=args.batch_sizes,
        timeout_s=args.timeout, max_slowdown=args.max_slowdown, max_output_error=args.max_output_error,
        predict=True if args.predict else "auto", profile=args.profile, apply_clocks=args.apply_clocks,
        runner=runner, carm_pruning=not args.no_carm_pruning, progress=console.is_terminal, gpus=args.gpus,
        calibration=False if args.no_calibration else "auto", input_shapes=call_input_shapes(args.call_shape),
        log=None if console.is_terminal or not args.gpus else (lambda line: print(line, flush=True)), **kwargs,
    )
    console.print(result)
    if args.json_path:
        result.to_json(args.json_path)
        console.print(f"result written to {args.json_path}")
    if args.plot_dir:
        for path in result.plot(args.plot_dir):
            console.print(f"plot written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
