"""analyze(): Keras model -> layer costs -> CARM placement (+ measurements) -> Report."""

from __future__ import annotations

import contextlib
import os
import re
import warnings as pywarnings
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from carm_advisor.advise.recommend import recommend
from carm_advisor.calibration import Calibration, load_calibration
from carm_advisor.calibration.policy import whole_model_execution
from carm_advisor.calibration.store import calibration_notes, whole_execution_of, with_borrowed
from carm_advisor.carm.dvfs import Work, clock_advice
from carm_advisor.errors import CarmError, MeasurementError
from carm_advisor.learn import learn_from, merge_measurements
from carm_advisor.mapping import map_model
from carm_advisor.mapping.input_shapes import shaped_model
from carm_advisor.mapping.memory import does_not_fit, footprint_lower_bound, memory_bytes_of
from carm_advisor.mapping.walker import fixed_batch_sizes
from carm_advisor.measure import backends
from carm_advisor.measure.run import measure_run
from carm_advisor.models.builder import layer_policies, model_policy
from carm_advisor.power.nvml import gpu_count, open_gpu
from carm_advisor.predict import Predictor, resolve_math_mode, whole_batch_range, whole_model_power_w
from carm_advisor.profiles.profile import Profile, load_profile
from carm_advisor.report.model import Report
from carm_advisor.report.render import (
    UNFIT,
    launch_floor_warnings,
    missing_roofs_text,
    recurrent_caution,
    recurrent_layers,
)
from carm_advisor.results import DeviceInfo, LayerRow, MeasurementInfo, ModelInfo
from carm_advisor.units import named_list, si


def ceilings_summary(profile: Profile) -> dict[str, Any]:
    return {
        k: {"label": c.label, "kind": c.kind, "value": c.value, "unit": c.unit, "source": c.provenance.get("source"),
            "sm_clock_mhz": c.sm_clock_mhz, "power_w": c.power_w}
        for k, c in sorted(profile.ceilings.items(), key=lambda kv: (kv[1].kind, kv[0]))
    }


def _compute_dtypes_at(model, precision: str | None) -> tuple[dict[str, str] | None, list[str]]:
    """(map_model's compute_dtype, a warning or none) for analysing `model` at Keras policy `precision`, as a
    rebuild under it would run (tune.builder.rebuild_under_policy): the layers under the model's own policy
    (tune.builder.model_policy) compute at `precision`'s dtype, layers pinned to another policy (a mixed model's float32
    output layer) keep theirs. None where `precision` is None or the model's own: each layer's own dtype."""
    if precision is None:
        return None, []
    own = model_policy(model)
    if precision == own:
        return None, []
    pinned = [f"{name} ({policy})" for name, policy in layer_policies(model) if policy != own]
    said = []
    if pinned:
        said.append(f"precision {precision}: {len(pinned)} layer(s) pinned to a dtype policy other than the model's "
                    f"({own}) keep it: {named_list(pinned, 5)}")
    return {own: _PRECISION_DTYPE[precision]}, said


def _model_layout(model) -> str:
    import keras

    for layer in model._flatten_layers(include_self=False) if hasattr(model, "_flatten_layers") else []:
        fmt = getattr(layer, "data_format", None)
        if fmt in ("channels_first", "channels_last"):
            return fmt
    return keras.config.image_data_format()


def analyze(
    model,
    batch_size: int = 1,
    profile: Profile | str | None = None,
    precision: str | None = None,
    measure: bool | str = "auto",
    from_measurements=None,
    counters: bool = False,
    strict: bool = False,
    name: str | None = None,
    progress: bool = True,
    measure_options: dict | None = None,
    calibration: Any = True,
    verify: bool = False,
    verify_runner: Any = None,
    input_shapes: Any = None,
) -> Report:
    """Map every layer of a built Keras model onto a CARM and advise.

    batch_size: samples per call. profile: a Profile, a JSON path or an embedded name; default the
    measured profile of this GPU if one is cached, else the recorded H200. precision: a Keras dtype
    policy (PRECISIONS, e.g. "mixed_bfloat16") to analyse the model at, as a rebuild under it would run: layers
    under the model's own policy take its compute dtype, layers pinned to another policy keep theirs (the report's
    warnings name them); default each layer's dtype policy. measure: "auto"
    measures on an NVIDIA GPU and predicts elsewhere; True insists; False never measures.
    from_measurements: a RunMeasurement or a JSON path recorded earlier (replay). input_shapes: the model's input
    shapes, batch first, in order or {name: shape}; a keras.Input in place of a shape keeps its dtype (integer ids):
    a Functional model's inputs of unknown size (keras_hub's BERT: {"token_ids": keras.Input((128,), dtype="int32"),
    ...}, or one [(None, 128)] for all of them), which it is then mapped, measured and verified on; a subclassed
    model's call() arguments where Keras recorded fewer (mapping/input_shapes.py says how each is read).
    """
    with shaped_model(model, input_shapes) as shaped:
        return _analyze(shaped, batch_size, profile, precision, measure, from_measurements, counters, strict, name,
                        progress, measure_options, calibration, verify, verify_runner)


