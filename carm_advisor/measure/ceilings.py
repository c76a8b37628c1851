"""Measure every CARM roof on the GPU: calibrated micro-benchmark runs, NVML energy windows,
validation against per-clock maxima, the mixed-intensity CARM fitness sweep, and a measured Profile.

Each benchmark call runs >= 100 ms (CUDA-event timed); calls are grouped into NVML energy windows of
>= 1 s (0.3 s with --quick); the roof is the median rate of the calls, its spread (max-min)/median.
Where several variants measure one roof (random vs zero data, HBM read/write/copy, ld.global vs TMA
bulk copies, L2 partition vs whole), the roof is the highest: a roof is an upper bound; with
--verify-counters, variants whose counters see less work than they declare are left out first. The power model is fitted from the same
runs: constant = idle power, e_flop[path] = (P - idle) / FLOP rate of the random-data variant,
e_byte[level] = (P - idle) / byte rate.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from carm_advisor.carm.roofline import COMPUTE_PATHS, MEMORY_LEVELS
from carm_advisor.errors import MeasurementError

if TYPE_CHECKING:
    from carm_advisor.profiles.profile import Profile

# Work per SM per clock, by compute capability (10*major+minor): FLOP (or OP) for compute paths,
# bytes for shared memory. From the architecture whitepapers' per-SM unit counts (dense Tensor Core).
PER_SM_PER_CLOCK: dict[int, dict[str, float]] = {
    90: {"fp64": 128, "fp32": 256, "fp16x2": 512, "tc_tf32": 2048, "tc_fp16": 4096, "tc_fp16_f16acc": 4096,
         "tc_bf16": 4096, "tc_fp8_e4m3": 8192, "tc_fp8_e5m2": 8192, "tc_int8": 8192, "shared": 128, "l1": 128},
    89: {"fp64": 4, "fp32": 256, "fp16x2": 256, "tc_tf32": 512, "tc_fp16": 1024, "tc_fp16_f16acc": 2048,
         "tc_bf16": 1024, "tc_fp8_e4m3": 2048, "tc_fp8_e5m2": 2048, "tc_int8": 2048, "shared": 128, "l1": 128},
    86: {"fp64": 4, "fp32": 256, "fp16x2": 256, "tc_tf32": 512, "tc_fp16": 1024, "tc_fp16_f16acc": 2048,
         "tc_bf16": 1024, "tc_int8": 2048, "shared": 128, "l1": 128},
    80: {"fp64": 64, "fp32": 128, "fp16x2": 512, "tc_tf32": 1024, "tc_fp16": 2048, "tc_fp16_f16acc": 2048,
         "tc_bf16": 2048, "tc_int8": 4096, "shared": 128, "l1": 128},
}
# A measurement this far above its per-clock maximum is a benchmark bug, not a fast GPU.
PER_CLOCK_TOLERANCE = 1.01


@dataclass
class Settings:
    call_s: float = 0.1          # each benchmark call runs at least this long (CUDA events)
    window_s: float = 1.0        # NVML energy window
    windows: int = 1
    sweep_points: int = 9
    sweep_call_s: float = 0.05
    quick: bool = False

    @classmethod
    def for_mode(cls, quick: bool) -> "Settings":
        if quick:
            return cls(call_s=0.02, window_s=0.2, windows=1, sweep_points=5, sweep_call_s=0.01, quick=True)
        return cls()


@dataclass
class BenchmarkRun:
    name: str
    kind: str
    key: str
    memory_key: str
    variant: str
    rate: float                  # FLOP/s (compute, mixed) or B/s (memory)
    spread: float
    repeats: int
    power_w: float | None
    sm_clock_mhz: float | None
    seconds_per_call: float
    flops_per_s: float = 0.0
    bytes_per_s: float = 0.0
    intensity: float | None = None   # FLOP/byte, mixed rows
    per_clock_max: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def per_clock_max(key: str, arch: int, sm_count: int, sm_clock_mhz: float | None) -> float | None:
    per = PER_SM_PER_CLOCK.get(arch, {}).get(key)
    if per is None or not sm_clock_mhz:
        return None
    return per * sm_count * sm_clock_mhz * 1e6


def _calibrate(lib, name: str, device: int, target_s: float, size: float | None) -> tuple[int, Any]:
    """Inner iterations so that one call lasts about target_s; returns (iterations, first result)."""
    result = lib.run(name, device=device, size=size or 0, iterations=0, launches=1, warmup=1)
    iterations = max(1, int(result.iterations or 1))
    for _ in range(6):
        if result.seconds >= target_s * 0.7:
            break
        factor = min(64.0, max(1.5, target_s / max(result.seconds, 1e-6)))
        iterations = max(iterations + 1, int(iterations * factor))
        result = lib.run(name, device=device, size=size or 0, iterations=iterations, launches=1, warmup=0)
    return iterations, result


def run_benchmark(lib, info, device: int, gpu, settings: Settings, size: float | None = None,
                  clock=time.perf_counter) -> BenchmarkRun:
    """Calibrated calls of >= settings.call_s, grouped into NVML energy windows of >= settings.window_s."""
    from carm_advisor.power.energy import PowerSampler, relative_spread

    iterations, first = _calibrate(lib, info.name, device, settings.call_s, size)
    calls_per_window = max(1, math.ceil(settings.window_s / max(first.seconds, 1e-6)))
    results, windows = [], []
    sampler = PowerSampler(gpu, 0.1, clock) if gpu is not None else None
    if sampler is not None:
        sampler.start()
    try:
        for _ in range(settings.windows):
            e0, t0 = (gpu.total_energy_mj() if gpu is not None else None), clock()
            for _ in range(calls_per_window):   # each call ends on a CUDA event sync: nothing queued across windows
                results.append(lib.run(info.name, device=device, size=size or 0, iterations=iterations, launches=1, warmup=0))
            e1, t1 = (gpu.total_energy_mj() if gpu is not None else None), clock()
            windows.append(((e1 - e0) / 1000.0 if e0 is not None else None, t1 - t0))
    finally:
        if sampler is not None:
            sampler.stop()
    flops_rates = [r.flops / r.seconds for r in results if r.seconds > 0]
    bytes_rates = [r.bytes / r.seconds for r in results if r.seconds > 0]
    if not flops_rates:
        raise MeasurementError(f"benchmark {info.name} returned no timed result")
    rates = bytes_rates if info.kind == "memory" else flops_rates
    fl, by = statistics.median(flops_rates), statistics.median(bytes_rates)
    energy_j = sum(e for e, _ in windows if e is not None) if gpu is not None else None
    power_w = energy_j / sum(t for _, t in windows) if energy_j is not None else None
    return BenchmarkRun(
        name=info.name, kind=info.kind, key=info.carm_key, memory_key=info.memory_key, variant=info.variant,
        rate=statistics.median(rates), spread=relative_spread(rates), repeats=len(rates),
        power_w=power_w, sm_clock_mhz=sampler.mean_sm_clock_mhz() if sampler is not None else None,
        seconds_per_call=statistics.median(r.seconds for r in results), flops_per_s=fl, bytes_per_s=by,
        intensity=(fl / by if by else None) if info.kind == "mixed" else None,
        extra={"iterations": iterations, "size_bytes": results[-1].size_bytes, "checksum": results[-1].checksum,
               "window_s": [t for _, t in windows]},
    )


def _runnable(info, arch: int, everything: bool = False) -> bool:
    if not (info.min_arch <= arch and (not info.max_arch or arch <= info.max_arch)):
        return False
    # On Hopper the wgmma rows measure the Tensor Core roofs; mma.sync reaches only ~85% there, so its
    # rows add time and no roof (everything=True still runs them, to compare the two instructions).
    return everything or not (arch >= 90 and info.kind == "compute" and info.instruction.startswith("mma."))


def measure_ceilings(device: int = 0, quick: bool = False, progress: bool = True, gpu=None, library=None,
                     command: str | None = None, clock=time.perf_counter, everything: bool = False,
                     verify_counters: bool = False, exclude: tuple[str, ...] = ()) -> "Profile":
    """Run every benchmark the GPU supports and return a measured Profile (also cached for analyze).
    exclude: benchmark names not to run."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from carm_advisor.measure.kernels import KernelLibrary
    from carm_advisor.power.nvml import open_gpu
    from carm_advisor.profiles.cache import store_profile

    if gpu is None and library is None:
        from carm_advisor.errors import GPUUnavailableError
        from carm_advisor.power.nvml import gpu_count

        if gpu_count() == 0:   # say so before spending a minute compiling kernels
            raise GPUUnavailableError("no NVIDIA GPU is visible here (NVML sees none): measuring ceilings needs one; "
                                      "'carm-advise ceilings --show' and 'analyze' work on the recorded profile")
    settings = Settings.for_mode(quick)
    started = time.perf_counter()
    if library is None:
        from carm_advisor.measure.build import detect_arch

        library = KernelLibrary.load(arch=detect_arch())   # only the visible GPU's arch: a faster build
    load_s = time.perf_counter() - started   # a compile on a cold kernel cache shows here
    lib = library
    dev = lib.device_info(device)
    arch = 10 * dev.cc_major + dev.cc_minor
    gpu = gpu if gpu is not None else open_gpu(device)
    idle_w = _idle_power_w(gpu)
    unknown = sorted(set(exclude) - {b.name for b in lib.benchmarks()})
    if unknown:
        raise MeasurementError(f"cannot exclude unknown benchmark(s): {', '.join(unknown)}")
    benches = [b for b in lib.benchmarks() if _runnable(b, arch, everything) and b.name not in exclude]
    roofs = [b for b in benches if b.kind in ("compute", "memory")]
    mixed = [b for b in benches if b.kind == "mixed"]
    runs: list[BenchmarkRun] = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), disable=not progress, transient=False) as bar:
        task = bar.add_task("ceilings", total=len(roofs) + len(mixed))
        for info in roofs:
            bar.update(task, description=f"ceilings: {info.name}")
            runs.append(run_benchmark(lib, info, device, gpu, settings, clock=clock))
            bar.advance(task)
        sweep_settings = Settings(call_s=settings.sweep_call_s, window_s=settings.sweep_call_s, windows=1)
        for info in mixed:
            bar.update(task, description=f"sweep: {info.name}")
            run = run_benchmark(lib, info, device, gpu, sweep_settings, clock=clock)   # for the SM clock
            run.power_w = None   # a 50 ms window is shorter than the NVML energy counter's updates
            runs.append(run)
            bar.advance(task)
    for r in runs:
        r.per_clock_max = per_clock_max(r.key if r.kind != "memory" else r.key, arch, dev.sm_count, r.sm_clock_mhz)
    measure_s = time.perf_counter() - started   # the ceilings' own time; the counter check is extra
    counter_check = None
    if verify_counters:
        from carm_advisor.measure.verify import verify_with_counters

        counter_check = verify_with_counters(lib.path, names=[r.name for r in runs], device=device)
    from carm_advisor.measure.launch_floor import measure_launch_floor

    floor_started = time.perf_counter()
    floor = measure_launch_floor(lib, device, arch=arch, clock=clock)
    phases_s = {"load_kernels": load_s, "benchmarks": measure_s - load_s,
                "launch_floor": time.perf_counter() - floor_started}
    profile = build_profile(runs, dev, gpu, idle_w, arch, wall_s=measure_s,
                            quick=quick, command=command, source_hash=getattr(lib, "source_hash", None) or current_kernel_source_hash(),
                            counter_check=counter_check)
    profile = dataclasses.replace(profile, launch_floor=floor, provenance={**profile.provenance, "phases_s": phases_s})
    store_profile(profile)
    return profile


