"""Energy measurement windows: time and joules per call of a unit of GPU work.

Why windows of at least a second: NVML's total-energy counter has mJ resolution but advances in
steps (about every 100 ms on Hopper, like its power readings). Reading it at both ends of a window
can be off by up to about one step of energy, so one window's relative error is bounded by roughly
update_period_s / window_s: <= ~10% at 0.1 s, a few percent at 1 s (the two ends' errors are
independent and usually far below a full step), and the median over `repeats` windows damps it further.
Longer windows (2 s, as the H200 probes used) cost time but buy accuracy.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from carm_advisor.errors import MeasurementError, PowerError
from carm_advisor.power._base import GPU

Clock = Callable[[], float]

# A real clock moves within a million calls; a clock that has not is broken (or a fake left alone).
_STILL_CLOCK_CALLS = 10**6


@dataclass(frozen=True)
class PowerSample:
    """One background reading. Units: s (on the sampler's clock), W, MHz, MHz."""

    t_s: float
    power_w: float
    sm_clock_mhz: float
    memory_clock_mhz: float


class PowerSampler:
    """Reads power and clocks from a background thread, ~10 times a second, while in `with`.

    A sample is also taken on entry and on exit, so even a window shorter than the interval has
    readings. The thread stops on exit (any exit path) and is joined. A PowerError raised by a reading
    stops the sampling and is kept in `error` (the window's energy does not depend on it).
    """

    def __init__(self, gpu: GPU, interval_s: float = 0.1, clock: Clock = time.perf_counter) -> None:
        if not interval_s > 0:
            raise MeasurementError(f"Expected interval_s > 0, Received: interval_s={interval_s}")
        self.gpu = gpu
        self.interval_s = interval_s
        self.clock = clock
        self.samples: list[PowerSample] = []
        self.error: PowerError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _sample(self) -> None:
        if self.error is not None:
            return
        try:
            sample = PowerSample(
                t_s=self.clock(),
                power_w=self.gpu.power_w(),
                sm_clock_mhz=self.gpu.sm_clock_mhz(),
                memory_clock_mhz=self.gpu.memory_clock_mhz(),
            )
        except PowerError as err:
            self.error = err
            return
        with self._lock:
            self.samples.append(sample)

    def _run(self) -> None:
        # Event.wait returns True as soon as stop() sets it: the thread never outlives the window.
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> PowerSampler:
        if self._thread is not None:
            raise MeasurementError(
                "Expected a PowerSampler that is not running, Received: a running one"
            )
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="carm-power-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> PowerSampler:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def mean_sm_clock_mhz(self) -> float | None:
        with self._lock:
            return statistics.fmean(s.sm_clock_mhz for s in self.samples) if self.samples else None

    def mean_power_w(self) -> float | None:
        with self._lock:
            return statistics.fmean(s.power_w for s in self.samples) if self.samples else None


@dataclass(frozen=True)
class EnergyWindow:
    """One measured window: `calls` calls of fn between two synchronised clock/energy readings."""

    calls: int
    start_s: float
    end_s: float
    energy_j: float | None  # None without a GPU

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def time_per_call_s(self) -> float:
        return self.time_s / self.calls

    @property
    def energy_per_call_j(self) -> float | None:
        return None if self.energy_j is None else self.energy_j / self.calls


@dataclass(frozen=True)
class EnergyMeasurement:
    """Per-call time and energy of a unit of work, from `windows` windows of >= min_window_s each.

    time_per_call_s and energy_per_call_j are medians over windows; power_w is the total energy over
    the total time of all windows; *_spread_rel is (max - min) / median over windows (0 = identical
    windows), see `relative_spread`. Energy fields are None when measured without a GPU.
    """

    time_per_call_s: float
    time_spread_rel: float
    energy_per_call_j: float | None
    energy_spread_rel: float | None
    power_w: float | None
    sm_clock_mhz: float | None  # mean of the sampler's readings during the windows
    calls_per_window: int  # planned; a window that ran short got more calls (see windows)
    n_windows: int
    min_window_s: float
    windows: tuple[EnergyWindow, ...]
    samples: tuple[PowerSample, ...]


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median: how far apart repeated measurements lie, relative to their middle."""
    if not values:
        raise MeasurementError("Expected at least one value, Received: none")
    median = statistics.median(values)
    if median == 0:
        return 0.0 if max(values) == min(values) else math.inf
    return (max(values) - min(values)) / abs(median)


def measure_energy(
    fn: Callable[[], Any],
    gpu: GPU | None,
    *,
    min_window_s: float = 1.0,
    repeats: int = 3,
    sync: Callable[[], Any] | None = None,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
    sample_interval_s: float = 0.1,
    calls_per_window: int | None = None,
) -> EnergyMeasurement:
    """Time and energy per call of `fn` (one unit of work: a kernel batch, a layer call).

    `warmup` calls first, then a calibration finds how many calls fill `min_window_s` (unless
    `calls_per_window` says it, e.g. a micro-benchmark whose calls were calibrated to a length); then
    `repeats` windows, each of at least `min_window_s` (a short one gets more calls). `sync()`
    (e.g. torch.cuda.synchronize; None for synchronous work) runs right before the clock and energy
    are read at both ends of every window, so queued GPU work lands in the window that issued it.
    `gpu=None` measures time only (CPU runs): energy, power and clock come back as None.
    """
    if not min_window_s > 0:
        raise MeasurementError(f"Expected min_window_s > 0, Received: min_window_s={min_window_s}")
    if repeats < 1:
        raise MeasurementError(f"Expected repeats >= 1, Received: repeats={repeats}")
    if warmup < 0:
        raise MeasurementError(f"Expected warmup >= 0, Received: warmup={warmup}")
    if calls_per_window is not None and calls_per_window < 1:
        raise MeasurementError(f"Expected calls_per_window >= 1, Received: calls_per_window={calls_per_window}")
    do_sync: Callable[[], Any] = sync if sync is not None else (lambda: None)

    for _ in range(warmup):
        fn()
    do_sync()

    def run_batch(calls: int) -> None:
        for _ in range(calls):
            fn()

    if calls_per_window is None:
        calls_per_window = _calibrate(run_batch, do_sync, clock, min_window_s)

    windows: list[EnergyWindow] = []
    sampler = PowerSampler(gpu, sample_interval_s, clock) if gpu is not None else None
    if sampler is not None:
        sampler.start()
    try:
        for _ in range(repeats):
            do_sync()
            start_s = clock()
            start_mj = gpu.total_energy_mj() if gpu is not None else None
            calls, batch = 0, calls_per_window
            while True:
                run_batch(batch)
                calls += batch
                do_sync()
                now_s = clock()
                elapsed_s = now_s - start_s
                if elapsed_s >= min_window_s:
                    break
                # Ran short (the work got faster, or noise): extend by the estimated remainder.
                per_call_s = elapsed_s / calls if elapsed_s > 0 else 0.0
                _check_clock_moves(calls, elapsed_s)
                batch = _calls_for(min_window_s - elapsed_s, per_call_s, calls)
            end_mj = gpu.total_energy_mj() if gpu is not None else None
            end_s = clock()  # energy read between the two clocks: its call time counts in the window
            energy_j = None
            if start_mj is not None and end_mj is not None:
                if end_mj < start_mj:
                    raise MeasurementError(
                        f"Expected a monotonic NVML energy counter, Received: {start_mj} mJ then "
                        f"{end_mj} mJ (driver reloaded?)"
                    )
                energy_j = (end_mj - start_mj) / 1000.0
            windows.append(EnergyWindow(calls, start_s, end_s, energy_j))
    finally:
        if sampler is not None:
            sampler.stop()

    times = [w.time_per_call_s for w in windows]
    energy_per_call_j = energy_spread = power_w = sm_clock_mhz = None
    samples: tuple[PowerSample, ...] = ()
    if gpu is not None:
        energies = [w.energy_per_call_j for w in windows if w.energy_per_call_j is not None]
        energy_per_call_j = statistics.median(energies)
        energy_spread = relative_spread(energies)
        total_time_s = sum(w.time_s for w in windows)
        power_w = sum(w.energy_j or 0.0 for w in windows) / total_time_s if total_time_s > 0 else None
    if sampler is not None:
        sm_clock_mhz = sampler.mean_sm_clock_mhz()
        samples = tuple(sampler.samples)
    return EnergyMeasurement(
        time_per_call_s=statistics.median(times),
        time_spread_rel=relative_spread(times),
        energy_per_call_j=energy_per_call_j,
        energy_spread_rel=energy_spread,
        power_w=power_w,
        sm_clock_mhz=sm_clock_mhz,
        calls_per_window=calls_per_window,
        n_windows=len(windows),
        min_window_s=min_window_s,
        windows=tuple(windows),
        samples=samples,
    )


def idle_power_w(
    gpu: GPU, seconds: float = 0.5, *, clock: Clock = time.perf_counter, sleep: Callable[[float], Any] = time.sleep
) -> float | None:
    """Average power of an idle GPU over one energy window of `seconds` (the power model's constant);
    None when the GPU cannot say (no energy counter, a driver error)."""
    try:
        return measure_energy(lambda: sleep(seconds), gpu, min_window_s=seconds, repeats=1, warmup=0,
                              calls_per_window=1, clock=clock).power_w
    except (PowerError, MeasurementError):
        return None


def _check_clock_moves(calls: int, elapsed_s: float) -> None:
    if elapsed_s <= 0 and calls >= _STILL_CLOCK_CALLS:
        raise MeasurementError(
            f"Expected fn to take measurable time, Received: {elapsed_s} s for {calls} calls "
            "(is the clock moving?)"
        )


def _calls_for(target_s: float, per_call_s: float, ceiling_hint: int) -> int:
    """Calls expected to fill target_s, with 5% margin; bounded when a call takes ~no time."""
    if per_call_s <= 0:
        return max(1, ceiling_hint) * 10
    return max(1, math.ceil(target_s / per_call_s * 1.05))


def _calibrate(
    run_batch: Callable[[int], None], sync: Callable[[], Any], clock: Clock, min_window_s: float
) -> int:
    """Calls per window: grow a batch until it lasts a tenth of a window, then scale up.

    A short batch grows to the calls its per-call time says fill that tenth (2x to 10x): a 14 ms model
    call needs 1 + 3 calls for a 0.3 s window, not 1 + 10 (growing tenfold spent 0.1 s per measurement).
    """
    calls = 1
    target_s = min_window_s / 10
    while True:
        sync()
        start_s = clock()
        run_batch(calls)
        sync()
        elapsed_s = clock() - start_s
        if elapsed_s >= target_s:
            return _calls_for(min_window_s, elapsed_s / calls, calls)
        _check_clock_moves(calls, elapsed_s)
        calls = min(calls * 10, max(calls * 2, _calls_for(target_s, elapsed_s / calls, calls)))
