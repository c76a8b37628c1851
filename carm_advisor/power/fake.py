"""A deterministic GPU for tests and CPU machines: settable or replayed power, virtual time.

Energy is the exact integral of a piecewise-constant power over time (sample-and-hold between
breakpoints), so a test can hand-compute every joule. Time is virtual by default (`advance()` moves
it); pass `clock=time.perf_counter` to integrate over real time instead.
`FakeGPU.from_trace()` replays (t_s, power_w, sm_clock_mhz) samples recorded on a real GPU, the way
zeus tests its optimisers on CPU.
"""

from __future__ import annotations

import bisect
import csv
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carm_advisor.errors import MeasurementError, NoPermissionError, PowerError
from carm_advisor.power._base import GPU

# The H200 of the test machine (shared/H200_FACTS.md): SM 345-1980 MHz in 110 steps of 15 MHz.
H200_SM_CLOCKS_MHZ: tuple[float, ...] = tuple(float(c) for c in range(1980, 344, -15))


@dataclass(frozen=True)
class TraceSample:
    """One recorded reading. Units: s, W, MHz."""

    t_s: float
    power_w: float
    sm_clock_mhz: float


class _StepFunction:
    """A value held constant from each breakpoint to the next; integrable exactly."""

    def __init__(self, t0_s: float, value: float) -> None:
        self.times_s = [t0_s]
        self.values = [value]
        self._integral = [0.0]  # integral from times_s[0] up to each breakpoint

    def at(self, t_s: float) -> float:
        i = max(bisect.bisect_right(self.times_s, t_s) - 1, 0)
        return self.values[i]

    def integral_to(self, t_s: float) -> float:
        if t_s <= self.times_s[0]:
            return 0.0
        i = bisect.bisect_right(self.times_s, t_s) - 1
        return self._integral[i] + self.values[i] * (t_s - self.times_s[i])

    def set_from(self, t_s: float, value: float) -> None:
        """value from t_s on; whatever was scheduled after t_s (a replayed trace) is dropped."""
        keep = bisect.bisect_left(self.times_s, t_s)
        if keep == 0:  # replaces the very first breakpoint
            self.times_s, self.values, self._integral = [t_s], [value], [0.0]
            return
        integral_s = self.integral_to(t_s)
        del self.times_s[keep:], self.values[keep:], self._integral[keep:]
        self.times_s.append(t_s)
        self.values.append(value)
        self._integral.append(integral_s)

    def append(self, t_s: float, value: float) -> None:
        """Add a later breakpoint (trace loading; t_s must not go back)."""
        self._integral.append(self.integral_to(t_s))
        self.times_s.append(t_s)
        self.values.append(value)


