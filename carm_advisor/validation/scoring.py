"""The power model and the calibration scored against recorded runs (validation/records.py lays them out).

Per layer: the headline needs no measurement of the layer's model: the busy power (the power model at the layer's
CARM operating point at the default clock, the power limit as a roof) scaled above the constant power by the duty
curve at the layer's calibrated time; the duty curves (one for the layers on a Tensor Core path, one for the rest)
are fitted on the scored layers of the OTHER models and the calibration is Calibration.without_model(the model).
A layer replayed alone from a CUDA graph draws that power for the GPU's share of each replay (replay_share); a
layer jitted alone and dispatched from Python (host-paced) draws the busy power for its in-model GPU time over its
wall time, without the duty curve, and is left out of the curves' fit.
Per whole model: the layers' headline powers time-weighted at the times the product weights them
(predict.whole_model_layer_times), against the CUDA graph replay where the record has one, else `inference`;
energy per sample is that power times the calibrated whole-model time. Errors are predicted / measured - 1.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from carm_advisor.calibration import DISPATCHED_EXECUTIONS, REPLAYED_EXECUTIONS, layer_class
from carm_advisor.carm.dvfs import Work, predict_at_clock, predicted_time_energy
from carm_advisor.carm.power_fit import DutyObservation, fit_duty_curve
from carm_advisor.carm.power_model import TENSOR_CORE_PATH_PREFIX, replay_paced_fraction

# The duty curve's form: the layer's efficiency times its size (carm/power_model.DutyCurve "size_efficiency"): per-layer
# power of GPU-paced layers 10.7% against 11.8-15.6% for the other forms (n=836; nvidia-h200-power-model-duty-form-
# 2026-12-04.json.xz, validation.duty_form_choice). One curve for the layers on a Tensor Core path, one for the rest:
# per-layer power 10.9% against 11.0% for one curve (n=4900), whole-model power 7.5% against 8.2% (n=208;
# nvidia-h200-power-model-duty-per-unit-2026-12-05.json.xz, validation.duty_unit_choice).
DUTY_VARIABLE = "size_efficiency"
HEADLINE = "duty_lomo_calibrated_time"
VARIANTS = {
    HEADLINE: "the busy power scaled by the duty curve at the layer's calibrated time; the duty curves fitted on the "
              "scored layers of the OTHER models, the calibration without this model's samples",
    "carm_point": "the busy power alone: the power model at the CARM operating point, no layer data, no time",
    "duty_lomo_measured_time": "the busy power scaled by the leave-one-model-out duty curve at the MEASURED time "
                               "(the power model without the time prediction)",
    "duty_in_sample_measured_time": "the busy power scaled by the duty curve fitted on ALL scored layers at the "
                                    "measured time: in sample, not a validation",
}
TARGETS = {"layer_power": 0.10, "layer_power_min_n": 100, "model_power": 0.07, "layer_energy_given_time": 0.15,
           "model_energy_per_sample_calibrated_time": 0.15}
# Why a layer's measured power is not scored (the first that applies, in this order).
EXCLUSIONS = {
    "layers_not_in_policy_dtype": "jax mixed-precision record traced before the autocast fix: its layers ran in "
                                  "float32 (RunMeasurement.jit_layers_in_policy_dtype False); whole model kept",
    "profiled": "torch profiler record: every layer carries the model's mean power (settings.layer_energy)",
    "window_unknown": "the record does not say how long its layer energy windows were",
    "window_short": "layer energy windows shorter than the minimum: NVML's ~100 ms energy steps dominate",
    "no_power_reading": "no power, or 0 W, measured for the layer",
    "host_paced_without_gpu_time": "a layer timed one host-dispatched call at a time for which the calibration has "
                                   "no in-model GPU time (no jit whole-model fit): its GPU share is unknown",
    "measured_as_one_call": "a part of a layer measured as one call (SeparableConv2D's halves): its power is the "
                            "call's; its share of the call's time counts in the whole model",
}


def exclusion(run: dict, layer: dict, min_layer_window_s: float) -> str | None:
    """Why this layer's measured power is no per-layer measurement worth scoring (EXCLUSIONS), or None."""
    if not run.get("layers_in_policy_dtype", True):
        return "layers_not_in_policy_dtype"
    if run.get("method") == "profiled":
        return "profiled"
    window = run.get("layer_window_s")
    if min_layer_window_s > 0 and window is None:
        return "window_unknown"
    if min_layer_window_s > 0 and window < min_layer_window_s:
        return "window_short"
    if not (layer.get("power_w") or 0) > 0:
        return "no_power_reading"
    if layer.get("execution") in DISPATCHED_EXECUTIONS and not layer.get("gpu_time_s_leave_one_model_out"):
        return "host_paced_without_gpu_time"
    if layer.get("part_of"):
        return "measured_as_one_call"
    return None


