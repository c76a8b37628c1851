"""carm-advise ceilings: measure (or show) the GPU's CARM roofs; carm-advise build-kernels: compile the CUDA
micro-benchmarks."""

from __future__ import annotations

import sys
import time

from carm_advisor.cli.common import benchmark_names


def add_parser(sub) -> None:
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


def run(args) -> int:
    """carm-advise ceilings: measure (or --show) the roofs, print a table, optionally save JSON and a chart."""
    from carm_advisor.files import Outputs

    outputs = Outputs()   # before the minutes of measuring
    outputs.plan(args.json_path, "profile", "--json")
    outputs.plan(args.plot_path, "CARM roofs chart", "--plot")
    if args.plot_path:
        from carm_advisor.report.plot import check_plot_format

        check_plot_format(args.plot_path)
    if args.show and args.exclude:
        check_recorded_benchmarks(args.exclude, args.profile)
    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.report.console import make_console
    from carm_advisor.report.render import ceilings_table

    console = make_console()
    if args.show:
        profile = load_profile(args.profile) if args.profile else profile_for_show()
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


def profile_for_show():
    """This GPU's cached measured profile, else the profile shipped for its GPU model, else the recorded default
    (no GPU here, or a model none ships for)."""
    from carm_advisor.errors import PowerError
    from carm_advisor.measure.profile import measured_profile_for
    from carm_advisor.power.nvml import open_gpu
    from carm_advisor.profiles.profile import load_profile, shipped_profile_name

    try:
        gpu = open_gpu(0)
        cached = measured_profile_for({"uuid": gpu.uuid(), "driver": gpu.driver_version()})
        shipped = shipped_profile_name(gpu.name())
    except PowerError:   # no NVML or no GPU here: show the recorded profile
        cached, shipped = None, None
    return cached if cached is not None else load_profile(shipped)


def check_recorded_benchmarks(names: tuple[str, ...], profile_path: str | None) -> None:
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


def add_build_parser(sub) -> None:
    b = sub.add_parser("build-kernels", help="compile the CUDA micro-benchmarks (and the TensorFlow op)")
    b.add_argument("--arch", help="e.g. sm_90a; default: the visible GPU's, else sm_90a and sm_80")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")


def run_build(args) -> int:
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