class FakeGPU(GPU):
    """A `GPU` whose every reading a test controls. Thread-safe (a sampler thread may read it).

    Setting calls that took effect are recorded in `calls` as (method, args); every setting call,
    refused or not, in `attempts`. `permission=False` makes the setters raise NoPermissionError and
    change nothing, as NVML does for a non-root user.
    `energy_update_period_s` > 0 makes the energy counter advance in steps, as NVML's does.
    """

    def __init__(
        self,
        *,
        name: str = "NVIDIA H200 (fake)",
        uuid: str = "GPU-00000000-0000-0000-0000-00000000fake",
        driver_version: str = "580.159.04-fake",
        power_w: float = 120.0,
        sm_clock_mhz: float = 1980.0,
        memory_clock_mhz: float = 3201.0,
        supported_sm_clocks_mhz: Iterable[float] = H200_SM_CLOCKS_MHZ,
        max_sm_clock_mhz: float | None = None,
        power_limit_w: float = 700.0,
        power_limit_range_w: tuple[float, float] = (200.0, 700.0),
        temperature_c: float = 40.0,
        permission: bool = True,
        clock: Callable[[], float] | None = None,
        start_energy_mj: int = 0,
        energy_update_period_s: float = 0.0,
    ) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self._virtual_now_s = 0.0
        t0_s = self.now_s()
        self._t0_s = t0_s
        self._name, self._uuid, self._driver_version = name, uuid, driver_version
        self._power = _StepFunction(t0_s, float(power_w))
        self._sm_clock = _StepFunction(t0_s, float(sm_clock_mhz))
        self._memory_clock_mhz = float(memory_clock_mhz)
        self._supported_mhz = sorted((float(c) for c in supported_sm_clocks_mhz), reverse=True)
        if not self._supported_mhz:
            raise PowerError("Expected at least one supported SM clock, Received: an empty list")
        self._max_sm_clock_mhz = (
            float(max_sm_clock_mhz) if max_sm_clock_mhz is not None else self._supported_mhz[0]
        )
        self._power_limit_w = float(power_limit_w)
        self._power_limit_range_w = (float(power_limit_range_w[0]), float(power_limit_range_w[1]))
        self._temperature_c = float(temperature_c)
        self._start_energy_mj = int(start_energy_mj)
        self._energy_update_period_s = float(energy_update_period_s)
        self.permission = permission
        self.locked_sm_clocks_mhz: tuple[float, float] | None = None
        self.calls: list[tuple[str, tuple[float, ...]]] = []
        self.attempts: list[tuple[str, tuple[float, ...]]] = []

    # --- replay -------------------------------------------------------------------------------

    @classmethod
    def from_trace(
        cls,
        samples: Iterable[TraceSample | Sequence[float] | Mapping[str, float]],
        **kwargs: Any,
    ) -> FakeGPU:
        """Replay recorded samples: (t_s, power_w, sm_clock_mhz) tuples, mappings or TraceSamples.

        Time is rebased so the first sample is at t = 0 (virtual). Each reading holds until the next
        sample; after the last one it holds forever.
        """
        rows = sorted((_as_sample(s) for s in samples), key=lambda s: s.t_s)
        if not rows:
            raise MeasurementError("Expected at least one trace sample, Received: none")
        if "clock" in kwargs:
            raise MeasurementError(
                "Expected a replayed trace to run on virtual time, Received: clock="
            )
        first = rows[0]
        gpu = cls(power_w=first.power_w, sm_clock_mhz=first.sm_clock_mhz, **kwargs)
        for row in rows[1:]:
            t_s = row.t_s - first.t_s
            gpu._power.append(t_s, row.power_w)
            gpu._sm_clock.append(t_s, row.sm_clock_mhz)
        return gpu

    @classmethod
    def from_csv(cls, path: str | Path, **kwargs: Any) -> FakeGPU:
        """Replay a CSV with the columns t_s, power_w, sm_clock_mhz (a header row names them)."""
        try:
            with open(path, newline="") as f:
                rows = [
                    TraceSample(float(r["t_s"]), float(r["power_w"]), float(r["sm_clock_mhz"]))
                    for r in csv.DictReader(f)
                ]
        except (OSError, KeyError, ValueError, TypeError) as err:
            raise MeasurementError(
                f"Expected a CSV with columns t_s,power_w,sm_clock_mhz, Received: {path} ({err})"
            ) from err
        return cls.from_trace(rows, **kwargs)

    # --- time and test controls ---------------------------------------------------------------

    def now_s(self) -> float:
        """The fake's time: virtual seconds, or the real clock it was given. Units: s."""
        return self._clock() if self._clock is not None else self._virtual_now_s

    def advance(self, seconds: float) -> None:
        """Move virtual time forward (the GPU 'runs' for `seconds`)."""
        if self._clock is not None:
            raise PowerError(
                "Expected a FakeGPU on virtual time for advance(), Received: a real clock"
            )
        if not seconds >= 0:
            raise PowerError(f"Expected seconds >= 0, Received: seconds={seconds}")
        with self._lock:
            self._virtual_now_s += seconds

    def set_power_w(self, watts: float) -> None:
        """Draw `watts` from now on (drops the rest of a replayed trace)."""
        with self._lock:
            self._power.set_from(self.now_s(), float(watts))

    def set_sm_clock_mhz(self, mhz: float) -> None:
        """Run at `mhz` from now on, unless locked clocks say otherwise."""
        with self._lock:
            self._sm_clock.set_from(self.now_s(), float(mhz))

    def set_temperature_c(self, celsius: float) -> None:
        self._temperature_c = float(celsius)

    def energy_j_between(self, start_s: float, end_s: float) -> float:
        """Exact energy drawn in [start_s, end_s]: the hand-computable reference. Units: J."""
        with self._lock:
            return self._power.integral_to(end_s) - self._power.integral_to(start_s)

    # --- GPU ----------------------------------------------------------------------------------

    def name(self) -> str:
        return self._name

    def uuid(self) -> str:
        return self._uuid

    def driver_version(self) -> str:
        return self._driver_version

    def total_energy_mj(self) -> int:
        with self._lock:
            t_s = self.now_s()
            if self._energy_update_period_s > 0:
                # NVML's counter advances in steps: report the energy at the last step.
                elapsed_s = t_s - self._t0_s
                steps = math.floor(elapsed_s / self._energy_update_period_s)
                t_s = self._t0_s + steps * self._energy_update_period_s
            return self._start_energy_mj + int(self._power.integral_to(t_s) * 1000.0)

    def power_w(self) -> float:
        with self._lock:
            return self._power.at(self.now_s())

    def sm_clock_mhz(self) -> float:
        with self._lock:
            mhz = self._sm_clock.at(self.now_s())
            if self.locked_sm_clocks_mhz is not None:
                low, high = self.locked_sm_clocks_mhz
                mhz = min(max(mhz, low), high)
            return mhz

    def memory_clock_mhz(self) -> float:
        return self._memory_clock_mhz

    def max_sm_clock_mhz(self) -> float:
        return self._max_sm_clock_mhz

    def supported_sm_clocks_mhz(self) -> list[float]:
        return list(self._supported_mhz)

    def power_limit_w(self) -> float:
        return self._power_limit_w

    def power_management_limit_w(self) -> float:
        return self._power_limit_w

    def power_limit_range_w(self) -> tuple[float, float]:
        return self._power_limit_range_w

    def temperature_c(self) -> float:
        return self._temperature_c

    def _check_permission(self, method: str, args: tuple[float, ...]) -> None:
        self.attempts.append((method, args))
        if not self.permission:
            raise NoPermissionError(f"{method} on {self._name} needs root or admin rights (fake NVML)")

    def lock_sm_clocks_mhz(self, min_mhz: float, max_mhz: float) -> None:
        with self._lock:
            self._check_permission("lock_sm_clocks_mhz", (min_mhz, max_mhz))
            low, high = self._supported_mhz[-1], self._supported_mhz[0]
            if not low <= min_mhz <= max_mhz <= high:
                raise PowerError(
                    f"Expected {low:g} <= min_mhz <= max_mhz <= {high:g}, "
                    f"Received: min_mhz={min_mhz}, max_mhz={max_mhz}"
                )
            self.locked_sm_clocks_mhz = (float(min_mhz), float(max_mhz))
            self.calls.append(("lock_sm_clocks_mhz", (min_mhz, max_mhz)))

    def reset_sm_clocks(self) -> None:
        with self._lock:
            self._check_permission("reset_sm_clocks", ())
            self.locked_sm_clocks_mhz = None
            self.calls.append(("reset_sm_clocks", ()))

    def set_power_limit_w(self, watts: float) -> None:
        with self._lock:
            self._check_permission("set_power_limit_w", (watts,))
            low, high = self._power_limit_range_w
            if not low <= watts <= high:
                raise PowerError(
                    f"Expected a power limit in [{low:g}, {high:g}] W, Received: watts={watts}"
                )
            self._power_limit_w = float(watts)
            self.calls.append(("set_power_limit_w", (watts,)))


def _as_sample(sample: TraceSample | Sequence[float] | Mapping[str, float]) -> TraceSample:
    if isinstance(sample, TraceSample):
        return sample
    try:
        if isinstance(sample, Mapping):
            return TraceSample(
                float(sample["t_s"]), float(sample["power_w"]), float(sample["sm_clock_mhz"])
            )
        t_s, power_w, sm_clock_mhz = sample
        return TraceSample(float(t_s), float(power_w), float(sm_clock_mhz))
    except (KeyError, ValueError, TypeError) as err:
        raise MeasurementError(
            f"Expected a trace sample (t_s, power_w, sm_clock_mhz), Received: {sample!r}"
        ) from err