def current_kernel_source_hash() -> str | None:
    from carm_advisor.errors import KernelBuildError
    from carm_advisor.measure.build import source_hash

    try:
        return source_hash()
    except KernelBuildError:   # sources not found: the profile says so by a null hash
        return None


def _idle_power_w(gpu, seconds: float = 0.5) -> float | None:
    try:
        e0, t0 = gpu.total_energy_mj(), time.perf_counter()
        time.sleep(seconds)
        e1, t1 = gpu.total_energy_mj(), time.perf_counter()
        return (e1 - e0) / 1000.0 / (t1 - t0)
    except Exception:
        return None


def best_runs(runs: list[BenchmarkRun]) -> dict[str, BenchmarkRun]:
    """The highest-rate run of each roof key (compute) and level (memory)."""
    best: dict[str, BenchmarkRun] = {}
    for r in runs:
        if r.kind not in ("compute", "memory"):
            continue
        if r.key not in best or r.rate > best[r.key].rate:
            best[r.key] = r
    return best


def fit_power_model(runs: list[BenchmarkRun], idle_w: float | None, power_limit_w: float | None,
                    date: str | None = None) -> dict | None:
    if idle_w is None:
        return None
    e_flop: dict[str, float] = {}
    e_byte: dict[str, float] = {}
    for r in runs:
        if r.power_w is None or r.kind == "mixed":
            continue
        if r.kind == "compute" and r.variant == "zero":
            continue   # random data is what real layers feed the Tensor Cores
        dynamic_w = max(r.power_w - idle_w, 0.0)
        if r.kind == "compute":
            value = dynamic_w / r.flops_per_s
            e_flop[r.key] = max(e_flop.get(r.key, 0.0), value)
        else:
            value = dynamic_w / r.bytes_per_s
            e_byte[r.key] = max(e_byte.get(r.key, 0.0), value)
    return {
        "constant_w": idle_w,
        "power_limit_w": power_limit_w if power_limit_w and power_limit_w > idle_w else None,
        "joules_per_flop": e_flop,
        "joules_per_byte": e_byte,
        "provenance": {
            "source": "measured",
            "method": "constant_w = idle power before the run (NVML energy counter over 0.5 s); "
                      "e[path or level] = (average power of its benchmark - idle) / its rate, random-data variants",
            "date": date or _dt.date.today().isoformat(),   # the day the runs were measured
        },
    }


