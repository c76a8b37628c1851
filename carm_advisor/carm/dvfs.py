"""Time, power and energy of work at a given SM clock, the energy-optimal clock, and the
energy-efficiency CARM: pure math on a CARM and a PowerModel.

Clock scaling (DVFS): compute roofs and on-chip slopes (shared, L1, L2) scale with the SM clock, the
HBM slope with the memory clock; the roofs of a profile hold at its reference clock f0 (the power
model's voltage curve f0, else the profile's maximum SM clock). A kernel runs at its CARM operating
point (the roofs' time); its power is the power model at that point's rates, which is what a kernel
that keeps its bounding unit busy draws (VGG16's convolutions on the H200 draw 600-780 W at 13-45% of
the BF16 roof). Above the power limit the GPU lowers its clock until P = limit: the clock each kernel
sustains under the cap. predict_at_time evaluates the same model at a measured time instead (the
rates a kernel actually ran at). Every figure here is a prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from carm_advisor.carm.power_model import DEFAULT_DATA, PowerModel
from carm_advisor.carm.roofline import CARM
from carm_advisor.errors import ProfileError


@dataclass(frozen=True)
class Work:
    """A piece of work on the CARM: FLOPs on a compute path, bytes from a memory level."""

    flops: float
    bytes: float
    path: str
    level: str
    data: str = DEFAULT_DATA


@dataclass(frozen=True)
class ClockPrediction:
    """Predicted time, power and energy of work when asked to run at `requested_sm_clock_mhz`."""

    requested_sm_clock_mhz: float
    sm_clock_mhz: float          # the clock it sustains (lower than requested when the power limit binds)
    time_s: float
    power_w: float
    energy_j: float
    power_capped: bool


def reference_clock_mhz(pm: PowerModel, fallback_mhz: float | None = None) -> float:
    if pm.voltage is not None:
        return pm.voltage.f0_mhz
    if fallback_mhz:
        return float(fallback_mhz)
    raise ProfileError("predicting at a clock needs the reference SM clock of the roofs (power model dvfs.f0_mhz "
                       "or the profile's sm_clock_max_mhz)")


def _uncapped(carm: CARM, pm: PowerModel, w: Work, f_mhz: float, f0_mhz: float, memory_scale: float):
    scale = f_mhz / f0_mhz
    peak = carm.peak_flops_per_s[w.path] * scale
    bandwidth = carm.bandwidth_bytes_per_s[w.level] * (memory_scale if w.level == "hbm" else scale)
    time_s = max(w.flops / peak if w.flops else 0.0, w.bytes / bandwidth if w.bytes else 0.0)
    if time_s <= 0:
        return 0.0, pm.constant_w
    power_w = pm.power_w(w.flops / time_s, w.bytes / time_s, w.path, w.level, sm_clock_mhz=f_mhz, data=w.data)
    return time_s, power_w


def predict_at_clock(carm: CARM, pm: PowerModel, work: Work, sm_clock_mhz: float,
                     reference_sm_clock_mhz: float | None = None, memory_clock_scale: float = 1.0) -> ClockPrediction:
    """Time, power and energy of `work` asked to run at `sm_clock_mhz` (a locked or default clock).

    memory_clock_scale: memory clock / the one the HBM slope was measured at (1: unchanged). Where the
    power the work would draw exceeds the power limit, the sustained clock is found by bisection
    (power rises with the clock), and time and energy are those at that clock.
    """
    f0 = reference_clock_mhz(pm, reference_sm_clock_mhz)
    if not sm_clock_mhz > 0:
        raise ProfileError(f"an SM clock must be > 0 MHz, received: {sm_clock_mhz!r}")
    f = float(sm_clock_mhz)
    time_s, power_w = _uncapped(carm, pm, work, f, f0, memory_clock_scale)
    capped = pm.power_limit_w is not None and power_w > pm.power_limit_w
    if capped:
        lo, hi = 1.0, f
        for _ in range(32):   # < 1e-6 MHz: far below any clock step
            mid = 0.5 * (lo + hi)
            if _uncapped(carm, pm, work, mid, f0, memory_clock_scale)[1] > pm.power_limit_w:
                hi = mid
            else:
                lo = mid
        f = lo
        time_s, power_w = _uncapped(carm, pm, work, f, f0, memory_clock_scale)
    return ClockPrediction(float(sm_clock_mhz), f, time_s, power_w, power_w * time_s, capped)


def predict_at_time(pm: PowerModel, work: Work, time_s: float,
                    reference_sm_clock_mhz: float | None = None) -> ClockPrediction:
    """Power and energy of `work` that took `time_s` (a measured time): the power model at the rates it
    actually ran at, flops / time_s and bytes / time_s, not at its CARM operating point.

    Evaluated at the reference clock; where that power exceeds the power limit, the GPU lowers its clock
    until P = limit: the power is the limit, and the clock is the one at which the model's power at these
    rates meets it (bisection; with no voltage curve the clock stays the reference one). Where even the
    voltage curve's lowest energy per operation stays above the limit, the clock is the bisection's floor.
    """
    if not time_s > 0:
        raise ProfileError(f"a measured time must be > 0 s, received: {time_s!r}")
    f0 = reference_clock_mhz(pm, reference_sm_clock_mhz)

    def power_at(f_mhz: float) -> float:
        return pm.power_w(work.flops / time_s, work.bytes / time_s, work.path, work.level,
                          sm_clock_mhz=f_mhz, data=work.data)

    f, power_w = f0, power_at(f0)
    capped = pm.power_limit_w is not None and power_w > pm.power_limit_w
    if capped:
        if pm.voltage is not None:
            lo, hi = 1.0, f0
            for _ in range(32):
                mid = 0.5 * (lo + hi)
                if power_at(mid) > pm.power_limit_w:
                    hi = mid
                else:
                    lo = mid
            f = lo
        power_w = pm.power_limit_w
    return ClockPrediction(f0, f, time_s, power_w, power_w * time_s, capped)


def layer_power_w(carm: CARM, pm: PowerModel, work: Work, time_s: float | None = None,
                  reference_sm_clock_mhz: float | None = None) -> float:
    """Predicted board power of a layer whose call takes `time_s` (a calibrated or measured time; None:
    unknown): its busy power, the power model at its CARM operating point at the default clock with
    the power limit as a roof (what real layers draw: the unit that bounds them stays busy through the
    activity their useful FLOPs and bytes do not count), scaled by the power model's duty curve for
    short calls (or, its efficiency form, calls far from the bound time) where it has one
    (PowerModel.duty_power_w)."""
    f0 = reference_clock_mhz(pm, reference_sm_clock_mhz)
    at_roofs = predict_at_clock(carm, pm, work, f0, f0)
    return pm.duty_power_w(at_roofs.power_w, time_s, bound_time_s=at_roofs.time_s, path=work.path)


def predict_model_at_clock(carm: CARM, pm: PowerModel, works: Iterable[Work], sm_clock_mhz: float,
                           reference_sm_clock_mhz: float | None = None) -> ClockPrediction:
    """A whole model (its layers run one after another) at one requested clock: times and energies add."""
    parts = [predict_at_clock(carm, pm, w, sm_clock_mhz, reference_sm_clock_mhz) for w in works]
    time_s = sum(p.time_s for p in parts)
    energy_j = sum(p.energy_j for p in parts)
    sustained = sum(p.sm_clock_mhz * p.time_s for p in parts) / time_s if time_s else float(sm_clock_mhz)
    return ClockPrediction(float(sm_clock_mhz), sustained, time_s, energy_j / time_s if time_s else pm.constant_w,
                           energy_j, any(p.power_capped for p in parts))


@dataclass(frozen=True)
class OptimalClock:
    sm_clock_mhz: float
    at_optimum: ClockPrediction
    at_default: ClockPrediction
    energy_gain: float           # energy at the default clock / energy at the optimum (>= 1)
    slowdown: float              # time at the optimum / time at the default clock


def candidate_clocks_mhz(f0_mhz: float, lowest_fraction: float = 0.3, step_mhz: float = 15.0) -> list[float]:
    """Where a GPU's supported clock list is unknown: f0 down to 30% of it in 15 MHz steps (the H200's step)."""
    out, f = [], float(f0_mhz)
    while f >= f0_mhz * lowest_fraction:
        out.append(f)
        f -= step_mhz
    return out


def energy_optimal_sm_clock_mhz(carm: CARM, pm: PowerModel, works: Work | Sequence[Work],
                                clocks_mhz: Sequence[float] | None = None, default_clock_mhz: float | None = None,
                                reference_sm_clock_mhz: float | None = None,
                                max_slowdown: float | None = None) -> OptimalClock:
    """The SM clock (among `clocks_mhz`) that minimises predicted energy for one layer or a whole model,
    and its gain over the default clock (f0: the GPU boosts to its maximum unless the cap binds).

    max_slowdown: optionally only clocks whose time is within this factor of the default's (a latency
    budget). Labelled a prediction: on a GPU whose clocks cannot be set it is never measured.
    """
    items = [works] if isinstance(works, Work) else list(works)
    if not items:
        raise ProfileError("energy_optimal_sm_clock_mhz needs at least one piece of work")
    f0 = reference_clock_mhz(pm, reference_sm_clock_mhz)
    clocks = sorted(set(clocks_mhz or candidate_clocks_mhz(f0)), reverse=True)
    default = predict_model_at_clock(carm, pm, items, default_clock_mhz or f0, f0)
    best = None
    for f in clocks:
        p = predict_model_at_clock(carm, pm, items, f, f0)
        if max_slowdown is not None and default.time_s and p.time_s > default.time_s * max_slowdown:
            continue
        if best is None or p.energy_j < best.energy_j * (1 - 1e-12):
            best = p
    if best is None:
        best = default
    return OptimalClock(best.requested_sm_clock_mhz, best, default,
                        default.energy_j / best.energy_j if best.energy_j else 1.0,
                        best.time_s / default.time_s if default.time_s else 1.0)


# ---- the energy-efficiency CARM ------------------------------------------------------------------

def energy_efficiency_gflops_per_w(carm: CARM, pm: PowerModel, path: str, level: str, ai: float,
                                   reference_sm_clock_mhz: float | None = None) -> float:
    """GFLOP/s per W of a kernel of intensity `ai` on its roofs at the default clock (cap included)."""
    f0 = reference_clock_mhz(pm, reference_sm_clock_mhz)
    p = predict_at_clock(carm, pm, Work(flops=ai * 1e9, bytes=1e9, path=path, level=level), f0, f0)
    return (ai * 1e9 / p.time_s) / p.power_w / 1e9


def energy_ridge_ai(carm: CARM, pm: PowerModel, path: str, level: str) -> float:
    """Energy balance point (Choi, Bedard, Fowler and Vuduc, 2013): the intensity at which a kernel on
    the compute roof spends as much energy on its bytes as on its FLOPs, the constant power charged to
    the FLOPs at the roof's rate: AI_e = e_byte / (e_flop + P_const / peak). Above it, energy efficiency
    is within 2x of its ceiling; compare with the performance ridge peak / bandwidth."""
    peak = carm.peak_flops_per_s[path]
    return pm.joules_per_byte[level] / (pm.joules_per_flop[path] + pm.constant_w / peak)


def clock_advice(carm: CARM, pm: PowerModel, works: dict[str, Work], reference_sm_clock_mhz: float | None = None,
                 clocks_mhz: Sequence[float] | None = None) -> dict:
    """The predicted energy-optimal SM clock of each named piece of work and of all of them run in turn
    (a whole model at one locked clock), each with its energy gain and slowdown against the default clock."""
    def one(items) -> dict:
        best = energy_optimal_sm_clock_mhz(carm, pm, items, clocks_mhz, None, reference_sm_clock_mhz)
        return {"sm_clock_mhz": best.sm_clock_mhz, "energy_gain": best.energy_gain, "slowdown": best.slowdown,
                "default_sm_clock_mhz": best.at_default.requested_sm_clock_mhz,
                "default_sustained_sm_clock_mhz": best.at_default.sm_clock_mhz, "source": "predicted"}

    layers = {name: one(w) for name, w in works.items()}
    return {"model": one(list(works.values())) if works else None, "layers": layers,
            "voltage_curve": pm.voltage.to_dict() if pm.voltage is not None else None}


def predicted_time_energy(carm: CARM, pm: PowerModel, flops: float, bytes_: float, path: str,
                          level: str) -> tuple[float, float]:
    """(time_s, energy_j) of work at the default clock with the power limit as a roof: through the
    sustained clock where the model has a voltage curve, else by stretching the roofs' time until
    the dynamic energy fits under the limit (PowerModel.capped_time_s, clock-blind)."""
    if pm.voltage is not None:
        p = predict_at_clock(carm, pm, Work(flops, bytes_, path, level), pm.voltage.f0_mhz)
        return p.time_s, p.energy_j
    time_s = pm.capped_time_s(carm.time_s(flops, bytes_, path, level), flops, bytes_, path, level)
    return time_s, pm.energy_j(time_s, flops, bytes_, path, level)
