"""Calibrated prediction: what a backend achieves, as a learned fraction of the CARM bound.

efficiency = bound_time_s / measured_time_s (1 = at the roof; 0.25 = four times slower than the roofs
allow), learned per (backend, layer class, compute dtype, size bucket) from recorded measurements.
A layer's calibrated time is bound_time_s / efficiency, where the efficiency is the median of the
finest key with at least MIN_SAMPLES samples, falling back to coarser keys:
(backend, class, dtype, size) -> (backend, class, dtype) -> (backend, class) -> (backend).
The size bucket is the half-decade of the bound time (log10 * 2, floored): a 20 us bound and a 2 ms
bound of the same class sit in different buckets (small layers reach a smaller share of the roof).

The whole model: the GPU does not run the model as the sum of layers measured alone. Per backend and
execution ("cuda_graph", "jit", "eager"), whole_time = a * sum(matmul-class calibrated) + b *
sum(other calibrated), a and b >= 0 fitted by least squares on the records (XLA fuses the
elementwise layers into the convolutions: b is small on jax); and where the framework dispatches
each layer from Python (torch eager), whole_time = max(that, layer_calls * dispatch_per_call_s):
the GPU waits for Python when the launches take longer than the kernels.

Shipped: carm_advisor/profiles/nvidia_h200_calibration.json, written by
benchmarks/fit_calibration.py from recorded H200 measurements. On a GPU, every measured analysis
adds its samples to the cache (profiles/cache.py) and the next analysis learns from them too.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Sequence

from carm_advisor.errors import ProfileError

SCHEMA = "carm-advisor/calibration/1"
MIN_SAMPLES = 3
SHIPPED = "nvidia_h200_calibration.json"

# Layer classes pooled together: their efficiency depends on what they do, not on their Keras name.
_CLASS_OF = {
    **{t: "pooling" for t in ("MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D",
                              "AveragePooling2D", "AveragePooling3D", "GlobalAveragePooling1D",
                              "GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D",
                              "GlobalMaxPooling2D", "GlobalMaxPooling3D")},
    **{t: "elementwise" for t in ("Activation", "ReLU", "Add", "Multiply", "Subtract", "Average", "Maximum",
                                  "Minimum", "Softmax", "LeakyReLU", "ELU", "PReLU", "Rescaling", "Normalization",
                                  "Dropout", "HardSwish", "Hardswish")},
    **{t: "data-movement" for t in ("ZeroPadding2D", "ZeroPadding1D", "Cropping2D", "Flatten", "Reshape",
                                    "Concatenate", "Permute", "UpSampling2D")},
}
# Layers whose work is a matmul on Tensor Cores or CUDA cores: XLA fuses the others into them.
MATMUL_CLASSES = frozenset({"Conv1D", "Conv2D", "Conv3D", "Conv2DTranspose", "Dense", "EinsumDense",
                            "DepthwiseConv2D", "SeparableConv2D"})


def layer_class(layer_type: str) -> str:
    return _CLASS_OF.get(layer_type, layer_type)


def size_bucket(bound_time_s: float) -> int:
    return math.floor(2 * math.log10(bound_time_s)) if bound_time_s > 0 else -99


@dataclass(frozen=True)
class Sample:
    """One measured layer against its CARM bound."""

    backend: str
    layer_class: str
    dtype: str
    bound_time_s: float
    measured_time_s: float
    model: str = ""
    layer: str = ""
    execution: str = ""

    @property
    def efficiency(self) -> float:
        return self.bound_time_s / self.measured_time_s

    def keys(self) -> list[tuple]:
        """Finest first."""
        return [(self.backend, self.layer_class, self.dtype, size_bucket(self.bound_time_s)),
                (self.backend, self.layer_class, self.dtype), (self.backend, self.layer_class), (self.backend,)]


@dataclass(frozen=True)
class WholeSample:
    """One whole-model measurement against the layers' measured sums (matmul-class and the rest)."""

    backend: str
    execution: str            # "cuda_graph" | "jit" | "eager"
    time_s: float
    matmul_sum_s: float
    other_sum_s: float
    layer_calls: int
    model: str = ""


@dataclass(frozen=True)
class Estimate:
    efficiency: float
    key: tuple
    n: int

    @property
    def label(self) -> str:
        return f"{'/'.join(str(k) for k in self.key)} (n={self.n})"


@dataclass(frozen=True)
class WholeFit:
    matmul_factor: float
    other_factor: float
    dispatch_per_call_s: float | None
    n: int