def error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1; None where either is missing (or the measurement 0)."""
    return predicted / measured - 1 if predicted is not None and measured else None


def median_abs(values) -> float | None:
    values = [abs(v) for v in values if v is not None]
    return statistics.median(values) if values else None


def busy_power_w(carm, pm, work: Work) -> float:
    """The power at the CARM operating point, as predict.Predictor predicts it: carm.dvfs.predicted_time_energy at
    the default clock, the power limit as a roof."""
    t, e = predicted_time_energy(carm, pm, work.flops, work.bytes, work.path, work.level)
    return e / t


def replay_share(layer: dict) -> float:
    """The share of each replay the GPU works for a layer replayed alone from a CUDA graph: power_model.
    replay_paced_fraction of its calibrated time (leave one model out) against the calibration's replay floor;
    1 for other layers and where either time is unknown."""
    if layer.get("execution") not in REPLAYED_EXECUTIONS:
        return 1.0
    return replay_paced_fraction(layer.get("calibrated_time_s_leave_one_model_out"),
                                 layer.get("replay_floor_s_leave_one_model_out"))


def _covered(layer: dict, carm, pm) -> bool:
    return bool((layer["flops"] or layer["bytes"]) and layer["path"] in carm.peak_flops_per_s
                and layer["level"] in carm.bandwidth_bytes_per_s and layer["path"] in pm.joules_per_flop
                and layer["level"] in pm.joules_per_byte)


def _unit(path: str | None) -> str:
    return "tensor_core" if path and path.startswith(TENSOR_CORE_PATH_PREFIX) else "other"


def duty_curves(obs_by_model: dict[str, list], constant_w: float, models) -> tuple[dict, object | None]:
    """(model -> the curve fitted on every other model's observations (None where they have none), the curve fitted
    on all of them); a model of `models` with no observation of its own gets the latter, which never saw it."""
    def fit(obs, source):
        return fit_duty_curve(obs, constant_w, source=source, variable=DUTY_VARIABLE)[0] if obs else None

    every = [o for obs in obs_by_model.values() for o in obs]
    in_sample = fit(every, "fitted on every scored layer (in sample)")
    lomo = {m: fit([o for other, obs in obs_by_model.items() if other != m for o in obs],
                   f"fitted on the scored layers of every model but {m}") for m in obs_by_model}
    for m in models:
        if m not in lomo and in_sample is not None:
            lomo[m] = dataclasses.replace(in_sample, source=f"fitted on the scored layers of every model (none of {m})")
    return lomo, in_sample


def validate(runs: list[dict], carm, pm, f0_mhz: float, min_layer_window_s: float = 0.5, fixed_duty=None) -> dict:
    """Every layer and whole model of `runs` (records.load_runs) predicted and scored: {"layers", "models",
    "duty_curves", "validation"} (the module docstring says what each figure is). `fixed_duty`: a PowerModel whose
    duty curves every model takes in place of those fitted on the other models' layers (another GPU's)."""
    obs_by_unit: dict[str, dict[str, list]] = {"tensor_core": {}, "other": {}}
    per_run = []
    for run in runs:
        kept = []
        for layer in run["layers"]:
            if not layer.get("time_s") or not _covered(layer, carm, pm):
                continue
            work = Work(layer["flops"], layer["bytes"], layer["path"], layer["level"])
            bound_s = predict_at_clock(carm, pm, work, f0_mhz, f0_mhz).time_s
            busy = busy_power_w(carm, pm, work)
            excluded = exclusion(run, layer, min_layer_window_s)
            kept.append((layer, bound_s, busy, excluded))
            if excluded is None and not layer.get("gpu_time_s_leave_one_model_out"):   # GPU-paced: the curves' data
                u = replay_share(layer)
                obs = DutyObservation(layer["time_s"], layer["power_w"], pm.constant_w + (busy - pm.constant_w) * u,
                                      bound_s, layer.get("output_elements"))
                obs_by_unit[_unit(layer["path"])].setdefault(run["model"], []).append(obs)
        per_run.append(kept)
    models = {r["model"] for r in runs}
    tc_curves, tc_in = duty_curves(obs_by_unit["tensor_core"], pm.constant_w, models)
    other, other_in = duty_curves(obs_by_unit["other"], pm.constant_w, models)
    # a model the other layers' curve cannot be fitted without: the curve of every layer of the other models
    every = {m: obs_by_unit["tensor_core"].get(m, []) + obs_by_unit["other"].get(m, [])
             for m in {*obs_by_unit["tensor_core"], *obs_by_unit["other"]}}
    lomo, every_in = duty_curves(every, pm.constant_w, models)
    curves = {m: other.get(m) or c for m, c in lomo.items()}
    in_sample = other_in or every_in
    by_path = {m: {} for m in models}
    if fixed_duty is not None:
        curves = {m: fixed_duty.duty for m in models}
        tc_curves = {m: fixed_duty.duty_tensor_core for m in models}
        by_path = {m: dict(fixed_duty.duty_by_path or {}) for m in models}
    lomo_pm = {m: dataclasses.replace(pm, duty=c, duty_tensor_core=tc_curves.get(m), duty_by_path=by_path[m])
               for m, c in curves.items() if c is not None and m in models}
    pm_in = dataclasses.replace(pm, duty=in_sample, duty_tensor_core=tc_in) if in_sample is not None else None
    layers, whole = [], []
    for run, kept in zip(runs, per_run):
        rows, measured_t, bound_t = _score_layers(run, kept, lomo_pm.get(run["model"]), pm_in)
        layers += rows
        row = _score_whole(run, rows, measured_t, bound_t, carm, pm, lomo_pm.get(run["model"]))
        if row is not None:
            whole.append(row)
    return {"layers": layers, "models": whole,
            "duty_curves": {"leave_one_model_out": {m: c.to_dict() if c else None for m, c in curves.items()},
                            "in_sample": in_sample.to_dict() if in_sample else None,
                            "tensor_core_leave_one_model_out": {m: c.to_dict() if c else None
                                                                for m, c in tc_curves.items()},
                            "tensor_core_in_sample": tc_in.to_dict() if tc_in else None,
                            "n_by_model": {m: sum(len(obs_by_unit[u].get(m, [])) for u in obs_by_unit)
                                           for m in sorted(models)}},
            "validation": summary(layers, whole, min_layer_window_s)}


def _layer_power(pm, layer: dict, busy_w: float, bound_s: float, time_s: float) -> float:
    """A layer's power under power model `pm` (its duty curves) at `time_s` per call: host-paced (jitted alone), the
    busy power for its in-model GPU time over that wall time, no duty curve; else the duty power for the GPU's share
    of each replay (replay_share)."""
    t_gpu = layer.get("gpu_time_s_leave_one_model_out")
    if t_gpu:
        return pm.duty_power_w(busy_w, t_gpu, time_s)
    return pm.duty_power_w(busy_w, time_s, bound_time_s=bound_s, gpu_share=replay_share(layer),
                           output_elements=layer.get("output_elements"), path=layer["path"])


def _score_layers(run: dict, kept: list, lomo_pm, pm_in) -> tuple[list[dict], float, float]:
    """The per-layer rows of one run, and its measured layers' summed time and CARM bound time."""
    rows, measured_t, bound_t = [], 0.0, 0.0
    for layer, bound_s, busy, excluded in kept:
        t, t_cal = layer["time_s"], layer.get("calibrated_time_s_leave_one_model_out")
        pred = {HEADLINE: _layer_power(lomo_pm, layer, busy, bound_s, t_cal) if lomo_pm and t_cal else None,
                "carm_point": busy,
                "duty_lomo_measured_time": _layer_power(lomo_pm, layer, busy, bound_s, t) if lomo_pm else None,
                "duty_in_sample_measured_time": _layer_power(pm_in, layer, busy, bound_s, t) if pm_in else None}
        measured_t += t
        bound_t += bound_s
        power = layer.get("power_w")
        energy = layer.get("energy_j") or (power * t if power else None)
        head = pred[HEADLINE]
        rows.append({"run": Path(run["file"]).name, "source": run["source"], "model": run["model"],
                     "backend": run["backend"], "precision": run["precision"], "batch_size": run["batch_size"],
                     "method": run.get("method"), "layer_window_s": run.get("layer_window_s"), "layer": layer["name"],
                     "type": layer["type"], "path": layer["path"], "level": layer["level"],
                     "scored": excluded is None, "excluded": excluded, "measured_time_s": t,
                     "measured_power_w": power, "measured_energy_j": energy, "calibrated_time_s": t_cal,
                     "calibrated_time_err": error(t_cal, t), "carm_bound_time_s": bound_s,
                     "carm_bound_time_err": error(bound_s, t), "predicted_power_w_by_variant": pred,
                     "power_err_by_variant": {k: error(p, power) for k, p in pred.items()},
                     "headline_power_err": error(head, power),
                     "headline_energy_err_given_time": error(head * t if head is not None else None, energy),
                     "headline_energy_err_calibrated_time": error(head * t_cal if head is not None and t_cal else None,
                                                                  energy)})
    return rows, measured_t, bound_t