def _analyze(model, batch_size, profile, precision, measure, from_measurements, counters, strict, name, progress,
             measure_options, calibration, verify, verify_runner) -> Report:
    import keras

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, received: {batch_size!r}")
    backend = keras.backend.backend()
    _compute_dtype_of(precision)   # a precision analyze() cannot cost is refused before anything is measured

    measured_now = from_measurements is None
    run = _load_or_measure(model, batch_size, measure, from_measurements, counters, progress, measure_options or {})
    if run is not None:
        backend = getattr(run, "backend", None) or backend
    if profile is None or isinstance(profile, str):
        profile = _default_profile(profile, run, measured_now, progress)
    math_mode = resolve_math_mode(backend, getattr(run, "math_mode", None) if run is not None else None)
    execution, without_xla = whole_execution_of(model, backend, getattr(run, "inference", None))
    calib = with_borrowed(_calibration_of(calibration, run, profile), backend, execution)

    predictor = Predictor(profile, math_mode, backend=backend, calibration=calib, strict=strict)
    compute_dtype, pinned_said = _compute_dtypes_at(model, precision)
    # The mapping's own warnings (map_model runs more than once below) go to the report, once each.
    with mapping_warnings() as mapping_said:
        for_model = predictor.for_model(model, batch_size, compute_dtype)
        rows = for_model.rows()
        warnings: list[str] = list(pinned_said)
        if run is not None:
            warnings += merge_measurements(rows, run, profile)
            _check_same_model(rows, run, from_measurements, name or getattr(model, "name", "model"))
        unknown = [r for r in rows if not r.known]
        if unknown:
            warnings.append(
                f"{len(unknown)} layer(s) have no cost model and are left out of the totals: "
                + named_list([f"{r.name} ({r.type})" for r in unknown], 5)
            )
        placed = missing_roofs_text(rows)
        if placed:   # layers on another roof than the one they run on: the header says it too
            warnings += placed.split("\n")
        recurrent = recurrent_layers(rows)
        if recurrent:   # in the report's warnings (its JSON too), not only in the legend under the console table
            warnings.append(recurrent_caution(recurrent))
        warnings += fixed_batch_warnings(model, batch_size)
        warnings += memory_warnings(model, batch_size, compute_dtype, profile)
        warnings += calibration_range_warnings(calib, backend, batch_size, execution)
        warnings += launch_floor_warnings(rows, profile, calib)
        precision_name = precision or model_policy(model)
        model_info = ModelInfo(
            name=name or getattr(model, "name", "model"),
            batch_size=batch_size,
            precision=precision_name,
            layout=_model_layout(model),
            backend=backend,
            math_mode=math_mode,
            params=int(model.count_params()) if model.built else None,
        )
        device = DeviceInfo(
            name=getattr(run, "device", {}).get("name") if run is not None else profile.name,
            source="measured" if run is not None else "profile",
            profile=profile.name,
            profile_source=profile.source,
            profile_provenance=profile.provenance,
            extra=dict(run.device or {}) if run is not None else {},
        )
        measurement = None
        if run is not None:
            measurement = MeasurementInfo(
                inference=_as_dict(getattr(run, "inference", None)),
                training_step=_as_dict(getattr(run, "training_step", None)),
                inference_graph=_as_dict(getattr(run, "inference_graph", None)),
                date=getattr(run, "date", None),
                command=getattr(run, "command", None),
            )
        report = Report(
            model=model_info, device=device, ceilings=ceilings_summary(profile), layers=rows,
            recommendations=[], measurement=measurement, warnings=warnings, profile=profile,
        )
        report.calibration = _whole_model_calibration(rows, calib, backend, model_info.name, profile.power_model,
                                                      execution)
        report.calibration.update(calibration_notes(calib, backend, execution, without_xla, report.calibration))
        if run is not None and measured_now and run.layers:
            learn_from(run, rows, model_info.name)
        report.clocks = energy_optimal_clocks(rows, profile)
        report.recommendations = recommend(report, for_model)
    report.warnings[:0] = mapping_said
    if verify and verify_runner is None and not _can_verify():
        report.warnings.append("verify ignored: no NVIDIA GPU is usable here, so no recommendation was measured "
                               "(timing the changes on this CPU would say nothing of a GPU)")
        verify = False
    if verify:
        from carm_advisor.advise.verify import verify_recommendations
        from carm_advisor.models.loader import application_names

        key = str(model_info.name).lower().replace("-", "").replace("_", "")
        verify_recommendations(report, runner=verify_runner, model=model,
                               model_spec=model_info.name if key in application_names() else None)
    return report