@dataclass
class Calibration:
    samples: list[Sample] = field(default_factory=list)
    whole: list[WholeSample] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index: dict[tuple, list[float]] | None = None

    # ---- layers ------------------------------------------------------------------------------
    def _buckets(self) -> dict[tuple, list[float]]:
        if self._index is None:
            index: dict[tuple, list[float]] = {}
            for s in self.samples:
                if s.measured_time_s > 0 and s.bound_time_s > 0:
                    for key in s.keys():
                        index.setdefault(key, []).append(s.efficiency)
            self._index = index
        return self._index

    def estimate(self, backend: str, layer_type: str, dtype: str, bound_time_s: float) -> Estimate | None:
        """The efficiency of the finest key with enough samples (the backend alone needs only one)."""
        probe = Sample(backend, layer_class(layer_type), dtype, bound_time_s, 1.0)
        buckets = self._buckets()
        for key in probe.keys():
            values = buckets.get(key, [])
            if len(values) >= (1 if len(key) == 1 else MIN_SAMPLES):
                return Estimate(statistics.median(values), key, len(values))
        return None

    def _estimate_row(self, row, backend: str | None) -> Estimate | None:
        bound = getattr(row, "predicted_time_s", None)
        return self.estimate(backend or "", row.type, row.dtype, bound) if bound else None

    def efficiency(self, row, backend: str | None) -> float | None:
        """The predictor's seam (predict.Calibration): a LayerRow-like row (type, dtype, bound time in
        predicted_time_s) -> efficiency, or None where no key has samples."""
        found = self._estimate_row(row, backend)
        return found.efficiency if found and found.efficiency > 0 else None

    def describe(self, row, backend: str | None) -> str:
        """Which key and how many samples calibrate this row ("none": the bound stands alone)."""
        found = self._estimate_row(row, backend)
        return found.label if found else "none"

    # ---- whole model -----------------------------------------------------------------------
    def whole_fit(self, backend: str, execution: str) -> WholeFit | None:
        """a, b (least squares, >= 0) and the dispatch time per layer call, from this backend's records."""
        import numpy as np

        found = [w for w in self.whole if w.backend == backend and w.execution == execution and w.time_s > 0]
        if not found:
            return None
        dispatch = None
        if execution == "eager":
            # Records where Python, not the GPU, set the pace: eager well above the layers' GPU sum.
            bound_by_cpu = [w.time_s / w.layer_calls for w in found
                            if w.layer_calls and w.time_s > 1.3 * (w.matmul_sum_s + w.other_sum_s)]
            dispatch = statistics.median(bound_by_cpu) if bound_by_cpu else None
            found = [w for w in found if w.time_s <= 1.3 * (w.matmul_sum_s + w.other_sum_s)] or found
        x = np.array([[w.matmul_sum_s, w.other_sum_s] for w in found])
        y = np.array([w.time_s for w in found])
        coef = np.linalg.lstsq(x, y, rcond=None)[0] if len(found) >= 2 else None
        if coef is None or (coef < 0).any():   # one record, or a negative share: one common factor
            ratio = statistics.median(w.time_s / (w.matmul_sum_s + w.other_sum_s) for w in found
                                      if w.matmul_sum_s + w.other_sum_s > 0)
            coef = (ratio, ratio)
        return WholeFit(float(coef[0]), float(coef[1]), dispatch, len(found))

    def whole_time_s(self, rows: Sequence, backend: str, execution: str) -> float | None:
        """The calibrated whole-model time from the rows' calibrated times, or None without a fit."""
        fit = self.whole_fit(backend, execution)
        times = [(r.type, r.calibrated_time_s) for r in rows if getattr(r, "calibrated_time_s", None)]
        if fit is None or not times:
            return None
        mm = sum(t for k, t in times if k in MATMUL_CLASSES)
        other = sum(t for k, t in times if k not in MATMUL_CLASSES)
        t = fit.matmul_factor * mm + fit.other_factor * other
        if fit.dispatch_per_call_s is not None:
            t = max(t, len(times) * fit.dispatch_per_call_s)
        return t

    # ---- combining and saving --------------------------------------------------------------
    def extended(self, other: "Calibration") -> "Calibration":
        return Calibration(self.samples + other.samples, self.whole + other.whole,
                           {**self.provenance, "extended_with": other.provenance})

    def without_model(self, model: str) -> "Calibration":
        """Every sample but those of `model`: leave-one-model-out evaluation."""
        return Calibration([s for s in self.samples if s.model != model], [w for w in self.whole if w.model != model],
                           {**self.provenance, "left_out": model})

    def summary(self) -> dict[str, Any]:
        """Per key: median efficiency and count (what a reader checks; the samples are the truth)."""
        return {"/".join(str(k) for k in key): {"median_efficiency": statistics.median(v), "n": len(v)}
                for key, v in sorted(self._buckets().items(), key=lambda kv: str(kv[0]))}

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "provenance": self.provenance, "buckets": self.summary(),
                "samples": [asdict(s) for s in self.samples], "whole": [asdict(w) for w in self.whole]}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: Any, origin: str = "calibration") -> "Calibration":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ProfileError(f"Expected schema '{SCHEMA}' in {origin}, Received: "
                               f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r}")
        try:
            samples = [Sample(**s) for s in data.get("samples", [])]
            whole = [WholeSample(**w) for w in data.get("whole", [])]
        except TypeError as exc:
            raise ProfileError(f"Expected calibration samples in {origin}, Received: {exc}") from None
        return cls(samples, whole, dict(data.get("provenance") or {}))

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"Expected a readable calibration JSON, Received: {path} ({exc})") from None
        return cls.from_dict(data, str(path))


