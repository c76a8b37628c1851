"""Run every CARM micro-benchmark on the GPU and return the raw runs: calibrated calls, energy windows.

Each benchmark call runs >= 100 ms (CUDA-event timed); calls are grouped into energy windows of >= 1 s
(0.3 s with --quick) measured by power/energy.py, the same windows the layers are measured with; a
run's rate is the median rate of its calls, its spread (max-min)/median. Turning runs into roofs, a
power model and a Profile is carm/fitting.py's and profiles/build.py's business.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from carm_advisor.carm.fitting import BenchmarkRun, per_clock_max
from carm_advisor.errors import MeasurementError
from carm_advisor.power.energy import idle_power_w, measure_energy, relative_spread


@dataclass
class Settings:
    call_s: float = 0.1          # each benchmark call runs at least this long (CUDA events)
    window_s: float = 1.0        # NVML energy window
    windows: int = 1
    sweep_points: int = 9
    sweep_call_s: float = 0.05
    quick: bool = False

    @classmethod
    def for_mode(cls, quick: bool) -> Settings:
        if quick:
            return cls(call_s=0.02, window_s=0.2, windows=1, sweep_points=5, sweep_call_s=0.01, quick=True)
        return cls()


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
    """Calibrated calls of >= settings.call_s, grouped into energy windows of >= settings.window_s."""
    iterations, first = _calibrate(lib, info.name, device, settings.call_s, size)
    results = []

    def call() -> None:   # each call ends on a CUDA event sync: nothing queued across windows
        results.append(lib.run(info.name, device=device, size=size or 0, iterations=iterations, launches=1, warmup=0))

    m = measure_energy(call, gpu, min_window_s=settings.window_s, repeats=settings.windows, warmup=0, clock=clock,
                       calls_per_window=max(1, math.ceil(settings.window_s / max(first.seconds, 1e-6))))
    flops_rates = [r.flops / r.seconds for r in results if r.seconds > 0]
    bytes_rates = [r.bytes / r.seconds for r in results if r.seconds > 0]
    if not flops_rates:
        raise MeasurementError(f"benchmark {info.name} returned no timed result")
    rates = bytes_rates if info.kind == "memory" else flops_rates
    fl, by = statistics.median(flops_rates), statistics.median(bytes_rates)
    return BenchmarkRun(
        name=info.name, kind=info.kind, key=info.carm_key, memory_key=info.memory_key, variant=info.variant,
        rate=statistics.median(rates), spread=relative_spread(rates), repeats=len(rates),
        power_w=m.power_w, sm_clock_mhz=m.sm_clock_mhz,
        seconds_per_call=statistics.median(r.seconds for r in results), flops_per_s=fl, bytes_per_s=by,
        intensity=(fl / by if by else None) if info.kind == "mixed" else None,
        extra={"iterations": iterations, "size_bytes": results[-1].size_bytes, "checksum": results[-1].checksum,
               "window_s": [w.time_s for w in m.windows]},
    )


def _runnable(info, arch: int, everything: bool = False) -> bool:
    # On Hopper the wgmma rows measure the Tensor Core roofs; mma.sync reaches only ~85% there, so its
    # rows add time and no roof (everything=True still runs them, to compare the two instructions).
    return info.runs_on(arch) and (everything or not (arch >= 90 and info.kind == "compute"
                                                      and info.instruction.startswith("mma.")))


@dataclass
class CeilingRuns:
    """What one ceilings run measured: the runs and what a Profile needs besides (profiles/build.py)."""

    runs: list[BenchmarkRun]
    device: Any                  # the binding's DeviceInfo
    arch: int                    # 10*major + minor
    idle_w: float | None
    wall_s: float                # the ceilings' own time; the counter check is extra
    counter_check: list[dict] | None
    source_hash: str | None      # the kernel sources the binding was built from (None: unknown)


def run_ceilings(lib, gpu, device: int = 0, quick: bool = False, progress: bool = True, clock=time.perf_counter,
                 everything: bool = False, verify_counters: bool = False, exclude: tuple[str, ...] = ()) -> CeilingRuns:
    """Run every benchmark the GPU supports through binding `lib`, with energy from `gpu` (None: no power).
    exclude: benchmark names not to run."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    settings = Settings.for_mode(quick)
    started = time.perf_counter()
    dev = lib.device_info(device)
    arch = 10 * dev.cc_major + dev.cc_minor
    idle_w = idle_power_w(gpu) if gpu is not None else None
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
        r.per_clock_max = per_clock_max(r.key, arch, dev.sm_count, r.sm_clock_mhz)
    wall_s = time.perf_counter() - started
    counter_check = None
    if verify_counters:
        from carm_advisor.measure.verify import verify_with_counters

        counter_check = verify_with_counters(lib.path, names=[r.name for r in runs], device=device)
    return CeilingRuns(runs, dev, arch, idle_w, wall_s, counter_check, getattr(lib, "source_hash", None))

