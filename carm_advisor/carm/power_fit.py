"""Fit the power model over a whole benchmark sweep: pure math on plain records (no hardware import).

The model, for a kernel running FLOP rate F on compute path p and byte rate B at memory level m at
SM clock f:

    P = P_const + s(f) * (e_flop[p] * d[p, data] * F + e_byte[m] * B)      (m on chip)
    P = P_const + s(f) * e_flop[p] * d[p, data] * F + e_byte[hbm] * B       (HBM)

- e_flop, e_byte: dynamic energy per FLOP and per byte at the reference (maximum) SM clock f0, random
  operands; d[p, "zero"]: the data factor of all-zero operands (Tensor Cores toggle far fewer bits),
  d[p, "random"] = 1 by definition; real layers are taken to feed random-like data.
- s(f) = (V(f) / V(f0))^2: energy per operation scales with the square of the core voltage
  (E = C V^2). ASSUMPTION (no voltage reading exists through NVML): V is flat below a knee clock and
  linear in f above it, so v(f) = V(f)/V(f0) = v_knee + (1 - v_knee) * clip((f - f_knee)/(f0 - f_knee), 0, 1).
  HBM energy per byte does not scale with the SM voltage (the memory clock is fixed).
- P_const: static plus uncore power, taken as clock-independent (an assumption too).

Every term is linear in (P_const, e_flop, e_byte, d) for given (f_knee, v_knee), so the energies are a
non-negative least-squares fit over every trustworthy record at once (`nnls` below, the Lawson-Hanson
active-set method that scipy.optimize.nnls also implements) and the two voltage parameters
are a grid search around it. Where the records cannot separate P_const from the energies (every record
exercises one path or one level only, as roof benchmarks do), P_const is fixed to the measured idle
power and the fit says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.carm.dvfs import Work, predict_at_clock
from carm_advisor.carm.power_model import DUTY_VARIABLES, OUTPUT_SIZE_VARIABLES, DutyCurve, PowerModel, VoltageCurve
from carm_advisor.errors import ProfileError

# A power reading averaged over less than this is dominated by NVML's ~100 ms update steps.
MIN_WINDOW_S = 0.9
DATA_KINDS = ("random", "zero")


@dataclass(frozen=True)
class PowerRecord:
    """One measured kernel (or layer): rates, board power, SM clock and operand data."""

    name: str
    path: str | None          # compute path of its FLOPs (None: no FLOPs)
    level: str | None         # memory level of its bytes (None: no bytes)
    flops_per_s: float
    bytes_per_s: float
    power_w: float
    sm_clock_mhz: float | None
    data: str = "random"      # "random" | "zero"
    window_s: float | None = None


@dataclass
class PowerFit:
    """What `fit_power_sweep` found: the parameters, how well they explain the records, and how."""

    constant_w: float
    joules_per_flop: dict[str, float]
    joules_per_byte: dict[str, float]
    data_factor: dict[str, dict[str, float]]
    voltage: VoltageCurve
    quality: dict[str, Any]
    constant_source: str                      # "fitted" | "idle power"
    records: list[PowerRecord] = field(default_factory=list)

    def predict_w(self, r: PowerRecord) -> float:
        return self.constant_w + _dynamic_w(r, self.joules_per_flop, self.joules_per_byte, self.data_factor, self.voltage)

    def to_dict(self) -> dict[str, Any]:
        """The power_model keys of a profile (schema carm-advisor/profile/1, optional keys included)."""
        return {"constant_w": self.constant_w, "joules_per_flop": self.joules_per_flop,
                "joules_per_byte": self.joules_per_byte, "data_factor": self.data_factor,
                "default_data": "random", "dvfs": self.voltage.to_dict(), "fit": self.quality}


# ---- non-negative least squares --------------------------------------------------------------------

def nnls(a, b, max_iter: int | None = None):
    """min ||a x - b|| subject to x >= 0 (Lawson and Hanson, 1974, ch. 23), in numpy.

    The same problem scipy.optimize.nnls solves (tests compare the two where SciPy is installed); carm/
    stays on numpy alone, and SciPy is no dependency of the package. Returns (x, residual norm).
    """
    import numpy as np

    a, b = np.asarray(a, float), np.asarray(b, float)
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, bool)
    w = a.T @ (b - a @ x)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(a.shape)
    for _ in range(max_iter or 3 * n + 10):
        if passive.all() or (w[~passive] <= tol).all():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:   # solve on the passive set; step back while a coefficient would go negative
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                x = z
                break
            neg = passive & (z <= tol)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = a.T @ (b - a @ x)
    return x, float(np.linalg.norm(a @ x - b))


# ---- the sweep fit -------------------------------------------------------------------------------

def trustworthy(records: Iterable[PowerRecord], min_window_s: float = MIN_WINDOW_S,
                power_limit_w: float | None = None) -> list[PowerRecord]:
    """Records whose power window is long enough and whose power is physical (> 0, within 15% of the limit)."""
    out = []
    for r in records:
        if r.power_w is None or not math.isfinite(r.power_w) or r.power_w <= 0:
            continue
        if r.window_s is not None and r.window_s < min_window_s:
            continue
        if power_limit_w and r.power_w > 1.15 * power_limit_w:
            continue
        if r.data not in DATA_KINDS:
            raise ProfileError(f"record {r.name}: data must be one of {DATA_KINDS}, received: {r.data!r}")
        out.append(r)
    return out


def _columns(records: list[PowerRecord]) -> tuple[list[tuple], list[str], list[str]]:
    paths = sorted({r.path for r in records if r.path and r.flops_per_s > 0})
    levels = sorted({r.level for r in records if r.level and r.bytes_per_s > 0})
    cols = [("flop", p, d) for p in paths for d in DATA_KINDS if any(
        r.path == p and r.data == d and r.flops_per_s > 0 for r in records)]
    cols += [("byte", m, None) for m in levels]
    return cols, paths, levels


def _design(records: list[PowerRecord], cols: list[tuple], voltage: VoltageCurve):
    import numpy as np

    a = np.zeros((len(records), len(cols)))
    for i, r in enumerate(records):
        s = voltage.energy_scale(r.sm_clock_mhz)
        for j, (kind, key, data) in enumerate(cols):
            if kind == "flop" and r.path == key and r.data == data:
                a[i, j] = s * r.flops_per_s * 1e-12          # columns in W per TFLOP/s: well conditioned
            elif kind == "byte" and r.level == key:
                a[i, j] = (1.0 if key == "hbm" else s) * r.bytes_per_s * 1e-12
    return a


def _constant_identifiable(a) -> bool:
    """Can an intercept be told apart from the energies? Only through records that mix a path with a
    level (the mixed-intensity sweep): a roof benchmark exercises one column, and several rates of one
    column come from different instructions (mma.sync vs wgmma) whose energies differ, not from one
    line with an intercept. Needs >= 3 mixing records and a column of ones outside the others' span."""
    import numpy as np

    mixing = int(np.sum(np.count_nonzero(a, axis=1) >= 2))
    ones = np.ones((a.shape[0], 1))
    return mixing >= 3 and np.linalg.matrix_rank(np.hstack([ones, a])) > np.linalg.matrix_rank(a)


