"""Advice that agrees with measurement: gains capped by the measured gap, measured causes, backend switches.

recommend.recommend computes each recommendation from predictions; this module then
- relabels gains computed from calibrated rows as calibrated predictions;
- on a measured report, caps every gain that keeps the configuration (fusion, padding, layout...) at
  the measured gap: it can save at most the time its layers took, and the model cannot get faster
  than its CARM bound (measured / bound);
- adds what only a measurement shows: framework dispatch overhead (eager time minus the CUDA-graph
  time of the same model), layers far below their roof with the cause where it can be told;
- adds the backend and compilation switches with their calibrated gain (compilation_switch: torch eager ->
  torch.compile, tensorflow without XLA -> XLA; jax is already jitted). The compiled time is the
  calibration's fit of measured compiled runs where it has one (calibrated), else, on torch, the GPU
  time of the layers (ASSUMED: the measured CUDA-graph replay, else the calibrated CUDA-graph fit); the
  gain is never above the gap between the current whole-model time and the CARM bound.

Energy of a predicted (not measured) whole-model time, current or switched-to configuration: that time x
the configuration's predicted whole-model power (predict.whole_model_power_w: the layers' busy powers
scaled by the profile's duty curve, time-weighted, as benchmarks/power_model_validation.py validates it;
without a calibration, the power at the CARM operating point, bound energy / bound time of its known
layers, `bound_power_w`), as the tuner's calibrated value (tune/predicted.py). The alternative, the same
work's dynamic energy spread over the longer time, drew far too little power against the measured H200
trials (benchmarks/results/nvidia-h200-tuning-prediction-check-2026-12-04.json,
median_abs_err_gflops_per_watt vs ..._stretched_energy). Both sides of a ratio use the same model, so an
unmeasured current configuration uses it too.
"""

from __future__ import annotations

from carm_advisor.calibration import MATMUL_CLASSES, whole_model_execution
from carm_advisor.calibration.store import with_borrowed
from carm_advisor.predict import Predictor, resolve_math_mode
from carm_advisor.results import LayerRow, Recommendation
from carm_advisor.units import named_list, seconds, si

# A layer this far below its roof (measured / attainable) with this share of the measured time is named.
FAR_BELOW = 0.25
MIN_SHARE = 0.02
MIN_GAIN = 1.03
_ELEMENTWISE = ("Activation", "ReLU", "LeakyReLU", "PReLU", "ELU", "BatchNormalization", "LayerNormalization",
                "GroupNormalization", "Add", "Multiply", "Subtract", "Rescaling", "Normalization")
_TC_MULTIPLE = {"float32": 4, "bfloat16": 8, "float16": 8}
# Recommendations whose gain comes from a different configuration's prediction (not capped by the gap).
_SWITCHES = ("precision", "batch_size", "backend")


def measured_recommendations(report, rows: list[LayerRow], recs: list[Recommendation], predict) -> list[Recommendation]:
    if any(r.calibrated_time_s for r in rows):
        for rec in recs:
            rec.expected_gain = rec.expected_gain.replace("(CARM prediction)", "(calibrated prediction)")
            if rec.basis == "CARM prediction":
                rec.basis = "calibrated prediction"
    measured = [r for r in rows if r.measured and r.time_s]
    if measured:
        for rec in recs:
            cap_by_measured_gap(report, measured, rec)
        recs += [r for r in (dispatch_overhead(report), far_below_roof(report, measured)) if r is not None]
    recs += backend_switches(report, rows, predict)
    compiled = compilation_switch(report, rows, predict)
    if compiled is not None:
        recs.append(compiled)
    return recs


def _measurement(report) -> dict:
    m = report.measurement
    return m.to_dict() if hasattr(m, "to_dict") else (m or {})


def gpu_time_s(report) -> float | None:
    """The model's measured GPU time: the CUDA-graph replay where there is one, else the (jitted) call."""
    m = _measurement(report)
    for key in ("inference_graph", "inference"):
        if (m.get(key) or {}).get("time_s"):
            return m[key]["time_s"]
    return None


def measured_gap(report) -> float | None:
    """Measured GPU time / CARM bound of the whole model: no same-configuration change gains more."""
    t, bound = gpu_time_s(report), report.predicted_time_s
    return t / bound if t and bound else None