def _check_same_model(rows: list[LayerRow], run, source, model_name: str) -> None:
    """Refuse measurements most of whose layers are not layers of the model analysed (a recording of another
    model): its whole-model times would stand in the header as this model's. A VGG16 recording replayed onto
    ResNet50 matched one of its 22 layers by name (both have 'predictions')."""
    names = {r.name.split("/")[-1].split(":")[0].split("#")[0] for r in rows} | {r.name for r in rows}
    matched = [m.name for m in run.layers if m.name in names]
    if not run.layers or 2 * len(matched) >= len(run.layers):
        return
    where = source if isinstance(source, str) else "the measurements"
    recorded = getattr(run, "model_name", "") or "another model"
    raise MeasurementError(
        f"Expected measurements of {model_name}, Received: {where}, a recording of {recorded}: "
        f"{len(matched)} of its {len(run.layers)} layers ({named_list([m.name for m in run.layers], 3)}) "
        f"{'is a layer' if len(matched) == 1 else 'are layers'} of {model_name}")


def _gpu_usable() -> bool:
    """An NVIDIA GPU that NVML and the Keras backend both see: where analyze() measures."""
    return gpu_count() > 0 and bool(backends.get().has_gpu())


def _can_verify() -> bool:
    """Whether --verify's own runners can measure on a GPU here (or replay recorded trials: tests)."""
    return bool(os.environ.get("CARM_ADVISOR_FAKE_TRIALS")) or _gpu_usable()


@contextlib.contextmanager
def mapping_warnings():
    """(analyze() and tune()) The mapping's own warnings (a subclassed model whose call() could not be traced: its totals are a lower
    bound) collected for the report's warnings, once each, instead of going to stderr. Only how warnings are shown
    is swapped for the block: filters and the modules' once-only registries are left as they are, so any other
    warning is shown (or not) as it would have been."""
    said: list[str] = []
    shown = pywarnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if text.startswith(MAPPING_WARNING_PREFIX):
            text = text[len("carm_advisor: "):]
            # One line per model: the what-if passes (another batch, another precision) map it again, and their
            # messages differ only in the shapes of the failed trace; tune's builds of it differ in the number
            # Keras appends to a repeated model name.
            if not any(_traced_model(s) == _traced_model(text) for s in said):
                said.append(text)
        else:
            shown(message, category, filename, lineno, file, line)

    pywarnings.showwarning = show
    try:
        yield said
    finally:
        pywarnings.showwarning = shown


MAPPING_WARNING_PREFIX = "carm_advisor: the call() of subclassed"


def _traced_model(text: str) -> str:
    """'the call() of subclassed model 'x_2' could not be traced ...' -> "... model 'x'"."""
    return re.sub(r"_\d+'$", "'", text.split(" could not be traced")[0])


def fixed_batch_warnings(model, batch_size: int) -> list[str]:
    """A warning where the model's inputs fix a batch size other than the one analysed: every figure is at
    `batch_size` (the mapping replaces the fixed batch in the layers' shapes), not at the model's own."""
    fixed = [b for b in fixed_batch_sizes(model) if b != batch_size]
    if not fixed:
        return []
    return [f"the model's inputs fix the batch size at {', '.join(map(str, fixed))}; every figure is for batch "
            f"size {batch_size} as asked (each layer's shapes with batch {batch_size}), not for the model's own"]


def memory_warnings(model, batch_size: int, compute_dtype: str | Mapping[str, str] | None,
                    profile: Profile) -> list[str]:
    """A warning where one call at this batch size cannot fit in the profile's GPU memory (unfit_batch); none where
    it may fit."""
    why = unfit_batch(model, batch_size, compute_dtype, profile)
    return [f"{why}; the figures are for a batch that does not fit in its memory"] if why else []