def _solve(records, cols, voltage, idle_w, fit_constant):
    import numpy as np

    a = _design(records, cols, voltage)
    p = np.array([r.power_w for r in records])
    if fit_constant and idle_w is not None:
        # A GPU running a kernel draws at least its idle power: the intercept is idle + an excess >= 0
        # (free, the least squares put it at 0 W on the H200 sweep and let the energies absorb it).
        x, _ = nnls(np.hstack([np.ones((len(records), 1)), a]), p - float(idle_w))
        const, x = float(idle_w) + float(x[0]), x[1:]
    elif fit_constant:
        x, _ = nnls(np.hstack([np.ones((len(records), 1)), a]), p)
        const, x = float(x[0]), x[1:]
    else:
        const = float(idle_w)
        x, _ = nnls(a, p - const)
    sse = float(np.sum((a @ x + const - p) ** 2))
    return const, x, sse


def fit_power_sweep(records: Iterable[PowerRecord], idle_w: float | None, f0_mhz: float,
                    power_limit_w: float | None = None, min_window_s: float = MIN_WINDOW_S,
                    voltage: VoltageCurve | None = None) -> PowerFit:
    """Least-squares power model over every trustworthy record (see the module docstring).

    idle_w: measured idle power, used as P_const where the records cannot separate it. f0_mhz: the
    reference (maximum) SM clock. voltage: a given curve, or None to choose f_knee and v_knee by grid
    search (kept as "fitted" only when the throttled records span enough clocks to tell, else the prior).
    """
    rows = trustworthy(records, min_window_s, power_limit_w)
    if len(rows) < 2:
        raise ProfileError(f"a power fit needs at least 2 records with a >= {min_window_s} s power window, "
                           f"received: {len(rows)}")
    cols, paths, levels = _columns(rows)
    fit_constant = _constant_identifiable(_design(rows, cols, VoltageCurve.default(f0_mhz)))
    if not fit_constant and idle_w is None:
        raise ProfileError("the records cannot separate the constant power from the energies and no idle power "
                           "was measured to fix it")
    if voltage is None:
        voltage = _choose_voltage(rows, cols, idle_w, fit_constant, f0_mhz)
    const, x, sse = _solve(rows, cols, voltage, idle_w, fit_constant)
    e_flop_by: dict[tuple, float] = {}
    e_byte: dict[str, float] = {}
    for (kind, key, data), value in zip(cols, x):
        if kind == "flop":
            e_flop_by[(key, data)] = float(value) * 1e-12
        else:
            e_byte[key] = float(value) * 1e-12
    e_flop, factor = _data_factors(e_flop_by, paths)
    fit = PowerFit(const, e_flop, e_byte, factor, voltage, {}, "fitted" if fit_constant else "idle power", rows)
    fit.quality = fit_quality([r.power_w for r in rows], [fit.predict_w(r) for r in rows])
    fit.quality.update({"records": len(rows), "parameters": len(cols) + int(fit_constant),
                        "constant": ("fitted (intercept, at least the measured idle power)" if idle_w is not None
                                     else "fitted (intercept)") if fit_constant else "fixed to the measured idle power "
                        "(no record mixes paths and levels, so an intercept is not identifiable)",
                        "solver": "non-negative least squares (Lawson-Hanson active set, numpy)", "min_window_s": min_window_s,
                        "sse_w2": sse})
    if power_limit_w:   # the clock each kernel sustained at the power limit, as recorded
        fit.quality["sustained_under_cap"] = [
            {"name": r.name, "sm_clock_mhz": r.sm_clock_mhz, "power_w": r.power_w, "data": r.data}
            for r in rows if r.power_w >= 0.95 * power_limit_w]
    return fit