def _score_whole(run: dict, rows: list[dict], measured_t: float, bound_t: float, carm, pm, lomo_pm) -> dict | None:
    """One run's whole-model row: the measured reference and, per calibration ("in_sample", "leave_one_model_out"),
    the calibrated time and the headline power and energy per sample; None without a reference power and time, or
    with neither a measured layer nor a calibrated figure."""
    ref, calibrated = run.get("whole") or {}, run.get("calibrated") or {}
    if not (ref.get("power_w") and ref.get("time_s")) or not (measured_t or any(calibrated.values())):
        return None
    batch = run["batch_size"]
    measured_e = ref.get("energy_j") or ref["power_w"] * ref["time_s"]
    row = {"run": Path(run["file"]).name, "source": run["source"], "date": run.get("date"), "model": run["model"],
           "backend": run["backend"], "precision": run["precision"], "batch_size": batch,
           "layers_in_policy_dtype": run.get("layers_in_policy_dtype", True), "method": run.get("method"),
           "reference": run["reference"], "reference_execution": ref.get("execution"),
           "measured_power_w": ref["power_w"], "measured_time_s": ref["time_s"],
           "measured_energy_per_sample_j": measured_e / batch, "sum_layer_time_s": measured_t,
           "carm_bound_time_s": bound_t}
    for variant, cal in calibrated.items():
        if not cal:
            row[f"calibrated_{variant}"] = None
            continue
        parts = [(Work(fl, by, pa, le), t, n) for fl, by, pa, le, t, n in cal["layers"]
                 if _covered({"flops": fl, "bytes": by, "path": pa, "level": le}, carm, pm)]
        busy = [(busy_power_w(carm, pm, w), predicted_time_energy(carm, pm, w.flops, w.bytes, w.path, w.level)[0],
                 t, n, w.path) for w, t, n in parts]
        total = sum(t for _, _, t, _, _ in busy)
        carm_w = sum(b * t for b, _, t, _, _ in busy) / total if total else None
        duty_w = lomo_pm.mean_duty_power_w(busy, cal["gpu_share"]) if lomo_pm and total else None
        whole_s = cal["whole_time_s"]
        energy = duty_w * whole_s if duty_w is not None else None
        row[f"calibrated_{variant}"] = {
            "time_s": whole_s, "time_err": error(whole_s, ref["time_s"]), "gpu_share": cal["gpu_share"],
            "carm_point_power_err": error(carm_w, ref["power_w"]),
            "duty_lomo_predicted_power_w": duty_w, "duty_lomo_power_err": error(duty_w, ref["power_w"]),
            "duty_lomo_predicted_energy_per_sample_j": energy / batch if energy is not None else None,
            "duty_lomo_energy_per_sample_err": error(energy, measured_e)}
    return row


