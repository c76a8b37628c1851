"""How long and how often a call is timed: the presets, their explicit overrides, and the energy windows
around one zero-argument call (carm_advisor.power.energy.measure_energy with the backend's own device sync).

Windows: a preset trades time against energy accuracy. NVML's energy counter moves in ~100 ms steps,
so one window's energy is uncertain by up to about 0.1 s / window (see power/energy.py); the median of
the windows damps it. Times are good to a few percent even with short windows.

| preset     | layer windows | model windows | VGG16 b64 on an H200, ~22 layers + model      |
| ---------- | ------------- | ------------- | --------------------------------------------- |
| "fast"     | 2 x 0.1 s     | 2 x 0.5 s     | ~10 s; layer energy only indicative (+-50%)   |
| "standard" | 2 x 0.25 s    | 2 x 1.0 s     | ~20-25 s; layer energy +-20% worst case, model a few % |
| "accurate" | 3 x 1.0 s     | 3 x 2.0 s     | ~80 s; layer energy a few %                   |

Explicit `min_window_s` / `repeats` override the preset's layer windows. Windows are time-based, so a
graph replay does not shorten them; torch on a GPU adds one layer-window measurement (the whole model
replayed from a graph, ~0.6 s with "standard").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from carm_advisor.errors import MeasurementError, PowerError
from carm_advisor.measure.backends import Backend, Synchronizer
from carm_advisor.measure.records import ModelMeasurement
from carm_advisor.power._base import GPU
from carm_advisor.power.energy import EnergyMeasurement, measure_energy


@dataclass(frozen=True)
class Preset:
    layer_window_s: float
    layer_repeats: int
    model_window_s: float
    model_repeats: int
    warmup: int


PRESETS: dict[str, Preset] = {
    "fast": Preset(layer_window_s=0.1, layer_repeats=2, model_window_s=0.5, model_repeats=2, warmup=2),
    "standard": Preset(layer_window_s=0.25, layer_repeats=2, model_window_s=1.0, model_repeats=2, warmup=3),
    "accurate": Preset(layer_window_s=1.0, layer_repeats=3, model_window_s=2.0, model_repeats=3, warmup=3),
}


class Windows(TypedDict, total=False):
    """The window keywords every measure_* function takes: a preset and explicit overrides of it."""

    preset: str                  # "fast" | "standard" | "accurate" (PRESETS); default "standard"
    min_window_s: float | None   # the layer windows (measure_model: the whole-model windows)
    repeats: int | None
    warmup: int | None


class RunWindows(Windows, total=False):
    model_min_window_s: float | None   # measure_run's whole-model windows
    model_repeats: int | None


@dataclass(frozen=True)
class MeasureOptions:
    """The windows of one measurement: a preset's, with any explicit override, resolved once."""

    preset: str
    layer_window_s: float
    layer_repeats: int
    model_window_s: float
    model_repeats: int
    warmup: int

    @classmethod
    def resolve(cls, preset: str = "standard", *, min_window_s: float | None = None, repeats: int | None = None,
                warmup: int | None = None, model_min_window_s: float | None = None,
                model_repeats: int | None = None, scope: str = "layer") -> MeasureOptions:
        """scope="model": min_window_s and repeats set the whole-model windows (measure_model's meaning)."""
        if scope == "model":
            model_min_window_s, model_repeats, min_window_s, repeats = min_window_s, repeats, None, None
        try:
            p = PRESETS[preset]
        except KeyError:
            raise MeasurementError(f"Expected preset in {sorted(PRESETS)}, Received: preset={preset!r}") from None

        def given(value, default):
            return default if value is None else value

        return cls(preset, given(min_window_s, p.layer_window_s), given(repeats, p.layer_repeats),
                   given(model_min_window_s, p.model_window_s), given(model_repeats, p.model_repeats),
                   given(warmup, p.warmup))


@contextlib.contextmanager
def expecting(expected: str):
    """One line naming what was expected to run when a backend raises; our own errors pass unchanged."""
    try:
        yield
    except (MeasurementError, PowerError):
        raise
    except Exception as exc:  # backends raise anything
        raise MeasurementError(f"Expected {expected}; Received {type(exc).__name__}: {exc}") from exc


def measure_calls(fn: Callable[[], Any], gpu: GPU | None, framework: Backend, *, min_window_s: float, repeats: int,
                  warmup: int, inference: bool) -> EnergyMeasurement:
    """Windows of back-to-back calls of fn, each window ended by the framework's sync on fn's last outputs;
    inference: under the framework's inference context (torch: no autograd)."""
    syncer = Synchronizer(framework)
    tracked = syncer.track(fn)
    context = framework.inference_context() if inference else contextlib.nullcontext()
    with context:
        return measure_energy(tracked, gpu, min_window_s=min_window_s, repeats=repeats, sync=syncer, warmup=warmup)


def to_model_measurement(m: EnergyMeasurement, execution: str) -> ModelMeasurement:
    return ModelMeasurement(
        time_s=m.time_per_call_s,
        time_spread=m.time_spread_rel,
        energy_j=m.energy_per_call_j,
        power_w=m.power_w,
        sm_clock_mhz=m.sm_clock_mhz,
        repeats=m.n_windows,
        execution=execution,
    )


def back_to_back_record(m: EnergyMeasurement, calls_per_dispatch: int) -> dict[str, Any]:
    """LayerMeasurement.back_to_back from windows of a program running the layer calls_per_dispatch times:
    time and energy per LAYER call, the window's power and clock."""
    k = calls_per_dispatch
    return {"time_s": m.time_per_call_s / k, "time_spread": m.time_spread_rel,
            "energy_j": m.energy_per_call_j / k if m.energy_per_call_j is not None else None,
            "power_w": m.power_w, "sm_clock_mhz": m.sm_clock_mhz, "calls_per_dispatch": k,
            "repeats": m.n_windows, "execution": "jit_back_to_back"}


def progress_bar(enabled: bool):
    """A transient rich progress bar ("measuring <layer>"); disabled: a no-op with the same interface."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]measuring[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not enabled,
    )
