"""The measurement record: what a GPU run measured, saved as JSON and loaded back for replay.

`carm-advise analyze --from-measurements FILE` and CI rebuild a whole report from a file written on
the H200, so `RunMeasurement.from_json` checks what it reads (schema string, required keys, types)
and fails with one line naming the first thing that is wrong.

Units are in the names: time_s (seconds per call), energy_j (joules per call), power_w, sm_clock_mhz.
A `*_spread` is (max - min) / median over the repeated windows (0 = identical windows).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from carm_advisor.errors import MeasurementError

SCHEMA = "carm-advisor/measurements/1"

# How a call ran: "eager" (framework dispatch per call, as model(x) does), "jit" (compiled: jax.jit,
# XLA), "cuda_graph" (torch: one captured CUDA graph replayed, the GPU work without the dispatch),
# "profiled" (torch: the layer's kernels' GPU time inside one profiled eager pass, measure/profiled.py).
EXECUTION_MODES = ("eager", "jit", "cuda_graph", "profiled")


@dataclass
class LayerMeasurement:
    """One layer call measured alone on synthetic inputs of its real shapes and dtypes.

    name is the walker's path (carm_advisor.mapping.walker.LayerCall.path): the key the report joins
    measured and analytic figures on. counters holds Nsight Compute figures (see measure/counters.py)
    or None when they were not collected.
    """

    name: str
    type: str
    time_s: float
    time_spread: float | None   # None: not finite (a window of ~zero time)
    repeats: int
    energy_j: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    execution: str = "eager"
    counters: dict | None = None
    # jax: the layer run back to back, `calls_per_dispatch` calls per jitted program (layers.
    # jax_back_to_back_fn): time_s, energy_j per layer call, power_w, sm_clock_mhz, time_spread. The power
    # of the layer as the GPU runs it inside the model; time_s above stays the per-dispatch time.
    back_to_back: dict | None = None


@dataclass
class ModelMeasurement:
    """The whole model, one call (inference) or one optimizer step (training), per batch."""

    time_s: float
    time_spread: float | None
    energy_j: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    repeats: int = 0
    execution: str = "eager"


@dataclass
class RunMeasurement:
    """Everything one measurement run produced, with the context needed to interpret it."""

    device: dict
    backend: str
    backend_version: str
    keras_version: str
    batch_size: int
    precision: str        # the Keras dtype policy name: "float32", "mixed_bfloat16", ...
    layout: str           # keras.config.image_data_format(): "channels_last" | "channels_first"
    math_mode: dict       # what float32 meant: {"conv": "tf32"|"fp32", "matmul": ..., "source": ...}
    date: str             # ISO 8601
    command: str
    layers: list[LayerMeasurement] = field(default_factory=list)
    inference: ModelMeasurement | None = None
    training_step: ModelMeasurement | None = None
    # torch on a GPU: inference replayed from one CUDA graph, the model's GPU time without dispatch, to
    # compare with the sum of the layers' CUDA-graph times. None elsewhere and in older files.
    inference_graph: ModelMeasurement | None = None
    wall_s: float = 0.0
    model_name: str = ""
    settings: dict = field(default_factory=dict)   # windows, repeats, warm-up used
    intensity_source: str = "analytic"             # "counters" when Nsight Compute measured the bytes
    schema: str = SCHEMA

    @property
    def jit_layers_in_policy_dtype(self) -> bool:
        """False where this record's layers jitted alone on jax ran in another precision than the model.

        Before settings["jax_layer_trace"] existed, jax layers were traced through layer.stateless_call,
        which skips Keras' autocast: under a mixed_* policy a layer with float32 variables (Conv2D,
        Dense, BatchNormalization...) computed in float32. Those per-layer "jit" times (and their
        energy) are not the mixed-precision layer's; the whole-model figures of the record are.
        """
        return not (self.backend == "jax" and self.precision.startswith("mixed")
                    and "jax_layer_trace" not in self.settings)

    def attach_counters(self, by_layer: dict | None) -> None:
        """Attach per-layer Nsight Compute counters (measure_counters' result) by layer name."""
        if by_layer is None:
            return
        self.intensity_source = "counters"
        for item in self.layers:
            found = by_layer.get(item.name)
            item.counters = found.to_dict() if found is not None else None

    # ---- writing ---------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return _finite(asdict(self))

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    # ---- reading ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "measurements") -> RunMeasurement:
        where = source
        if not isinstance(data, dict):
            raise MeasurementError(f"Expected a JSON object in {where}, Received: {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise MeasurementError(
                f"Expected schema '{SCHEMA}' in {where}, Received: schema={data.get('schema')!r}"
            )
        _check_fields(cls, data, where, skip={"layers", *_MODEL_KEYS})
        layers_data = data.get("layers", [])
        if not isinstance(layers_data, list):
            raise MeasurementError(f"Expected 'layers' to be a list in {where}, Received: {type(layers_data).__name__}")
        layers = []
        for i, item in enumerate(layers_data):
            if not isinstance(item, dict):
                raise MeasurementError(
                    f"Expected layers[{i}] to be an object in {where}, Received: {type(item).__name__}"
                )
            _check_fields(LayerMeasurement, item, f"{where} layers[{i}]")
            _check_execution(item, f"layers[{i}]", where)
            _check_layer_figures(item, f"{where} layers[{i}]")
            layers.append(LayerMeasurement(**_known(LayerMeasurement, item)))
        models = {}
        for key in _MODEL_KEYS:
            item = data.get(key)
            if item is None:
                models[key] = None
                continue
            if not isinstance(item, dict):
                raise MeasurementError(
                    f"Expected '{key}' to be an object or null in {where}, Received: {type(item).__name__}"
                )
            _check_fields(ModelMeasurement, item, f"{where} {key}")
            _check_execution(item, key, where)
            models[key] = ModelMeasurement(**_known(ModelMeasurement, item))
        rest = {k: v for k, v in _known(cls, data).items() if k not in ("layers", *_MODEL_KEYS)}
        return cls(layers=layers, **models, **rest)

    @classmethod
    def from_json(cls, path: str | Path) -> RunMeasurement:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise MeasurementError(f"Expected a readable measurements file, Received: {path} ({err.strerror})") from err
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise MeasurementError(
                f"Expected JSON in {path}, Received: invalid JSON at line {err.lineno} column {err.colno} ({err.msg})"
            ) from err
        return cls.from_dict(data, source=str(path))

    # ---- convenience -----------------------------------------------------------------------

    def layer(self, name: str) -> LayerMeasurement:
        for item in self.layers:
            if item.name == name:
                return item
        raise MeasurementError(f"Expected a measured layer named '{name}', Received: {[m.name for m in self.layers]}")

    @property
    def sum_layer_time_s(self) -> float:
        return sum(m.time_s for m in self.layers)


# ---- validation functions ----------------------------------------------------------------------

_MODEL_KEYS = ("inference", "training_step", "inference_graph")

# Per field: the JSON types it may hold and whether it must be present.
_NUMBER = (int, float)
_SPEC: dict[type, dict[str, tuple[tuple[type, ...], bool]]] = {
    LayerMeasurement: {
        "name": ((str,), True), "type": ((str,), True), "time_s": (_NUMBER, True),
        "time_spread": (_NUMBER, False), "repeats": ((int,), True),
        "energy_j": (_NUMBER, False), "power_w": (_NUMBER, False), "sm_clock_mhz": (_NUMBER, False),
        "execution": ((str,), False), "counters": ((dict,), False),
    },
    ModelMeasurement: {
        "time_s": (_NUMBER, True), "time_spread": (_NUMBER, False), "energy_j": (_NUMBER, False),
        "power_w": (_NUMBER, False), "sm_clock_mhz": (_NUMBER, False), "repeats": ((int,), False),
        "execution": ((str,), False),
    },
    RunMeasurement: {
        "schema": ((str,), True), "device": ((dict,), True), "backend": ((str,), True),
        "backend_version": ((str,), True), "keras_version": ((str,), True), "batch_size": ((int,), True),
        "precision": ((str,), True), "layout": ((str,), True), "math_mode": ((dict,), True),
        "date": ((str,), True), "command": ((str,), True), "layers": ((list,), True),
        "inference": ((dict,), False), "training_step": ((dict,), False),
        "inference_graph": ((dict,), False), "wall_s": (_NUMBER, False),
        "model_name": ((str,), False), "settings": ((dict,), False), "intensity_source": ((str,), False),
    },
}


def _check_execution(item: dict, label: str, where: str) -> None:
    if item.get("execution", "eager") not in EXECUTION_MODES:
        raise MeasurementError(
            f"Expected {label}.execution in {EXECUTION_MODES} in {where}, Received: {item.get('execution')!r}"
        )


def _check_fields(cls: type, data: dict, where: str, skip: set[str] = frozenset()) -> None:
    for name, (types, required) in _SPEC[cls].items():
        if name in skip and name in data:
            continue
        if name not in data:
            if required:
                raise MeasurementError(f"Expected key '{name}' in {where}, Received: keys {sorted(data)}")
            continue
        value = data[name]
        if value is None and not required:
            continue
        # bool is an int in Python but never a valid number or count here.
        if isinstance(value, bool) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise MeasurementError(
                f"Expected '{name}' to be {expected} in {where}, Received: {value!r} ({type(value).__name__})"
            )
        if types is _NUMBER and (not math.isfinite(value) or value < 0):
            raise MeasurementError(f"Expected '{name}' to be a finite number >= 0 in {where}, Received: {value!r}")


def _check_layer_figures(item: dict, where: str) -> None:
    """What the report divides by or places on the CARM: a layer's time and its counter FLOPs and AI."""
    if item["time_s"] <= 0:
        raise MeasurementError(f"Expected 'time_s' > 0 in {where} (a measured call takes time), Received: {item['time_s']!r}")
    counters = item.get("counters") or {}
    for name in ("flops", "ai"):
        value = counters.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, _NUMBER) or not math.isfinite(value) or value < 0:
            raise MeasurementError(
                f"Expected 'counters.{name}' to be a finite number >= 0 in {where}, Received: {value!r}"
            )


def _known(cls: type, data: dict) -> dict:
    """The keys the dataclass knows; newer files may carry more (more keys are welcome)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: an infinite spread (a window with ~zero time) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