def sweep_fitness(runs: list[BenchmarkRun], peaks: dict[str, float], slopes: dict[str, float],
                  tolerance: float = 0.10) -> dict[str, Any]:
    """Fraction of mixed-intensity points within `tolerance` of min(roof, slope * AI).

    A point is one (compute path, memory level, AI); where several implementations measure it (4, 8 or 16
    loads per step, TMA-fed), the fastest stands for it, as the fastest variant stands for a roof. Any
    implementation above the roofs is listed in above_roofs: a roof that a kernel beats is wrong.
    Each point keeps the SM clock seen while it ran (the sweep's 50 ms calls are too short for the
    NVML energy counter, so no power is recorded for them).
    """
    points = []
    for r in runs:
        if r.kind != "mixed" or not r.intensity or r.key not in peaks or r.memory_key not in slopes:
            continue
        bound = min(peaks[r.key], slopes[r.memory_key] * r.intensity)
        points.append({"name": r.name, "path": r.key, "level": r.memory_key, "ai": r.intensity,
                       "flops_per_s": r.flops_per_s, "bound_flops_per_s": bound, "ratio": r.flops_per_s / bound,
                       "sm_clock_mhz": r.sm_clock_mhz})
    if not points:
        return {"fitness": None, "points": []}
    best: dict[tuple, dict] = {}
    for p in points:
        group = (p["path"], p["level"], round(math.log2(p["ai"]), 3))
        if group not in best or p["ratio"] > best[group]["ratio"]:
            best[group] = p
    for p in points:
        p["stands_for_point"] = any(b is p for b in best.values())
    within = sum(1 for p in best.values() if abs(p["ratio"] - 1) <= tolerance)
    return {"fitness": within / len(best), "tolerance": tolerance, "sweep_points": len(best), "points": points,
            "missed": sorted(p["name"] for p in best.values() if abs(p["ratio"] - 1) > tolerance),
            "above_roofs": [p["name"] for p in points if p["ratio"] > 1 + tolerance]}