BREAKDOWNS = {"by_source": "source", "by_model": "model", "by_backend": "backend", "by_precision": "precision",
              "by_batch_size": "batch_size", "by_layer_window_s": "layer_window_s"}
TIME_BUCKETS_S = (1e-5, 2e-5, 5e-5, 1e-4, 3e-4, 1e-3)   # per-call time buckets (measured time): where the curve acts


def _time_bucket(t: float) -> str:
    lo = 0.0
    for hi in TIME_BUCKETS_S:
        if t < hi:
            return f"[{lo * 1e6:g}, {hi * 1e6:g}) us"
        lo = hi
    return f">= {lo * 1e6:g} us"


def _variant_stats(rows: list[dict], variant: str) -> dict:
    errs = [e for e in (r["power_err_by_variant"].get(variant) for r in rows) if e is not None]
    return {"n": len(errs), "power_median_abs_err": median_abs(errs),
            "power_median_err": statistics.median(errs) if errs else None}


def _breakdown(rows: list[dict], variant: str) -> dict:
    out = {name: {str(v): _variant_stats([r for r in rows if r[key] == v], variant)
                  for v in sorted({r[key] for r in rows}, key=str)} for name, key in BREAKDOWNS.items()}
    out["by_layer_class"] = {c: _variant_stats([r for r in rows if layer_class(r["type"]) == c], variant)
                             for c in sorted({layer_class(r["type"]) for r in rows})}
    buckets = dict.fromkeys(_time_bucket(r["measured_time_s"]) for r in sorted(rows, key=lambda r: r["measured_time_s"]))
    out["by_call_time"] = {b: _variant_stats([r for r in rows if _time_bucket(r["measured_time_s"]) == b], variant)
                           for b in buckets}
    return out