def cap_by_measured_gap(report, measured: list[LayerRow], rec: Recommendation) -> None:
    if rec.speedup is None or (rec.change and any(k in rec.change for k in _SWITCHES)):
        return
    total = sum(r.time_s for r in measured)
    mine = sum(r.time_s for r in measured if r.name in set(rec.layers))
    caps = []
    if rec.layers and total > mine:
        caps.append(total / (total - mine))     # the layers' whole measured time saved, no more
    gap = measured_gap(report)
    if gap is not None:
        caps.append(max(gap, 1.0))
    if caps and rec.speedup > min(caps):
        rec.speedup = min(caps)
        rec.expected_gain = f"at most {rec.speedup:.2f}x faster (capped by the measured gap to the bound)"
        rec.basis += "; capped by measurement"


def dispatch_overhead(report) -> Recommendation | None:
    """Eager minus CUDA-graph time of the same model: what Python/Keras dispatch costs per call."""
    m = _measurement(report)
    eager, graph = (m.get("inference") or {}), (m.get("inference_graph") or {})
    if eager.get("execution") != "eager" or not eager.get("time_s") or not graph.get("time_s"):
        return None
    overhead = eager["time_s"] - graph["time_s"]
    speedup = eager["time_s"] / graph["time_s"]
    if speedup < MIN_GAIN:
        return None
    energy = (eager.get("energy_j") / graph["energy_j"]) if eager.get("energy_j") and graph.get("energy_j") else None
    calls = sum(1 for r in report.layers if r.known)
    return Recommendation(
        title="Remove the framework's per-layer dispatch: compile the model or replay it from a CUDA graph",
        detail=(f"Measured: {seconds(eager['time_s'])} per call eagerly, {seconds(graph['time_s'])} for the same "
                f"GPU work replayed from one CUDA graph: {seconds(overhead)} ({overhead / eager['time_s']:.0%}) is "
                f"Python/Keras dispatch of {calls} layer calls, during which the GPU waits. torch.compile "
                "(model.compile(jit_compile=True)), a CUDA graph of the inference step, or the jax backend (jitted) remove it."),
        expected_gain=f"{speedup:.2f}x faster" + (f", {energy:.2f}x less energy" if energy else "") + " (measured)",
        speedup=speedup, energy_ratio=energy, basis="measurement (eager vs CUDA graph)",
        change={"compile": "cuda_graph"},
    )


def _cause(report, r: LayerRow) -> str:
    backend, layout = report.model.backend, report.model.layout
    if r.type in _ELEMENTWISE and r.bound.startswith("memory:"):
        return "memory-bound elementwise pass a compiler would fuse into its producer"
    multiple = _TC_MULTIPLE.get(r.dtype)
    if r.tensor_core and multiple and any(c and c % multiple for c in r.channels):
        return f"channel counts {'/'.join(map(str, r.channels))} leave Tensor Core tiles empty (multiple of {multiple})"
    if backend == "torch" and layout == "channels_last" and ("Conv" in r.type or "Pooling" in r.type):
        return "layout transposes (Keras' torch backend copies channels_last tensors to NCHW and back)"
    if r.type not in MATMUL_CLASSES and r.time_s and r.time_s < 20e-6:
        return "too small to fill the GPU (launch-bound)"
    return "kernel below its roof (cause not told by timing alone; ncu counters can)"


def far_below_roof(report, measured: list[LayerRow]) -> Recommendation | None:
    total = sum(r.time_s for r in measured)
    slow = [r for r in measured if r.efficiency is not None and r.efficiency < FAR_BELOW and r.time_s / total >= MIN_SHARE]
    if not slow:
        return None
    slow.sort(key=lambda r: -(r.time_s - (r.predicted_time_s or 0)))
    lost = sum(r.time_s - (r.predicted_time_s or 0) for r in slow)
    speedup = total / (total - lost) if total > lost > 0 else None
    names = named_list([f"{r.name} ({r.type}, {r.efficiency:.0%} of its roof, {r.time_s / total:.0%} of the time): "
                        f"{_cause(report, r)}" for r in slow], 5, sep="; ")
    return Recommendation(
        title=f"{len(slow)} layers run far below their roof (< {FAR_BELOW:.0%})",
        detail=f"Measured: {names}.",
        expected_gain=(f"up to {speedup:.2f}x if they reached their roofs (measured gap)" if speedup else "not quantified"),
        speedup=speedup, layers=[r.name for r in slow], basis="measurement against the CARM bound",
    )


