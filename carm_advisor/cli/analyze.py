"""carm-advise analyze: map a model's layers onto the CARM, measure them on a GPU, and recommend changes."""

from __future__ import annotations

import time

from carm_advisor.cli.common import add_input_shape_flags, import_keras_quietly, input_shapes_of, positive_int


def add_parser(sub) -> None:
    from carm_advisor.models.loader import KERAS_POLICIES

    a = sub.add_parser("analyze", help="map a model's layers onto the CARM and recommend changes")
    a.add_argument("model", help="a keras.applications name in lower case (vgg16, resnet50, mobilenetv2, ...), a "
                                 "keras_hub preset (bert_base_en: its config, no weights), a .keras file, or "
                                 "package.module:builder (a function that returns a built model)")
    a.add_argument("--batch-size", type=positive_int, default=1, help="samples per call (default 1)")
    a.add_argument("--precision", choices=KERAS_POLICIES, help="Keras dtype policy to build/analyse the model with")
    a.add_argument("--layout", choices=("channels_last", "channels_first"),
                   help="image data format to build an application model with (default: Keras' setting)")
    add_input_shape_flags(a)
    a.add_argument("--profile", help="GPU profile JSON (default: this GPU's measured profile, else the recorded H200)")
    a.add_argument("--json", dest="json_path", help="write the report as JSON here")
    a.add_argument("--plot", dest="plot_path", help="write the CARM chart (PNG/SVG/PDF) here")
    a.add_argument("--plot-energy", dest="plot_energy_path",
                   help="write the energy-efficiency CARM (GFLOP/s per W against AI) with the layer dots here")
    a.add_argument("--from-measurements", help="replay per-layer measurements recorded on a GPU (JSON)")
    a.add_argument("--no-measure", action="store_true", help="predict only, even on a GPU")
    a.add_argument("--training-step", action="store_true", help="on a GPU, also measure a whole training step")
    a.add_argument("--counters", action="store_true", help="also read hardware counters with Nsight Compute (ncu)")
    a.add_argument("--top", type=positive_int, help="show only the N layers with the largest share of time")
    a.add_argument("--strict", action="store_true", help="fail on layers without a cost model")
    a.add_argument("--verify", action="store_true",
                   help="apply each recommended configuration change in a child process and measure it")
    a.add_argument("--measure-method", choices=("profiled", "layers"), default="profiled",
                   help="torch on a GPU: one profiled pass (default) or each layer timed alone")
    a.add_argument("--no-calibration", action="store_true", help="predict with the CARM bound alone")


def run(args) -> int:
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
    import_keras_quietly(lean=True)   # without the optional packages Keras imports and the analysis never uses
    timings_s = {"keras_import": time.perf_counter() - started_s}
    from carm_advisor.advise.analyze import analyze, check_batch_fits
    from carm_advisor.errors import CarmError, ProfileError
    from carm_advisor.mapping.input_shapes import shaped_model
    from carm_advisor.models.builder import build, file_at_precision, model_spec
    from carm_advisor.models.loader import is_model_file, load_model
    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.report.console import make_console
    from carm_advisor.report.render import header_warnings, print_report

    profile = load_profile(args.profile) if args.profile else None
    input_shapes = input_shapes_of(args.input_shape)
    console = make_console()
    is_file = is_model_file(args.model)
    spec = model_spec(args.model, input_shapes=input_shapes)   # an application's image size
    if args.layout and not is_file:   # a file's layout is its own: load_model refuses --layout for it
        import keras

        keras.config.set_image_data_format(args.layout)
    phase_s = time.perf_counter()
    with console.status(f"loading {args.model}"):
        if spec.kind == "builder":   # built under the precision's policy and the layout asked for, as tune does
            model, name = build(spec, args.precision, args.layout, seed=0), spec.name
        else:
            model, name = load_model(args.model, precision=args.precision, input_shape=spec.input_shape,
                                     layout=args.layout if is_file else None)
        # An application is built under the policy; a file is rebuilt at it, its layers pinned to another policy
        # keeping theirs; one whose policies cannot be replaced is analysed at it (analyze's precision, which also
        # leaves pinned layers at theirs).
        precision = None
        if is_file:
            model, precision = file_at_precision(model, args.precision)
    timings_s["model_build"] = time.perf_counter() - phase_s
    with shaped_model(model, input_shapes) as shaped:   # a model whose inputs have unknown sizes, on those given
        # a batch that cannot fit is refused before the analysis, not reported in impossible times
        check_batch_fits(shaped, args.batch_size, precision, profile, measure=False if args.no_measure else "auto")
    phase_s = time.perf_counter()
    try:
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
    except ProfileError as exc:   # a profile without a roof the model needs: say which file
        raise ProfileError(f"{args.profile}: {exc}" if args.profile and args.profile not in str(exc) else str(exc)) \
            from None
    unfit = header_warnings(report)   # the GPU this run measured on: its own profile, known only now
    if unfit and report.measurement is None:
        raise CarmError(unfit[0].split("; the figures are for")[0])
    timings_s["analysis"] = time.perf_counter() - phase_s
    report.timings_s = timings_s
    if precision is not None:
        report.warnings.append(f"--precision {precision}: {name}'s dtype policies cannot be replaced by a rebuild, "
                               f"so its weights stay as saved; the layers under its own policy are analysed at "
                               f"{precision}'s compute dtype")
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