def select_roofs(runs: list[BenchmarkRun], counter_check, idle_w: float | None, power_limit_w: float | None,
                 date: str, drop: dict[str, str] | None = None) -> dict[str, Any]:
    """The roofs, power model and sweep fitness that a set of benchmark runs supports.

    Left out first: runs the counters undercount, and `drop` ({name: reason}), runs known to be flawed.
    Returns {"ceilings", "flags", "power_model", "sweep"}; the flags also name every counter deviation.
    """
    flags = []
    untrusted = undercounted(counter_check)
    for name in sorted(untrusted):
        flags.append(f"{name}: left out of roofs and sweep: the counters see less work at its level than it declares")
    for name, reason in sorted((drop or {}).items()):
        flags.append(f"{name}: left out of roofs and sweep: {reason}")
    trusted = [r for r in runs if r.name not in untrusted and r.name not in (drop or {})]
    ceilings = {}
    for key, r in best_runs(trusted).items():
        if key not in COMPUTE_PATHS and key not in MEMORY_LEVELS:
            continue
        ratio = r.rate / r.per_clock_max if r.per_clock_max else None
        if ratio is not None and ratio > PER_CLOCK_TOLERANCE:
            flags.append(f"{r.name}: {ratio:.3f}x its per-clock maximum at {r.sm_clock_mhz:.0f} MHz (benchmark bug)")
        ceilings[key] = {
            "kind": "compute" if key in COMPUTE_PATHS else "memory",
            "value": r.rate, "sm_clock_mhz": r.sm_clock_mhz, "power_w": r.power_w, "repeats": r.repeats,
            "spread": r.spread,
            "provenance": {"source": "measured", "method": f"carm micro-benchmark {r.name} ({r.variant})",
                           "date": date, "per_clock_max_ratio": ratio},
        }
    peaks = {k: c["value"] for k, c in ceilings.items() if c["kind"] == "compute"}
    slopes = {k: c["value"] for k, c in ceilings.items() if c["kind"] == "memory"}
    pm = fit_power_model(trusted, idle_w, power_limit_w, date)
    flags += [f"{r['name']}: counters see flops x{r['flops_ratio']}, bytes x{r['bytes_ratio']} of what it declares"
              for r in counter_check or [] if not r["ok"]]
    return {"ceilings": ceilings, "flags": flags, "sweep": sweep_fitness(trusted, peaks, slopes),
            "power_model": pm if pm and pm["joules_per_flop"] and pm["joules_per_byte"] else None}