def noise_floor(values: list[tuple[tuple, float]]) -> dict:
    """How far one measured power lies from its configuration's median over the records that measured it more than
    once ((configuration, power) pairs): the error no model can go below."""
    groups: dict[tuple, list[float]] = {}
    for key, power in values:
        groups.setdefault(key, []).append(power)
    devs = [p / statistics.median(ps) - 1 for ps in groups.values() if len(ps) >= 2 for p in ps]
    return {"power_median_abs_dev": median_abs(devs), "n": len(devs),
            "configurations": sum(1 for ps in groups.values() if len(ps) >= 2)}


def _models_summary(models: list[dict]) -> dict:
    def cal(variant, key, rows=models):
        return median_abs((r.get(f"calibrated_{variant}") or {}).get(key) for r in rows)

    def by(key, field):
        return {str(v): {"n": len(rs), "median_abs_err": cal("leave_one_model_out", field, rs)}
                for v in sorted({r[key] for r in models}, key=str) for rs in [[r for r in models if r[key] == v]]}

    return {"n": len(models),
            "headline": {
                "variant": "the layers' headline powers at their calibrated times (leave one model out: duty curves "
                           "and calibration), energy per sample with the calibrated whole-model time",
                "n": sum(1 for r in models if (r.get("calibrated_leave_one_model_out") or {}).get("duty_lomo_power_err")
                         is not None),
                "power_median_abs_err": cal("leave_one_model_out", "duty_lomo_power_err"),
                "energy_per_sample_median_abs_err_calibrated_time": cal("leave_one_model_out",
                                                                        "duty_lomo_energy_per_sample_err"),
                "time_median_abs_err": cal("leave_one_model_out", "time_err"),
                "energy_per_sample_median_abs_err_in_sample_calibrated_time": cal("in_sample",
                                                                                 "duty_lomo_energy_per_sample_err"),
                "time_median_abs_err_in_sample": cal("in_sample", "time_err"),
                "carm_point_power_median_abs_err": cal("leave_one_model_out", "carm_point_power_err"),
                "by_model": by("model", "duty_lomo_energy_per_sample_err"),
                "by_backend": by("backend", "duty_lomo_energy_per_sample_err"),
                "by_source": by("source", "duty_lomo_energy_per_sample_err"),
                "power_by_model": by("model", "duty_lomo_power_err"),
                "time_by_source": by("source", "time_err")},
            "measurement_noise_floor": noise_floor(
                [((r["model"], r["backend"], r["precision"], r["batch_size"], r["reference_execution"]),
                  r["measured_power_w"]) for r in models])}