def _data_factors(e_by: dict[tuple, float], paths: list[str]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Energy per FLOP with random data per path, and the zero-data factor e_zero / e_random.

    A path measured only on zeros gets the median factor of the paths measured both ways, so its
    random-data energy is e_zero / factor; a path measured only on random data has no zero factor
    (PowerModel.data_multiplier then answers 1)."""
    both = [e_by[(p, "zero")] / e_by[(p, "random")] for p in paths
            if e_by.get((p, "random")) and (p, "zero") in e_by]
    median_zero = statistics.median(both) if both else 1.0
    e_flop, factor = {}, {}
    for p in paths:
        rnd, zero = e_by.get((p, "random")), e_by.get((p, "zero"))
        if rnd:
            e_flop[p] = rnd
            factor[p] = {"random": 1.0, **({"zero": zero / rnd} if zero is not None else {})}
        elif zero is not None:
            e_flop[p] = zero / median_zero if median_zero > 0 else zero
            factor[p] = {"random": 1.0, "zero": median_zero}
    return e_flop, factor


def _choose_voltage(rows, cols, idle_w, fit_constant, f0_mhz: float) -> VoltageCurve:
    """Grid search of (f_knee, v_knee); the prior unless the fitted curve explains clearly more."""
    import numpy as np

    prior = VoltageCurve.default(f0_mhz)
    clocks = [r.sm_clock_mhz for r in rows if r.sm_clock_mhz]
    # Below ~10% of f0 the clocks seen give no leverage on a voltage curve: keep the prior.
    if not clocks or (f0_mhz - min(clocks)) < 0.1 * f0_mhz:
        return prior
    sse_prior = _solve(rows, cols, prior, idle_w, fit_constant)[2]
    best = (sse_prior, prior)
    for knee in np.linspace(0.3, 0.9, 13) * f0_mhz:
        for v_knee in np.linspace(0.5, 1.0, 11):
            curve = VoltageCurve(f0_mhz, float(knee), float(v_knee), "fitted")
            sse = _solve(rows, cols, curve, idle_w, fit_constant)[2]
            if sse < best[0]:
                best = (sse, curve)
    # Keep the fitted curve only where it beats the prior by a margin the noise alone would not give.
    return best[1] if best[0] < 0.8 * sse_prior else prior


def fit_quality(measured: list[float], predicted: list[float]) -> dict[str, Any]:
    """R^2, median and max absolute relative error, n."""
    import numpy as np

    m, p = np.asarray(measured, float), np.asarray(predicted, float)
    rel = np.abs(p - m) / m
    ss_tot = float(np.sum((m - m.mean()) ** 2))
    return {"n": int(len(m)), "r2": (1 - float(np.sum((p - m) ** 2)) / ss_tot) if ss_tot > 0 else None,
            "median_abs_rel_err": float(np.median(rel)), "max_abs_rel_err": float(np.max(rel))}


def _dynamic_w(r: PowerRecord, e_flop, e_byte, factor, voltage: VoltageCurve) -> float:
    s = voltage.energy_scale(r.sm_clock_mhz)
    out = 0.0
    if r.path and r.flops_per_s > 0 and r.path in e_flop:
        out += s * e_flop[r.path] * factor.get(r.path, {}).get(r.data, 1.0) * r.flops_per_s
    if r.level and r.bytes_per_s > 0 and r.level in e_byte:
        out += (1.0 if r.level == "hbm" else s) * e_byte[r.level] * r.bytes_per_s
    return out


# ---- adapters from recorded runs -----------------------------------------------------------------

def records_from_benchmarks(rows: Iterable[dict[str, Any]]) -> list[PowerRecord]:
    """PowerRecords from the `benchmarks` rows of a ceilings run or measured profile
    (measure.ceilings.BenchmarkRun.to_dict()); the window length is the sum of its energy windows."""
    out = []
    for b in rows:
        if b.get("power_w") is None:
            continue
        kind = b.get("kind")
        windows = (b.get("extra") or {}).get("window_s") or []
        flops, bytes_ = float(b.get("flops_per_s") or 0.0), float(b.get("bytes_per_s") or 0.0)
        if kind == "memory":      # a memory row's key is its level; its FLOPs (address arithmetic) are nil
            path, level, flops = None, b["key"], 0.0
        elif kind == "compute":
            path, level, bytes_ = b["key"], None, 0.0
        else:
            path, level = b["key"], b.get("memory_key") or None
        out.append(PowerRecord(
            name=b["name"], path=path, level=level, flops_per_s=flops, bytes_per_s=bytes_,
            power_w=float(b["power_w"]), sm_clock_mhz=b.get("sm_clock_mhz"),
            data=b.get("data") or _operand_data(b),
            window_s=sum(windows) if windows else None))
    return out


def _operand_data(b: dict[str, Any]) -> str:
    """What the Tensor Cores of a benchmark row multiply: the *_zero variants and the mixed BF16 wgmma
    sweep (kernels/k_tensor.cu zeroes its shared-memory tiles and streams the loads beside them) run on
    zeros; every other row on random or non-zero data."""
    if b.get("variant") == "zero" or str(b.get("name", "")).startswith("mix_bf16_wgmma"):
        return "zero"
    return "random"


# ---- the voltage curve from clocks seen under the power cap ----------------------------------------

@dataclass(frozen=True)
class CappedClock:
    """A kernel or layer measured at the power limit: its work and the SM clock it sustained there."""

    flops: float
    bytes: float
    path: str
    level: str
    sm_clock_mhz: float


def fit_voltage_to_capped_clocks(records: Iterable[PowerRecord], idle_w: float | None, f0_mhz: float,
                                 power_limit_w: float, carm, observations: list[CappedClock],
                                 knees: Iterable[float] | None = None, v_knees: Iterable[float] | None = None):
    """Choose (f_knee, v_knee) so that the sweep fit made with that curve predicts the clocks that the
    `observations` sustained under the power limit (natural throttling: every capped layer is a point of
    power against clock). The energies are refitted on the sweep for each candidate curve, so the power
    of uncapped work at f0 does not depend on this choice. Objective: the median absolute clock error
    (robust to the layers that no operating point describes). Returns (PowerFit, median error in MHz).
    The clocks seen under the cap determine the curve's slope above the lowest of them, not the knee."""
    import numpy as np

    rows = list(records)
    if not observations:
        raise ProfileError("fitting a voltage curve to clocks needs at least one capped observation")
    scored = []
    for knee in knees if knees is not None else np.linspace(0.3, 0.8, 6) * f0_mhz:
        for v_knee in v_knees if v_knees is not None else np.linspace(0.5, 0.9, 5):
            curve = VoltageCurve(f0_mhz, float(knee), float(v_knee), "fitted to capped clocks")
            fit = fit_power_sweep(rows, idle_w, f0_mhz, power_limit_w, voltage=curve)
            pm = PowerModel(fit.constant_w, fit.joules_per_flop, fit.joules_per_byte, power_limit_w,
                            fit.data_factor, curve)
            errs = []
            for o in observations:
                if o.path not in pm.joules_per_flop or o.level not in pm.joules_per_byte:
                    continue
                p = predict_at_clock(carm, pm, Work(o.flops, o.bytes, o.path, o.level), f0_mhz, f0_mhz)
                errs.append(abs(p.sm_clock_mhz - o.sm_clock_mhz))
            if errs:
                scored.append((float(np.median(errs)), fit))
    if not scored:
        raise ProfileError("no capped observation runs on a path and level the power model covers")
    # Capped clocks pin the curve only where they lie (its slope above them); curves that agree there
    # tie, and the knee nearest the prior's is kept.
    least = min(err for err, _ in scored)
    ties = [(err, fit) for err, fit in scored if err <= least + 0.5]
    prior_knee = VoltageCurve.default(f0_mhz).f_knee_mhz
    err, fit = min(ties, key=lambda t: (abs(t[1].voltage.f_knee_mhz - prior_knee), t[0]))
    best = (fit, err)
    best[0].quality["voltage_fit"] = {"observations": len(observations), "median_abs_clock_err_mhz": best[1]}
    return best


# ---- the duty curve, from measured layers -------------------------------------------------------

@dataclass(frozen=True)
class DutyObservation:
    """A measured layer: its time per call, its measured power and its busy power (the power model at
    its CARM operating point, cap included); its CARM bound time for the efficiency form."""

    time_s: float
    measured_w: float
    busy_w: float
    bound_time_s: float | None = None
    output_elements: float | None = None   # the fill_efficiency form's size: the elements the layer writes
    gpu_share: float = 1.0                 # power_limit_w fits: the replay share applied after the cap (busy_w bare)


def fit_duty_curve(observations: Iterable[DutyObservation], constant_w: float,
                   gammas: Iterable[float] | None = None, t_fulls_s: Iterable[float] | None = None,
                   source: str = "fitted on layer records", variable: str = "time",
                   t_sizes_s: Iterable[float] | None = None, gammas_size: Iterable[float] | None = None,
                   power_limit_w: float | None = None):
    """The duty curve (carm/power_model.DutyCurve) that minimises the median absolute relative power error
    over `observations` (a grid search: robust to the layers no curve describes, and the figure the
    validation reports). variable "time": (t_full_s, gamma) of P = P_const + (busy - P_const) *
    min(1, (t / t_full_s) ** gamma); "efficiency": gamma of P = P_const + (busy - P_const) * min(1,
    t_bound / t) ** gamma (observations without a bound time are left out); "size_efficiency": (t_size_s,
    gamma_size, gamma) of the efficiency form times min(1, (t_bound / t_size_s) ** gamma_size) (gamma_size
    0 on its grid is the efficiency form itself); "fill_efficiency": (n_full, gamma_size, gamma) of the
    efficiency form times min(1, (output elements / n_full) ** gamma_size); "size_fill_efficiency": both size terms
    (the fill term's exponent gamma_fill). Returns (DutyCurve, that
    median error). Fitted on LAYER data: validate it on layers of models it was not fitted on. `power_limit_w`
    (PowerModel.duty_busy "uncapped"): busy_w is the uncapped busy power, the duty power is capped at the limit, then
    scaled above the constant by each observation's gpu_share."""
    import numpy as np

    if variable not in DUTY_VARIABLES:
        raise ProfileError(f"duty curve variable must be one of {DUTY_VARIABLES}, received: {variable!r}")
    obs = [o for o in observations if o.time_s > 0 and o.measured_w > 0 and o.busy_w > constant_w
           and (variable == "time" or (o.bound_time_s or 0) > 0)
           and (variable not in OUTPUT_SIZE_VARIABLES or (o.output_elements or 0) > 0)]
    if not obs:
        raise ProfileError("fitting a duty curve needs at least one layer with a time, a power and a busy power "
                           "above the constant power" + ("" if variable == "time" else ", and a bound time"))
    t = np.array([o.time_s for o in obs])
    m = np.array([o.measured_w for o in obs])
    busy = np.array([o.busy_w for o in obs])
    share = np.array([o.gpu_share for o in obs])
    best = None

    def power(d):   # the predicted power at duty d (the cap and the share only where power_limit_w is given)
        if power_limit_w is None:
            return constant_w + (busy - constant_w) * d
        return constant_w + (np.minimum(power_limit_w, constant_w + (busy - constant_w) * d) - constant_w) * share

    if variable == "efficiency":
        e = np.minimum(1.0, np.array([o.bound_time_s for o in obs]) / t)
        for g in (gammas if gammas is not None else np.linspace(0.0, 1.0, 101)):
            err = float(np.median(np.abs(power(e ** g) / m - 1)))
            if best is None or err < best[0] - 1e-12:
                best = (err, None, float(g))
        return DutyCurve(None, best[2], source, "efficiency"), best[0]
    if variable in ("size_efficiency", *OUTPUT_SIZE_VARIABLES):
        # the efficiency form times min(1, (size / size_full) ** gamma_size), the size the CARM bound time
        # (size_efficiency) or the output elements (fill_efficiency); size_fill_efficiency: both terms, first on a
        # coarse joint grid (half-decades, exponents by 0.2), then each term on its fine grid given the other, twice
        # (each fine grid holds the coarse points and the previous optimum, so the error never rises)
        tb = np.array([o.bound_time_s for o in obs])
        e = np.minimum(1.0, tb / t)
        n_out = np.array([o.output_elements or 0.0 for o in obs], dtype=float)
        t_grid = t_sizes_s if t_sizes_s is not None else np.logspace(-7, -3, 41)
        n_grid = np.logspace(4, 8, 41)
        gs_grid = gammas_size if gammas_size is not None else np.linspace(0.0, 1.0, 21)
        g_grid = np.asarray(gammas if gammas is not None else np.linspace(0.0, 0.5, 26), dtype=float)
        ge = e[None, :] ** g_grid[:, None]                     # (gammas, layers)

        def size_grid(size, fulls, other, exponents=gs_grid, found=None):
            # the best (error, (full, gamma_size), gamma) with the `other` term fixed, improving on `found`
            for full in fulls:
                for gs in exponents:
                    d = (np.minimum(1.0, (size / full) ** gs) * other)[None, :] * ge
                    errs = np.median(np.abs(power(d) / m - 1), axis=1)
                    i = int(np.argmin(errs))
                    if found is None or errs[i] < found[0] - 1e-12:
                        found = (float(errs[i]), (float(full), float(gs)), float(g_grid[i]))
            return found

        if variable == "fill_efficiency":
            best = size_grid(n_out, n_grid, 1.0)
            return DutyCurve(None, best[2], source, variable, None, best[1][1], best[1][0]), best[0]
        if variable == "size_efficiency":
            best = size_grid(tb, t_grid, 1.0)
            return DutyCurve(None, best[2], source, variable, best[1][0], best[1][1]), best[0]
        best = fill = None
        for n_full in np.logspace(4, 8, 9):
            for gf in np.linspace(0.0, 1.0, 6):
                found = size_grid(tb, np.logspace(-7, -3, 9), np.minimum(1.0, (n_out / n_full) ** gf),
                                  np.linspace(0.0, 1.0, 6), best)
                if found is not best:
                    best, fill = found, (found[0], (float(n_full), float(gf)), found[2])
        for _ in range(2):
            fill = size_grid(n_out, n_grid, np.minimum(1.0, (tb / best[1][0]) ** best[1][1]))
            best = size_grid(tb, t_grid, np.minimum(1.0, (n_out / fill[1][0]) ** fill[1][1]))
        return DutyCurve(None, best[2], source, variable, best[1][0], best[1][1], fill[1][0], fill[1][1]), best[0]
    for t_full in (t_fulls_s if t_fulls_s is not None else np.logspace(-6, -2, 81)):
        for g in (gammas if gammas is not None else np.linspace(0.0, 0.6, 61)):
            p = power(np.minimum(1.0, (t / t_full) ** g))
            err = float(np.median(np.abs(p / m - 1)))
            if best is None or err < best[0] - 1e-12:
                best = (err, float(t_full), float(g))
    return DutyCurve(best[1], best[2], source), best[0]


def fit_power_runs(docs: Iterable[dict[str, Any]], drop: Iterable[str] = ()) -> tuple[PowerFit, float | None]:
    """One least-squares fit over the benchmark rows of every run given (ceilings runs, power sweeps,
    measured profiles; names in `drop` left out): the runs' median idle power as the constant's floor,
    their highest maximum SM clock as f0 and their lowest power limit. Returns (fit, power limit or None)."""
    left_out = set(drop)
    records, idle, limits, f0 = [], [], [], []
    for doc in docs:
        records += [r for r in records_from_benchmarks(doc.get("benchmarks") or []) if r.name not in left_out]
        device = doc.get("device") or {}
        pm = doc.get("power_model") or {}
        idle.append(device.get("idle_power_w") or pm.get("constant_w"))
        limits.append(device.get("power_limit_w") or pm.get("power_limit_w"))
        f0.append(device.get("sm_clock_max_mhz") or device.get("max_sm_clock_mhz"))
    known = [x for x in idle if x]
    limit = min((x for x in limits if x), default=None)
    clocks = [x for x in f0 if x]
    if not clocks:
        raise ValueError("Expected a run with device.sm_clock_max_mhz to fit the power model on, received none")
    fit = fit_power_sweep(records, statistics.median(known) if known else None, max(clocks), limit)
    return fit, limit


def power_model_section(docs: Iterable[dict[str, Any]], date: str | None = None, drop: Iterable[str] = (),
                        sources: Iterable[str] = ()) -> dict[str, Any]:
    """A profile's `power_model` section fitted over whole recorded sweeps (fit_power_runs: the `benchmarks`
    rows of every run given, names in `drop` left out): the one call a profile builder needs, the very fit
    benchmarks/power_model_validation.py validates. `sources` name the runs in the provenance."""
    fit, power_limit_w = fit_power_runs(docs, drop)
    limit = power_limit_w if power_limit_w and power_limit_w > fit.constant_w else None
    return {**fit.to_dict(), "power_limit_w": limit,
            "provenance": {"source": "measured", "date": date, "from": list(sources),
                           "method": "least squares over every benchmark row with a >= 0.9 s NVML energy window "
                                     "of the runs in 'from' (carm_advisor/carm/power_fit.py: fit_power_runs); "
                                     "constant: " + fit.quality["constant"]}}