def backend_switches(report, rows: list[LayerRow], predict) -> list[Recommendation]:
    """The other backend (and, on torch, compiling) with the calibrated gain, where calibration has data."""
    calib = predict.predictor.calibration
    backend = report.model.backend
    if calib is None or not hasattr(calib, "whole_time_s") or backend not in ("torch", "jax"):
        return []
    now_t = _whole(report, rows, calib, backend, whole_model_execution(backend))
    if now_t is None:
        return []
    other = "jax" if backend == "torch" else "torch"
    base = predict.predictor
    alt_rows = Predictor(base.profile, resolve_math_mode(other), backend=other, calibration=calib,
                         strict=base.strict).for_model(predict.model, predict.batch_size, predict.dtype).rows()
    alt_t = _whole(report, alt_rows, calib, other, whole_model_execution(other))
    if alt_t is None or not any(r.calibrated_time_s for r in alt_rows):
        return []
    alt_bound = sum(r.predicted_time_s or 0.0 for r in alt_rows if r.known)
    alt_t, capped = at_least_bound(alt_t, alt_bound)
    speedup = now_t[0] / alt_t[0]
    energy = now_t[1] / alt_t[1] if now_t[1] and alt_t[1] else None
    if max(speedup, energy or 0) < MIN_GAIN:
        return []
    source = ("measured now vs calibrated" if now_t[2] else "calibrated") + (
        f"; {other} raised to its CARM bound" if capped else "") + (f"; {POWER_BASIS}" if energy else "")
    return [Recommendation(
        title=f"Run on the {other} backend" + (" (XLA-compiled)" if other == "jax" else ""),
        detail=(f"{backend}: {seconds(now_t[0])} per call ({'measured' if now_t[2] else 'calibrated'}); {other}: "
                f"{seconds(alt_t[0])}" + (f", {si(alt_t[1], 'J')} at {alt_t[1] / alt_t[0]:.0f} W" if alt_t[1] else "")
                + f" (calibrated from recorded runs of this GPU: {calib.provenance.get('records', ['?'])[0]}, ...). "
                f"Set KERAS_BACKEND={other}; the model code stays the same."),
        expected_gain=f"{speedup:.2f}x faster" + (f", {energy:.2f}x less energy" if energy else "") + f" ({source})",
        speedup=speedup, energy_ratio=energy, basis="calibrated prediction" + (f"; {POWER_BASIS}" if energy else ""), change={"backend": other},
    )]


def whole_model_now_and_changed(report, rows, changed_rows, predict) -> tuple | None:
    """((time_s, energy_j, measured?) now, (time_s, energy_j) changed) of the whole model as its user runs it
    (the report's calibrated execution, else analysis.whole_model_execution of its backend: torch eager, where the
    host may set the pace; jax jit; tensorflow under XLA, from jax's jit records): now measured where measured,
    else calibrated; `changed_rows` (the same model changed, e.g. at another batch size) calibrated, its energy at
    the validated whole-model power. None without a calibration with a whole-model fit for the backend."""
    calib = getattr(getattr(predict, "predictor", None), "calibration", None)
    backend = report.model.backend
    if calib is None or not hasattr(calib, "whole_time_s") or backend not in ("torch", "jax", "tensorflow"):
        return None
    execution = (getattr(report, "calibration", None) or {}).get("execution") or whole_model_execution(backend)
    now = _whole(report, rows, calib, backend, execution)
    t = calib.whole_time_s(changed_rows, backend, execution, report.model.name)
    if now is None or not t:
        return None
    return now, (t, _energy_at(changed_rows, t, report, calib, backend, execution))


def at_least_bound(whole: tuple, bound_s: float) -> tuple[tuple, bool]:
    """(time_s, energy_j, measured?) raised to the CARM bound when below it (energy scaled with the time),
    and whether it was: no configuration runs faster than its roofs allow."""
    t, e, measured = whole
    if bound_s and t < bound_s:
        return (bound_s, e * bound_s / t if e else e, measured), True
    return whole, False


def _whole(report, rows, calib, backend: str, execution: str) -> tuple[float, float | None, bool] | None:
    """(time_s, energy_j, measured?) of the whole model: measured when this is the measured backend."""
    inference = _measurement(report).get("inference") or {}
    if backend == report.model.backend and inference.get("time_s"):
        return inference["time_s"], inference.get("energy_j"), True
    t = calib.whole_time_s(rows, backend, execution, report.model.name)
    if t is None:
        return None
    return t, _energy_at(rows, t, report, calib, backend, execution), False