def shipped_calibration() -> Calibration:
    """The recorded H200 calibration that ships with the package (empty if absent)."""
    ref = resources.files("carm_advisor.profiles").joinpath(SHIPPED)
    if not ref.is_file():
        return Calibration()
    return Calibration.from_dict(json.loads(ref.read_text()), SHIPPED)


def load_calibration(device: dict | None = None, gpu_name: str | None = None) -> Calibration | None:
    """The shipped calibration when it was recorded on this GPU model (`gpu_name`, e.g. the profile's
    name), extended with what this very GPU measured before (the cache); None when there is neither:
    efficiencies are relative to one GPU's roofs and kernels, so another GPU's are not borrowed."""
    from carm_advisor.profiles.cache import cached_calibration

    shipped = shipped_calibration()
    base = shipped if gpu_name and shipped.provenance.get("device") == gpu_name else None
    mine = cached_calibration(device or {})
    if base is None:
        return mine
    return base.extended(mine) if mine is not None else base


# ---- applying it ------------------------------------------------------------------------------


def apply_calibration(rows: Iterable, calibration: "Calibration | None", backend: str, profile=None) -> None:
    """Lay `calibration` over rows already predicted (and perhaps measured), as predict.Predictor does
    when it predicts them: re-calibrating the same rows with another calibration (leave one model out)."""
    from carm_advisor.predict import Predictor

    predictor = Predictor(profile, {}, backend=backend, calibration=calibration)
    for row in rows:
        predictor.calibrate(row)


# ---- learning from records --------------------------------------------------------------------


def samples_from_rows(rows: Iterable, backend: str, model: str) -> list[Sample]:
    """Measured rows (bound in predicted_time_s, measurement in time_s) -> samples."""
    return [
        Sample(backend, layer_class(r.type), r.dtype, r.predicted_time_s, r.time_s, model, r.name)
        for r in rows
        if r.known and r.measured and r.time_s and r.predicted_time_s
    ]


def whole_from_run(run, rows: Sequence, model: str) -> list[WholeSample]:
    """The record's whole-model figures against its measured layer sums."""
    measured = [r for r in rows if r.known and r.measured and r.time_s]
    if not measured:
        return []
    mm = sum(r.time_s for r in measured if r.type in MATMUL_CLASSES)
    other = sum(r.time_s for r in measured if r.type not in MATMUL_CLASSES)
    out = []
    for m in (run.inference, run.inference_graph):
        if m is not None and m.time_s:
            out.append(WholeSample(run.backend, m.execution, m.time_s, mm, other, len(measured), model))
    return out


def rows_for_run(run, profile=None, model=None) -> list:
    """Rebuild the run's model (by its recorded name, precision and layout) and merge the measurement
    into its CARM rows. `model` skips the rebuild."""
    from carm_advisor.analysis import merge_measurements
    from carm_advisor.model_loader import image_data_format, load_model
    from carm_advisor.predict import Predictor, resolve_math_mode
    from carm_advisor.profiles.profile import load_profile

    profile = profile or load_profile()
    if model is None:
        with image_data_format(run.layout):
            model, _ = load_model(run.model_name, precision=run.precision)
    rows = Predictor(profile, resolve_math_mode(run.backend, run.math_mode), backend=run.backend).rows(model, run.batch_size)
    merge_measurements(rows, run, profile)
    return rows


# Layer times that are the GPU's work: a layer timed eagerly alone is mostly Python dispatch on torch.
GPU_TIME_EXECUTIONS = ("cuda_graph", "profiled", "jit")


def fit_runs(runs: Iterable, profile=None) -> Calibration:
    """A calibration from recorded RunMeasurements (their models rebuilt on the CPU, shapes only).

    Layers timed eagerly alone are left out of the layer samples (their time is dispatch, not GPU
    work); the run's whole-model figures still count.
    """
    import dataclasses

    samples: list[Sample] = []
    whole: list[WholeSample] = []
    sources, devices = [], []
    for run in runs:
        run = dataclasses.replace(run, layers=[m for m in run.layers if m.execution in GPU_TIME_EXECUTIONS])
        rows = rows_for_run(run, profile)
        samples += samples_from_rows(rows, run.backend, run.model_name)
        whole += whole_from_run(run, rows, run.model_name)
        sources.append(f"{run.model_name}/{run.backend}/{run.precision}/b{run.batch_size} ({run.date})")
        devices.append((run.device or {}).get("name"))
    device = max(set(devices), key=devices.count) if devices else None
    return Calibration(samples, whole, {"records": sources, "device": device})
