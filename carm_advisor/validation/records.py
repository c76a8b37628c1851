"""Recorded runs laid out for the validation: each RunMeasurement's model rebuilt on the CPU and predicted on a
profile, its measured layers joined to their rows, with the calibrated times of the calibration given (in sample)
and of that calibration without the run's model (leave one model out)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from carm_advisor.calibration import DISPATCHED_EXECUTIONS, REPLAYED_EXECUTIONS, layers_valid
from carm_advisor.learn import part_shares, rebuilt_model, record_files
from carm_advisor.measure.records import RunMeasurement
from carm_advisor.models.loader import image_data_format
from carm_advisor.predict import Predictor, apply_calibration, whole_model_layer_times


def whole_reference(run: RunMeasurement) -> tuple[str | None, dict]:
    """The whole-model measurement to compare with: the CUDA graph replay where there is one (torch), else
    `inference` (jax jit, torch eager); (None, {}) where neither has a time and a power."""
    for key in ("inference_graph", "inference"):
        m = getattr(run, key)
        if m is not None and m.time_s and m.power_w:
            return key, {"time_s": m.time_s, "power_w": m.power_w, "energy_j": m.energy_j, "execution": m.execution}
    return None, {}


def load_runs(paths: Iterable[str | Path], profile, calibration=None) -> list[dict]:
    """Every RunMeasurement under `paths` (files or folders, in the order given), one per measured run (the same
    run recorded twice counts once), laid out by run_layout. `calibration` None: no calibrated figure."""
    runs, seen, lomo_cache = [], set(), {}
    for source in map(Path, paths):
        for f in record_files([source]):
            run = RunMeasurement.from_json(f)
            if not run.model_name:
                continue
            graph, inference = run.inference_graph, run.inference
            key = (run.model_name, run.backend, run.precision, run.batch_size, run.layout, run.date,
                   run.settings.get("method"), round((inference.time_s if inference else None) or 0.0, 12),
                   round((graph.time_s if graph else None) or 0.0, 12))
            if key not in seen:
                seen.add(key)
                runs.append(run_layout(run, f, source.name, profile, calibration, lomo_cache))
    return runs


def run_layout(run: RunMeasurement, file: Path, source: str, profile, calibration, lomo_cache: dict) -> dict:
    """One run as the validation scores it: what it is, its whole-model reference (whole_reference), its layers
    (_layers) and its calibrated whole-model figures ("in_sample", "leave_one_model_out": _calibrated)."""
    ref_key, ref = whole_reference(run)
    layers, calibrated = _layers(run, profile, calibration, ref.get("execution"), lomo_cache)
    return {"file": str(file), "source": source, "date": run.date[:10], "layers_in_policy_dtype": layers_valid(run),
            "model": run.model_name, "backend": run.backend, "precision": run.precision,
            "batch_size": run.batch_size, "layout": run.layout, "method": run.settings.get("method"),
            "layer_window_s": run.settings.get("layer_window_s"), "reference": ref_key, "whole": ref,
            "calibrated": calibrated, "layers": layers}


def _layers(run: RunMeasurement, profile, calibration, execution: str | None, lomo_cache: dict) -> tuple[list, dict]:
    """The run's measured layers on the model's predicted rows, and its calibrated whole-model figures. A layer the
    cost model splits into parts (SeparableConv2D: "name:depthwise", "name:pointwise") is measured as one call: each
    part takes its share of the call's time and energy (learn.part_shares; `part_of` names the call, whose power is
    not the part's)."""
    model = rebuilt_model(run.model_name, run.precision, run.layout)
    with image_data_format(run.layout):
        rows = Predictor(profile, run.math_mode, backend=run.backend, calibration=calibration).rows(
            model, run.batch_size)
    by_name = {r.name: r for r in rows}
    shares = part_shares(rows, {m.name for m in run.layers})
    parts: dict[str, list] = {}
    for r in rows:
        if id(r) in shares:
            frac, base = shares[id(r)]
            parts.setdefault(base, []).append((r, frac))
    out = []
    for m in run.layers:
        whole = by_name.get(m.name)
        for row, frac in ([(whole, 1.0)] if whole is not None else parts.get(m.name, [])):
            if row.known:
                out.append({"name": row.name, "part_of": m.name if row is not whole else None, "type": m.type,
                            "flops": row.flops, "bytes": row.bytes, "path": row.path, "level": row.level,
                            "output_elements": row.output_elements, "execution": m.execution,
                            "time_s": _share(m.time_s, frac), "power_w": m.power_w,
                            "energy_j": _share(m.energy_j, frac), "sm_clock_mhz": m.sm_clock_mhz, "row": row})
    calibrated = {"in_sample": _calibrated(rows, calibration, run.backend, execution, run.model_name)}
    if calibration is not None:
        if run.model_name not in lomo_cache:
            lomo_cache[run.model_name] = calibration.without_model(run.model_name)
        lomo = lomo_cache[run.model_name]
        apply_calibration(rows, lomo, run.backend, profile)
        calibrated["leave_one_model_out"] = _calibrated(rows, lomo, run.backend, execution)
        for layer in out:
            row = layer["row"]
            layer["calibrated_time_s_leave_one_model_out"] = row.calibrated_time_s
            # replayed alone from a CUDA graph: one host launch per replay (the floor) paces small layers
            if layer["execution"] in REPLAYED_EXECUTIONS:
                layer["replay_floor_s_leave_one_model_out"] = lomo.replay_floor_s(run.backend)
            # jitted alone and dispatched from Python: the GPU works only the layer's in-model time per call
            if layer["execution"] in DISPATCHED_EXECUTIONS:
                layer["gpu_time_s_leave_one_model_out"] = lomo.in_model_time_s(
                    row.type, row.predicted_time_s, run.backend, layer["execution"], row.dtype)
    for layer in out:
        del layer["row"]
    return out, calibrated


def _share(value: float | None, frac: float) -> float | None:
    return value * frac if value is not None else None


def _calibrated(rows, calibration, backend: str, execution: str | None, model: str | None = None) -> dict | None:
    """A whole model as the product predicts it from rows already calibrated: its calibrated time for `model` (its
    own compiled records first where the calibration has any), and its layers (flops, bytes, path, level, time,
    output elements) at the times the whole-model power weights them with the GPU's share of the call
    (predict.whole_model_layer_times). None without a calibration, a reference execution or such a figure."""
    if calibration is None or execution is None:
        return None
    whole_s = calibration.whole_time_s(rows, backend, execution, model)
    times, share = whole_model_layer_times(rows, calibration, backend, execution, model)
    layers = [(r.flops, r.bytes, r.path, r.level, t, r.output_elements) for r, t in times]
    return {"whole_time_s": whole_s, "layers": layers, "gpu_share": share} if whole_s and layers else None