# The compiled execution a backend's user can switch to: (its name in a change, how to).
COMPILERS = {
    "torch": ("torch.compile",
              "model.compile(jit_compile=True) then y = model.predict_on_batch(x) (or model.predict(x, batch_size=...)): "
              "on the torch backend Keras wraps its predict and train steps in torch.compile (Inductor); "
              "model(x) itself stays eager"),
    "tensorflow": ("xla",
                   "model.compile(jit_compile=True) then y = model.predict_on_batch(x) (or model.predict(x)): Keras runs "
                   "its predict step as tf.function(jit_compile=True) (XLA); model(x) does not use XLA"),
}
# A compiled execution's name in the calibration where it differs from its name in a change: tensorflow's XLA is
# calibrated as "jit" (jax's XLA records stand in for it: calibration.store.BORROWED).
CALIBRATED_AS = {("tensorflow", "xla"): "jit"}
ASSUMED_COMPILED = "ASSUMED: a compiled graph takes about the GPU time of the layers"


def compilation_switch(report, rows: list[LayerRow], predict) -> Recommendation | None:
    """Compile the model on its own backend (torch eager -> torch.compile; tensorflow -> XLA), with the gain:
    current whole-model time (measured, else calibrated) / compiled time (calibrated from compiled runs, else
    on torch the GPU time of the layers, an assumption), never above current time / CARM bound; None (no
    advice) where the predicted gain in time and energy is below MIN_GAIN (a compiled model predicted slower)."""
    backend = report.model.backend
    if backend not in COMPILERS:
        return None        # jax: model(x) and predict already run jitted under XLA
    compiled_exec, how = COMPILERS[backend]
    m = _measurement(report)
    inference = m.get("inference") or {}
    runs_as = inference.get("execution") or (getattr(report, "calibration", None) or {}).get("runs_as")
    if runs_as not in (None, "eager"):
        return None        # already compiled or graphed (tensorflow's model.predict under XLA on a GPU)
    calibrated_as = CALIBRATED_AS.get((backend, compiled_exec), compiled_exec)
    calib = getattr(getattr(predict, "predictor", None), "calibration", None)
    now = _now_time(report, inference, calib, rows)
    compiled, failure = _compiled_time(report, rows, with_borrowed(calib, backend, calibrated_as), backend,
                                       calibrated_as, m)
    bound = report.predicted_time_s
    name = "torch.compile" if backend == "torch" else "XLA (jit_compile=True)"
    title = f"Compile the model with {name} (stays on the {backend} backend)"
    once = ("The first call compiles (seconds; again for each new input shape): paid once per process, "
            "not per call.")
    change = {"compile": compiled_exec}   # the compiled execution: torch.compile, xla
    if now is None or compiled is None or not bound:
        gap = f"; at most {now[0] / bound:.2f}x, the {now[1]} time against the CARM bound" if now and bound else ""
        if compiled is None:
            why = (f"the calibration's {backend} {compiled_exec} fit failed: {failure}" if failure
                   else f"no {backend} {compiled_exec} record in the calibration")
        elif now is None:
            why = "no current whole-model time"
        else:
            why = "no CARM bound of the whole model: none of its known layers has one"
        return Recommendation(
            title=title, detail=f"{how}. {once}", expected_gain=f"not quantified ({why}){gap}",
            basis="backend behaviour", change=change)
    (t_now, src_now, e_now), (t_c, src_c, e_c, basis) = now, compiled
    gap = t_now / bound
    capped = t_now / t_c > gap
    if capped:
        if e_c is not None:               # the same power (measured or predicted) over the bound time
            e_c *= bound / t_c
        t_c = bound                       # no compiled run beats the roofs
    speedup = t_now / t_c
    energy = e_now / e_c if e_now and e_c else None
    measured_graph = basis.startswith("assumed: compiled = the measured CUDA-graph")   # its energy is measured too
    predicted_energy = energy is not None and not (src_now == "measured" and measured_graph)
    if max(speedup, energy or 0) < MIN_GAIN:
        return None        # the prediction says compiling gains nothing (or loses): no recommendation
    detail = (f"{backend} now: {seconds(t_now)} per call ({src_now}); compiled: {seconds(t_c)} ({src_c}"
              + (f"; raised to the CARM bound {seconds(bound)}" if capped else "")
              + (f"; {si(e_c, 'J')} at {e_c / t_c:.0f} W, predicted" if predicted_energy and not measured_graph else "")
              + f"). {how}. {once}")
    label = basis + ("; capped by the gap to the CARM bound" if capped else "") + (
        f"; {POWER_BASIS}" if predicted_energy else "")
    return Recommendation(
        title=title, detail=detail,
        expected_gain=f"{speedup:.2f}x faster" + _energy_text(energy) + f" ({label})",
        speedup=speedup, energy_ratio=energy, basis=label, change=change)


def _energy_text(ratio: float | None) -> str:
    """", 1.50x less energy" (ratio = now / new > 1), ", 1.09x more energy" (< 1), "" (unknown)."""
    if not ratio:
        return ""
    return f", {ratio:.2f}x less energy" if ratio >= 1 else f", {1 / ratio:.2f}x more energy"