def check_batch_fits(model, batch_size: int, precision: str | None = None, profile: Profile | str | None = None,
                     measure: bool | str = "auto") -> None:
    """Refuse, before anything is analysed, measured or printed, a batch one call of which cannot fit in the GPU
    memory of the profile analyze() would place it on (unfit_batch). Where analyze() would measure, the profile
    is this GPU's, known only then: nothing is checked here (analyze's report says it)."""
    if profile is None and measure is not False and _gpu_usable():
        return
    if not isinstance(profile, Profile):
        profile = _default_profile(profile, None)
    why = unfit_batch(model, batch_size, _compute_dtypes_at(model, precision)[0], profile)
    if why:
        raise CarmError(why)


def unfit_batch(model, batch_size: int, compute_dtype: str | Mapping[str, str] | None, profile: Profile) -> str | None:
    """Why one call at this batch size cannot fit in the profile's GPU memory, with the largest batch that can, or
    None where it may fit. The memory is a LOWER BOUND (mapping/memory.py: weights at their storage dtype + the
    largest matmul layer's input + output at the batch and compute dtype), linear in the batch: no batch above
    (memory - weights) // (the layer's bytes per sample) fits."""
    try:
        costs = map_model(model, batch_size=batch_size, compute_dtype=compute_dtype)
    except Exception:   # the rows were mapped already; a mapping problem is reported there
        return None
    footprint = footprint_lower_bound(model, costs)
    why = does_not_fit(footprint, profile)
    if not why:
        return None
    per_sample = footprint.largest_layer_bytes / batch_size
    capacity = memory_bytes_of(profile)
    largest = int((capacity - footprint.weights_bytes) // per_sample) if per_sample and capacity else 0
    limit = (f"no batch above {largest:,} fits (one call holds {si(per_sample, 'B')} more for each sample)"
             if largest >= 1 else "its weights alone do not fit")
    return f"batch size {batch_size} {UNFIT} {profile.name}: one call {why}; {limit}"


def calibration_range_warnings(calib, backend: str, batch_size: int, execution: str | None = None) -> list[str]:
    """A warning where the batch size lies outside the batch sizes of the calibration's whole-model records of
    this backend's execution (`execution`, default whole_model_execution): the calibrated whole-model figure
    extrapolates. None without such records (no calibration, a backend it has none of, records that noted no
    batch size)."""
    if calib is None:
        return []
    execution = execution or whole_model_execution(backend)
    rng = whole_batch_range(calib, backend, execution)
    if rng is None or rng[0] <= batch_size <= rng[1]:
        return []
    return [f"batch size {batch_size} is outside the batch sizes the calibration's {backend} {execution} "
            f"whole-model records were measured at ({rng[0]}-{rng[1]}): the calibrated whole-model figures "
            f"are an extrapolation"]


def _calibration_of(calibration, run, profile):
    """True: the shipped calibration (on its GPU's profile) with this GPU's cache; False/None: the bound alone."""
    if calibration is True:
        return load_calibration(getattr(run, "device", None) if run is not None else None, profile.name)
    if calibration is None or calibration is False:
        return None
    if isinstance(calibration, Calibration):
        return calibration
    return Calibration.load(calibration)


def _whole_model_calibration(rows: list[LayerRow], calib, backend: str, model_name: str | None = None,
                             power_model=None, execution: str | None = None) -> dict[str, Any]:
    """The whole model as its user runs it (`execution`, default whole_model_execution), calibrated: its time, where
    the time comes from, and its power (predict.whole_model_power_w, None without a power model): the one
    current-energy figure the advice (measured_advice) and its verification (verify_recommendations) both use."""
    if calib is None:
        return {"source": "none: figures are CARM bounds"}
    execution = execution or whole_model_execution(backend)
    out = {"execution": execution, "whole_time_s": calib.whole_time_s(rows, backend, execution, model_name),
           "whole_source": calib.whole_describe(backend, execution, rows, model_name) if hasattr(calib, "whole_describe") else "",
           "whole_power_w": whole_model_power_w(rows, power_model, calib, backend, execution, model_name),
           "samples": len(calib.samples), "records": len(calib.provenance.get("records", []))}
    if backend == "torch":  # the GPU's time without dispatch, for the user who compiles or graphs
        out["graph_time_s"] = calib.whole_time_s(rows, backend, "cuda_graph")
    return out


def energy_optimal_clocks(rows: list[LayerRow], profile: Profile) -> dict | None:
    """Predicted energy-optimal SM clock per layer and for the whole model, where the profile's power
    model has a voltage curve (a sweep fit); None otherwise."""
    pm = profile.power_model
    if pm is None or pm.voltage is None:
        return None
    works = {r.name: Work(r.flops, r.bytes, r.path, r.level) for r in rows
             if r.known and (r.flops or r.bytes) and r.path in pm.joules_per_flop and r.level in pm.joules_per_byte}
    advice = clock_advice(profile.carm(), pm, works)
    for r in rows:
        a = advice["layers"].get(r.name)
        if a is not None:
            r.energy_optimal_sm_clock_mhz, r.energy_optimal_gain = a["sm_clock_mhz"], a["energy_gain"]
    return advice


def _as_dict(obj) -> dict | None:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    return asdict(obj) if is_dataclass(obj) else dict(vars(obj))


# The precisions analyze() accepts: the CLI's --precision choices (model_loader.KERAS_POLICIES), each with the
# compute dtype its layers run at. No integer or float8 policy: the cost model has no quantized layers, so one
# would put LayerNormalization, Add or softmax at 1 byte on the INT8 / FP8 Tensor Core roof.
_PRECISION_DTYPE = {
    "float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16", "float16": "float16",
    "bfloat16": "bfloat16",
}
PRECISIONS = tuple(_PRECISION_DTYPE)


def _compute_dtype_of(precision: str | None) -> str | None:
    if precision is None:
        return None
    if not isinstance(precision, str) or precision not in _PRECISION_DTYPE:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} (or None: each layer's own dtype "
                         f"policy), received: {precision!r}")
    return _PRECISION_DTYPE[precision]