def reselect_recorded(doc: dict, drop: dict[str, str]) -> dict:
    """A measured profile's JSON with its roofs, power model and sweep selected again from its own recorded
    runs, leaving out `drop` ({benchmark name: why}); every figure stays as measured."""
    runs = [BenchmarkRun(**b) for b in doc["benchmarks"]]
    unknown = sorted(set(drop) - {r.name for r in runs})
    if unknown:
        raise MeasurementError(f"cannot drop benchmark(s) the record does not hold: {', '.join(unknown)}")
    date = (doc.get("provenance", {}).get("created") or "")[:10] or None
    sel = select_roofs(runs, doc.get("counter_check"), doc["device"].get("idle_power_w"),
                       doc["device"].get("power_limit_w"), date, drop)
    out = dict(doc)
    out["ceilings"], out["sweep"] = sel["ceilings"], sel["sweep"]
    out.pop("power_model", None)
    if sel["power_model"]:
        out["power_model"] = sel["power_model"]
    out["provenance"] = {**doc.get("provenance", {}), "flags": sel["flags"], "dropped": dict(drop)}
    return out


def build_profile(runs, dev, gpu, idle_w, arch, wall_s, quick=False, command=None, source_hash=None,
                  counter_check=None):
    from carm_advisor.profiles.profile import profile_from_dict, SCHEMA

    driver = _safe(gpu.driver_version)
    power_limit = _safe(gpu.power_limit_w)
    sel = select_roofs(runs, counter_check, idle_w, power_limit, _dt.date.today().isoformat())
    ceilings, flags, pm, fitness = sel["ceilings"], sel["flags"], sel["power_model"], sel["sweep"]
    doc = {
        "schema": SCHEMA,
        "device": {
            "name": dev.name, "uuid": _safe(gpu.uuid), "driver": driver, "compute_capability": f"{dev.cc_major}.{dev.cc_minor}",
            "sm_count": dev.sm_count, "l2_bytes": dev.l2_bytes, "l2_usable_bytes": int(dev.l2_bytes * 0.8),
            "memory_bytes": dev.global_mem_bytes, "sm_clock_max_mhz": _safe(gpu.max_sm_clock_mhz),
            "power_limit_w": power_limit, "idle_power_w": idle_w,
        },
        "provenance": {"source": "measured", "created": _dt.datetime.now().isoformat(timespec="seconds"),
                       "command": command, "quick": quick, "wall_s": wall_s, "kernel_source_hash": source_hash,
                       "flags": flags},
        "ceilings": ceilings,
        "benchmarks": [r.to_dict() for r in runs],
        "sweep": fitness,
    }
    if counter_check is not None:
        doc["counter_check"] = counter_check
    if pm:
        doc["power_model"] = pm
    return profile_from_dict(doc, origin="measured profile")


