"""What a measured run teaches: its layers' measurements laid over the model's predicted rows, and the calibration
samples taken from them, for this GPU's cache (a measured analysis) or a shipped calibration (recorded runs)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterable
from pathlib import Path

from carm_advisor.calibration import (
    GPU_TIME_EXECUTIONS,
    Calibration,
    Sample,
    WholeSample,
    layer_execution,
    layers_valid,
    samples_from_rows,
    store_calibration,
    whole_from_run,
)
from carm_advisor.carm.roofline import CARM
from carm_advisor.measure.records import SCHEMA as RECORD_SCHEMA
from carm_advisor.measure.records import RunMeasurement
from carm_advisor.models.builder import build, model_spec
from carm_advisor.models.loader import image_data_format, load_model
from carm_advisor.predict import Predictor, resolve_math_mode
from carm_advisor.profiles.profile import Profile, load_profile
from carm_advisor.results import LayerRow
from carm_advisor.units import named_list

# A measured layer counts as above every roof only when it beats the nearest by more than this factor
# (timing noise and the profile's own spread).
ABOVE_ROOF_TOLERANCE = 1.02


def part_shares(rows: list, measured_names) -> dict[int, tuple[float, str]]:
    """id(row) -> (share, measured name) for each row that is a part of a layer measured as one call.

    A layer the cost model splits into parts ("name:depthwise", "name:pointwise": SeparableConv) is
    measured as one call "name": each part gets the measured time and energy in proportion to its
    CARM bound time (`predicted_time_s`; equal shares where no part has a bound). `rows`: objects with
    `.name` and `.predicted_time_s` (LayerRow, or a Predictor's rows)."""
    parts: dict[str, list] = {}
    for row in rows:
        base, sep, _ = row.name.rpartition(":")
        if sep and base and row.name not in measured_names and base in measured_names:
            parts.setdefault(base, []).append(row)
    share: dict[int, tuple[float, str]] = {}
    for base, group in parts.items():
        bounds = [r.predicted_time_s or 0.0 for r in group]
        total = sum(bounds)
        for r, b in zip(group, bounds):
            share[id(r)] = (b / total if total > 0 else 1.0 / len(group), base)
    return share


def merge_measurements(rows: list[LayerRow], run: RunMeasurement, profile: Profile) -> list[str]:
    """Attach a run's measured time/energy (and counter intensity) to predicted rows; return warnings.

    rows: a Predictor's rows for the same model and batch size. A measured layer is rebound
    to the roof it sits under nearest; `predicted_bound` keeps the CARM's bound.
    """
    warnings: list[str] = []
    by_name = {m.name: m for m in run.layers}
    carm = profile.carm()
    share = part_shares(rows, by_name)
    for row in rows:
        frac, base = share.get(id(row), (1.0, row.name))
        m = by_name.get(base)
        if m is None or m.time_s is None:
            continue
        row.measured = True
        row.time_s = m.time_s * frac
        row.energy_j = m.energy_j * frac if m.energy_j is not None else None
        row.power_w, row.sm_clock_mhz, row.time_spread = m.power_w, m.sm_clock_mhz, m.time_spread
        if base != row.name:
            note = (f"measured as one call '{base}' ({m.time_s * 1e6:.1f} us); this part's share {frac:.3f} "
                    f"is its CARM bound time over the parts' sum")
            row.notes = f"{row.notes}; {note}" if row.notes else note
        counters = getattr(m, "counters", None) or {}
        flops = row.flops
        if counters.get("flops"):
            flops = counters["flops"]
        if counters.get("ai"):
            row.ai, row.ai_source = counters["ai"], "counters"
        if not row.known or not flops or not row.ai:
            continue
        achieved = flops / m.time_s
        # The roofs that can bound this layer: its own compute path and every memory slope.
        own = CARM({row.path: carm.peak_flops_per_s[row.path]}, carm.bandwidth_bytes_per_s)
        roof = own.nearest_roof_above(row.ai, achieved / ABOVE_ROOF_TOLERANCE)
        if roof is None:
            row.bound = "above-roof"
            warnings.append(
                f"layer '{row.name}' measured {achieved / 1e12:.1f} TFLOP/s at AI {row.ai:.1f}, above every roof "
                f"of the profile: the profile or the layer's cost model is wrong"
            )
        else:
            row.bound = roof[0]
            row.attainable_flops_per_s = roof[1]
    missing = [r.name for r in rows if r.known and (r.flops or r.bytes) and not r.measured]
    if missing and run.layers:
        warnings.append(f"{len(missing)} layer(s) have no measurement: {named_list(missing, 5)}")
    return warnings


def learn_from(run, rows: list[LayerRow], model_name: str) -> None:
    """A measured analysis extends this GPU's cached calibration (never fails the analysis)."""
    try:
        store_calibration(run.device or {}, Calibration(
            samples_from_rows(rows, run.backend, model_name, layer_execution(run)), whole_from_run(run, rows, model_name),
            {"records": [f"{model_name}/{run.backend}/{run.precision}/b{run.batch_size} ({run.date})"]},
        ))
    except OSError as exc:
        warnings.warn(f"carm_advisor: could not extend the calibration cache: {exc}", RuntimeWarning, stacklevel=3)


def rebuilt_model(model_name: str, precision: str, layout: str):
    """A recorded model built again on the CPU after keras.backend.clear_session(): auto-named layers ("conv2d_7") take
    their number from a per-process counter, and only a cleared one gives the names the recording process gave (a model
    built first there); a model built after others (InceptionV3 after Xception) matched few of its measured layers."""
    import keras

    keras.backend.clear_session()
    spec = model_spec(model_name)
    if spec.kind == "builder":   # a "module:function" builder, built as the recording process built it
        return build(spec, precision, layout, seed=0)
    with image_data_format(layout):
        return load_model(model_name, precision=precision)[0]


def rows_for_run(run, profile=None, model=None) -> list:
    """Rebuild the run's model (by its recorded name, precision and layout) and merge the measurement
    into its CARM rows. `model` skips the rebuild."""
    profile = profile or load_profile()
    if model is None:
        model = rebuilt_model(run.model_name, run.precision, run.layout)
    rows = Predictor(profile, resolve_math_mode(run.backend, run.math_mode), backend=run.backend).rows(model, run.batch_size)
    merge_measurements(rows, run, profile)
    return rows


def record_files(paths: Iterable[str | Path]) -> list[Path]:
    """RunMeasurement JSON files (schema carm-advisor/measurements/1) under the given files and folders, each once,
    in the order given (a folder's files sorted); other files are skipped."""
    found: list[Path] = []
    for p in map(Path, paths):
        for f in sorted(p.rglob("*.json")) if p.is_dir() else [p]:
            if f.resolve() in {g.resolve() for g in found}:
                continue   # named twice (a folder and a file in it): one record is one sample set
            try:
                if json.loads(f.read_text()).get("schema") == RECORD_SCHEMA:
                    found.append(f)
            except (OSError, ValueError, AttributeError):
                continue
    return found


def load_records(paths: Iterable[str | Path]) -> list[RunMeasurement]:
    """The RunMeasurements under `paths` (record_files) that name their model."""
    runs = [RunMeasurement.from_json(f) for f in record_files(paths)]
    return [r for r in runs if r.model_name]


def fit_runs(runs: Iterable, profile=None) -> Calibration:
    """A calibration from recorded RunMeasurements (their models rebuilt on the CPU, shapes only).

    Layers timed eagerly alone are left out of the layer samples (their time is dispatch, not GPU
    work), and so are a record's layers timed at another precision than the model's (layers_valid);
    the run's whole-model figures still count.
    """
    samples: list[Sample] = []
    whole: list[WholeSample] = []
    sources, devices = [], []
    for run in runs:
        run = dataclasses.replace(run, layers=[m for m in run.layers if m.execution in GPU_TIME_EXECUTIONS])
        rows = rows_for_run(run, profile)
        if layers_valid(run):
            samples += samples_from_rows(rows, run.backend, run.model_name, layer_execution(run))
        whole += whole_from_run(run, rows, run.model_name)
        sources.append(f"{run.model_name}/{run.backend}/{run.precision}/b{run.batch_size} ({run.date})")
        devices.append((run.device or {}).get("name"))
    device = max(set(devices), key=devices.count) if devices else None
    return Calibration(samples, whole, {"records": sources, "device": device})