def summary(layers: list[dict], models: list[dict], min_layer_window_s: float = 0.5) -> dict:
    """The figures of a validation: per layer over the scored layers (each variant with its breakdowns), per whole
    model (_models_summary), and which targets the headline meets."""
    scored = [r for r in layers if r["scored"]]
    head = [r for r in scored if r["headline_power_err"] is not None]
    power = median_abs(r["headline_power_err"] for r in head)
    energy = median_abs(r["headline_energy_err_given_time"] for r in head)
    m = _models_summary(models)
    mh = m["headline"]

    def met(value, target, ok=True):
        return None if value is None else bool(ok and value <= target)

    return {
        "headline_variant": HEADLINE, "n": len(head), "power_median_abs_err": power, "energy_median_abs_err": energy,
        "energy_median_abs_err_calibrated_time": median_abs(r["headline_energy_err_calibrated_time"] for r in head),
        "time_median_abs_err": median_abs(r["calibrated_time_err"] for r in head),
        "carm_point_power_median_abs_err": median_abs(r["power_err_by_variant"]["carm_point"] for r in scored),
        "carm_bound_time_median_abs_err": median_abs(r["carm_bound_time_err"] for r in scored),
        "variants": {k: {"what": what, **_variant_stats(scored, k), "breakdown": _breakdown(scored, k)}
                     for k, what in VARIANTS.items()},
        "filters": {"min_layer_window_s": min_layer_window_s, "evaluated": len(layers), "scored": len(scored),
                    "removed": {k: sum(1 for r in layers if r["excluded"] == k) for k in EXCLUSIONS},
                    "why": EXCLUSIONS},
        "measurement_noise_floor": noise_floor([((r["model"], r["backend"], r["precision"], r["batch_size"],
                                                  r["layer"]), r["measured_power_w"]) for r in scored]),
        "models": m,
        "targets": {**TARGETS,
                    "layer_power_met": met(power, TARGETS["layer_power"], len(head) >= TARGETS["layer_power_min_n"]),
                    "model_power_met": met(mh["power_median_abs_err"], TARGETS["model_power"]),
                    "layer_energy_given_time_met": met(energy, TARGETS["layer_energy_given_time"]),
                    "model_energy_per_sample_calibrated_time_met": met(
                        mh["energy_per_sample_median_abs_err_calibrated_time"],
                        TARGETS["model_energy_per_sample_calibrated_time"])}}


# The per-layer rows as written: one short list per layer (the file stays small).
LAYER_COLUMNS = ("run", "layer", "type", "path", "level", "excluded", "measured_time_s", "measured_power_w",
                 "measured_energy_j", "calibrated_time_s", "carm_bound_time_s") + tuple(f"power_w:{k}" for k in VARIANTS)
RUN_COLUMNS = ("file", "source", "model", "backend", "precision", "batch_size", "method", "layer_window_s")


def compact_layers(layers: list[dict]) -> dict:
    """{"runs_columns", "runs", "columns", "rows"}: each run once (by folder and file: folders hold files of the same
    name), each layer one list of LAYER_COLUMNS, its "run" the index of its run; floats to 5 significant digits."""
    runs: dict[tuple, int] = {}
    meta, rows = [], []
    for r in layers:
        key = (r["source"], r["run"])
        if key not in runs:
            runs[key] = len(runs)
            meta.append([r["run"], *(r[c] for c in RUN_COLUMNS[1:])])
        values = {**r, "run": runs[key], **{f"power_w:{k}": v for k, v in r["predicted_power_w_by_variant"].items()}}
        rows.append([float(f"{v:.5g}") if isinstance(v, float) else v for v in (values.get(c) for c in LAYER_COLUMNS)])
    return {"runs_columns": list(RUN_COLUMNS), "runs": meta, "columns": list(LAYER_COLUMNS),
            "excluded_null_means": "scored", "rows": rows}