def undercounted(counter_check) -> set[str]:
    """Benchmarks whose Nsight Compute counters see fewer FLOPs, or fewer bytes at their level, than the
    table declares (beyond the check's tolerance): their rates would be inflated, so no roof or sweep point
    may rest on them. More bytes than declared (instruction fetches, say) only understates a rate."""
    from carm_advisor.measure.verify import TOLERANCE

    out = set()
    for row in counter_check or []:
        ratios = [row.get("flops_ratio"), row.get("bytes_ratio")]
        if any(r is not None and r < 1 - TOLERANCE for r in ratios):
            out.add(row["name"])
    return out


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


def ceilings_command(args) -> int:
    """carm-advise ceilings: measure (or --show) the roofs, print a table, optionally save JSON and a chart."""
    from rich.console import Console

    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.report.render import ceilings_table

    console = Console()
    if args.show:
        profile = load_profile(args.profile) if args.profile else _profile_for_show()
    else:
        import sys

        profile = measure_ceilings(device=args.device, quick=args.quick, everything=getattr(args, "everything", False),
                                   verify_counters=getattr(args, "verify_counters", False),
                                   exclude=getattr(args, "exclude", ()),
                                   command=" ".join(["carm-advise"] + sys.argv[1:]))
    console.print(ceilings_table(profile))
    for flag in profile.provenance.get("flags") or []:
        console.print(f"[bold red]flag:[/] {flag}")
    if args.json_path:
        profile.save(args.json_path)
        console.print(f"profile written to {args.json_path}")
    if args.plot_path:
        from carm_advisor.report.plot import plot_profile

        plot_profile(profile, args.plot_path)
        console.print(f"CARM roofs chart written to {args.plot_path}")
    return 0


def measured_profile_for(device: dict) -> "Profile | None":
    """This GPU's cached measured profile: roofs measured with today's kernel sources first, else the
    newest measured on it; None when it was never measured."""
    from carm_advisor.profiles.cache import cached_profile_for

    current = current_kernel_source_hash()
    return (current and cached_profile_for(device, current)) or cached_profile_for(device)


def _profile_for_show():
    from carm_advisor.errors import PowerError
    from carm_advisor.power.nvml import open_gpu
    from carm_advisor.profiles.profile import load_profile

    try:
        gpu = open_gpu(0)
        cached = measured_profile_for({"uuid": gpu.uuid(), "driver": gpu.driver_version()})
    except PowerError:   # no NVML or no GPU here: show the recorded profile
        cached = None
    return cached if cached is not None else load_profile()