def current_time(report) -> tuple[float, str, float | None] | None:
    """(time_s, source, energy_j) of the whole model as the user runs it now (model(x): measured, else the
    calibrated eager time): the baseline of compilation_switch's gain."""
    return _now_time(report, _measurement(report).get("inference") or {})


def _now_time(report, inference: dict, calib=None, rows=None) -> tuple[float, str, float | None] | None:
    """(time_s, source, energy_j) of the model as the user runs it now: measured, else calibrated (its
    energy from `calib` and `rows` where given, as _energy_at says)."""
    if inference.get("time_s"):
        return inference["time_s"], "measured", inference.get("energy_j")
    c = getattr(report, "calibration", None) or {}
    if c.get("whole_time_s") and c.get("execution") == "eager":
        t = c["whole_time_s"]
        # the analysis' whole-model power where it has one (the same figure for the advice and its --verify)
        energy = (t * c["whole_power_w"] if c.get("whole_power_w") else
                  _energy_at(rows if rows is not None else report.layers, t, report, calib, report.model.backend, "eager"))
        return t, f"calibrated eager: {c.get('whole_source') or 'whole-model fit'}", energy
    return None


def _compiled_time(report, rows, calib, backend: str, execution: str, m: dict):
    """((time_s, source, energy_j, basis) of the compiled model, or None; why the calibrated fit failed, or
    None): the calibration's fit of compiled runs, else on torch the GPU time of the layers (measured CUDA
    graph, else the calibrated graph fit), with the fit's error in the source and basis when it raised."""
    t, failure = None, None
    if calib is not None and hasattr(calib, "whole_time_s"):
        try:
            t = calib.whole_time_s(rows, backend, execution, report.model.name)
        except (KeyError, ValueError) as exc:   # records that do not fit (statistics.StatisticsError is a ValueError)
            failure = f"{type(exc).__name__}: {exc}"
    if t:
        fit = calib.whole_describe(backend, execution, rows, report.model.name) if hasattr(calib, "whole_describe") else execution
        return (t, f"calibrated from measured {execution} runs: {fit}", _energy_at(rows, t, report, calib, backend, execution),
                "calibrated prediction"), None
    if backend != "torch":
        return None, failure
    failed = f" (the calibrated {execution} fit failed: {failure})" if failure else ""
    graph = m.get("inference_graph") or {}
    if graph.get("time_s"):
        return (graph["time_s"], f"{ASSUMED_COMPILED}: the measured CUDA-graph replay of this model{failed}",
                graph.get("energy_j"), f"assumed: compiled = the measured CUDA-graph time{failed}"), failure
    t = (getattr(report, "calibration", None) or {}).get("graph_time_s")
    if t:
        return (t, f"{ASSUMED_COMPILED}: the calibrated CUDA-graph time{failed}",
                _energy_at(rows, t, report, calib, backend, "cuda_graph"),
                f"assumed: compiled = the calibrated CUDA-graph time{failed}"), failure
    return None, failure


POWER_BASIS = ("energy: predicted time x the predicted whole-model power (the layers' duty powers; the CARM "
               "operating point's without a calibration)")


def bound_power_w(rows) -> float | None:
    """The configuration's predicted power at its CARM operating point: bound energy / bound time summed
    over its known layers (the tuner's ConfigPredictor power), or None where a known layer has no energy."""
    known = [r for r in rows if r.known and r.predicted_time_s is not None]
    energies = [r.predicted_energy_j for r in known]
    time_s = sum(r.predicted_time_s for r in known)
    if not known or None in energies or not time_s > 0:
        return None
    return sum(energies) / time_s


def _energy_at(rows, time_s: float, report=None, calib=None, backend: str | None = None,
               execution: str | None = None) -> float | None:
    """Energy of a predicted whole-model `time_s`: that time x the predicted whole-model power
    (predict.whole_model_power_w, what benchmarks/power_model_validation.py validates) where the report's
    profile has a power model and the calibration a fit, else x bound_power_w(rows); None without either."""
    power_w = None
    pm = getattr(getattr(report, "profile", None), "power_model", None)
    if backend and execution and hasattr(pm, "mean_duty_power_w"):   # a real PowerModel (not a bare constant)
        from carm_advisor.predict import whole_model_power_w

        power_w = whole_model_power_w(rows, pm, calib, backend, execution, report.model.name)
    power_w = power_w or bound_power_w(rows)
    return power_w * time_s if power_w else None
