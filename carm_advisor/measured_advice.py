"""Advice that agrees with measurement: gains capped by the measured gap, measured causes, backend switches.

recommend.recommend computes each recommendation from predictions; this module then
- relabels gains computed from calibrated rows as calibrated predictions;
- on a measured report, caps every gain that keeps the configuration (fusion, padding, layout...) at
  the measured gap: it can save at most the time its layers took, and the model cannot get faster
  than its CARM bound (measured / bound);
- adds what only a measurement shows: framework dispatch overhead (eager time minus the CUDA-graph
  time of the same model), layers far below their roof with the cause where it can be told;
- adds the backend and compilation switches with their calibrated gain.
"""

from __future__ import annotations

from carm_advisor.calibration import MATMUL_CLASSES
from carm_advisor.report.model import LayerRow, Recommendation

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
        detail=(f"Measured: {eager['time_s'] * 1e3:.1f} ms per call eagerly, {graph['time_s'] * 1e3:.1f} ms for the same "
                f"GPU work replayed from one CUDA graph: {overhead * 1e3:.1f} ms ({overhead / eager['time_s']:.0%}) is "
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
    names = "; ".join(f"{r.name} ({r.type}, {r.efficiency:.0%} of its roof, {r.time_s / total:.0%} of the time): {_cause(report, r)}"
                      for r in slow[:5])
    return Recommendation(
        title=f"{len(slow)} layers run far below their roof (< {FAR_BELOW:.0%})",
        detail=f"Measured: {names}" + (f"; and {len(slow) - 5} more" if len(slow) > 5 else "") + ".",
        expected_gain=(f"up to {speedup:.2f}x if they reached their roofs (measured gap)" if speedup else "not quantified"),
        speedup=speedup, layers=[r.name for r in slow], basis="measurement against the CARM bound",
    )


def backend_switches(report, rows: list[LayerRow], predict) -> list[Recommendation]:
    """The other backend (and, on torch, compiling) with the calibrated gain, where calibration has data."""
    calib = predict.predictor.calibration
    backend = report.model.backend
    if calib is None or not hasattr(calib, "whole_time_s") or backend not in ("torch", "jax"):
        return []
    from carm_advisor.analysis import whole_model_execution
    from carm_advisor.predict import Predictor, resolve_math_mode

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
    speedup = now_t[0] / alt_t[0]
    energy = now_t[1] / alt_t[1] if now_t[1] and alt_t[1] else None
    if max(speedup, energy or 0) < MIN_GAIN:
        return []
    source = "measured now vs calibrated" if now_t[2] else "calibrated"
    return [Recommendation(
        title=f"Run on the {other} backend" + (" (XLA-compiled)" if other == "jax" else ""),
        detail=(f"{backend}: {now_t[0] * 1e3:.2f} ms per call ({'measured' if now_t[2] else 'calibrated'}); {other}: "
                f"{alt_t[0] * 1e3:.2f} ms (calibrated from recorded runs of this GPU: {calib.provenance.get('records', ['?'])[0]}, ...). "
                f"Set KERAS_BACKEND={other}; the model code stays the same."),
        expected_gain=f"{speedup:.2f}x faster" + (f", {energy:.2f}x less energy" if energy else "") + f" ({source})",
        speedup=speedup, energy_ratio=energy, basis="calibrated prediction", change={"backend": other},
    )]


def _whole(report, rows, calib, backend: str, execution: str) -> tuple[float, float | None, bool] | None:
    """(time_s, energy_j, measured?) of the whole model: measured when this is the measured backend."""
    inference = _measurement(report).get("inference") or {}
    if backend == report.model.backend and inference.get("time_s"):
        return inference["time_s"], inference.get("energy_j"), True
    t = calib.whole_time_s(rows, backend, execution)
    if t is None:
        return None
    pm = getattr(report.profile, "power_model", None)
    energy = None
    if pm is not None and all(r.calibrated_energy_j is not None for r in rows if r.calibrated_time_s):
        dynamic = sum(r.calibrated_energy_j - pm.constant_w * r.calibrated_time_s for r in rows if r.calibrated_time_s)
        energy = dynamic + pm.constant_w * t
    return t, energy, False