def _default_profile(name: str | None, run, measured_now: bool = False, progress: bool = True) -> Profile:
    """A profile named (a file or a shipped profile's name) as given; for a measurement (`run`), its GPU's
    (measure/profile.profile_for_gpu: cached, else shipped for its model, else measured now when `measured_now`;
    never another GPU model's); with neither, the recorded H200 (profiles/profile.DEFAULT_EMBEDDED)."""
    if name is not None:
        return load_profile(name)
    if run is not None:
        from carm_advisor.measure.profile import profile_for_gpu

        return profile_for_gpu(run.device or {}, can_measure=measured_now, progress=progress).profile
    return load_profile()


def _load_or_measure(model, batch_size, measure, from_measurements, counters, progress, options) -> Any:
    if from_measurements is not None:
        from carm_advisor.measure.records import SCHEMA as MEASUREMENTS_SCHEMA
        from carm_advisor.measure.records import RunMeasurement

        if not isinstance(from_measurements, (str, bytes)) and hasattr(from_measurements, "layers"):
            run = from_measurements
        else:
            try:
                run = RunMeasurement.from_json(from_measurements)
            except UnicodeDecodeError as exc:   # a binary file: read_text fails before JSON is parsed
                raise MeasurementError(
                    f"Expected a measurements JSON file (schema '{MEASUREMENTS_SCHEMA}', UTF-8 text), Received: "
                    f"{from_measurements}, which is not text (byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{exc.start})") from None
        if run.batch_size != batch_size:
            raise MeasurementError(
                f"the measurements were taken at batch size {run.batch_size}, the analysis asks for {batch_size}"
            )
        return run
    if measure is False or measure is None:
        return None
    if not _gpu_usable():
        if measure is True:
            from carm_advisor.errors import GPUUnavailableError

            raise GPUUnavailableError("measure=True but no NVIDIA GPU is usable here (NVML or the Keras backend sees none)")
        return None
    gpu = options.pop("gpu", None) or open_gpu(0)
    method = options.pop("method", "profiled")
    if method == "profiled" and not counters and not options.get("training_step"):
        # torch: one profiled pass; jax: each distinct layer jitted once (one XLA program hides layers)
        from carm_advisor.measure import profiled

        if backends.active_backend() == "torch":
            try:
                return profiled.profile_run(model, batch_size=batch_size, gpu=gpu, progress=progress)
            except MeasurementError as exc:  # the profiler could not attribute kernels: time layers alone
                import warnings

                warnings.warn(f"carm_advisor: one-pass profile failed ({exc}); timing each layer alone",
                              RuntimeWarning, stacklevel=3)
        if backends.active_backend() == "jax":
            return profiled.measure_distinct_layers(model, batch_size=batch_size, gpu=gpu, progress=progress)
    return measure_run(model, batch_size=batch_size, gpu=gpu, counters=counters, progress=progress, **options)

