"""Where calibrations come from: the ones that ship, one per GPU model, and what measured analyses on this very GPU
added (the cache beside its measured profiles)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from carm_advisor.calibration.policy import DEFAULT_SHIPPED, SHIPPED, whole_model_execution
from carm_advisor.calibration.samples import Sample
from carm_advisor.calibration.table import Calibration, read_json
from carm_advisor.profiles.cache import cache_dir, profile_key


def load_without_unmarked_copy_samples(path: str | Path) -> tuple[Calibration, int]:
    """The calibration file `path` (read once), less the torch convolution and pooling samples it cannot tell apart
    (a file written before Sample.layout_copy_s: no "sample_fields" and no sample with copies), and how many were
    left out. Their copies were taken off at the roof's bound or not at all, so under the data-movement form they
    would count the copies twice; the next measured analysis of the model learns them again."""
    data = read_json(path)
    calibration = Calibration.from_dict(data, str(path))
    if "layout_copy_s" in (data.get("sample_fields") or ()) or any(
            s.layout_copy_s for s in calibration.samples):
        return calibration, 0

    def ambiguous(s: Sample) -> bool:
        return s.backend == "torch" and (s.layer_class == "pooling" or "Conv" in s.layer_class)

    kept = [s for s in calibration.samples if not ambiguous(s)]
    return replace(calibration, samples=kept), len(calibration.samples) - len(kept)


def shipped_calibration(gpu_name: str = DEFAULT_SHIPPED) -> Calibration:
    """The recorded calibration of GPU model `gpu_name` that ships with the package (SHIPPED; empty if none)."""
    file_name = SHIPPED.get(gpu_name)
    ref = resources.files("carm_advisor.profiles").joinpath(file_name) if file_name else None
    if ref is None or not ref.is_file():
        return Calibration()
    return Calibration.from_dict(json.loads(ref.read_text()), file_name)


def load_calibration(device: dict | None = None, gpu_name: str | None = None) -> Calibration | None:
    """The shipped calibration when one was recorded on this GPU model (`gpu_name`, e.g. the profile's
    name), extended with what this very GPU measured before (the cache); None when there is neither:
    efficiencies are relative to one GPU's roofs and kernels, so another GPU's are not borrowed."""
    shipped = shipped_calibration(gpu_name) if gpu_name else Calibration()
    base = shipped if gpu_name and shipped.provenance.get("device") == gpu_name else None
    mine = cached_calibration(device or {})
    if base is None:
        return mine
    return base.extended(mine) if mine is not None else base


def calibration_path(device: dict) -> Path:
    return cache_dir().parent / "calibration" / f"{profile_key(device)}.json"


def cached_calibration(device: dict):
    """What earlier measured analyses on this GPU learned (a Calibration), or None."""
    if not device.get("uuid"):
        return None
    path = calibration_path(device)
    if not path.is_file():
        return None
    kept, dropped = load_without_unmarked_copy_samples(path)
    if dropped:
        warnings.warn(f"carm_advisor: the cached calibration {path} predates the layout copies' field; its {dropped} "
                      "torch convolution and pooling samples are left out until a measured analysis learns them again",
                      RuntimeWarning, stacklevel=2)
    return kept


def store_calibration(device: dict, new) -> Path | None:
    """Add a measured analysis's samples to this GPU's cached calibration (a run replacing an older
    one of the same model, backend and dtype keeps only the newer samples)."""
    if not device.get("uuid"):
        return None
    old = cached_calibration(device) or Calibration()
    models = {(s.model, s.backend, s.dtype) for s in new.samples}
    runs = {(w.model, w.backend, w.execution) for w in new.whole}
    kept = Calibration([s for s in old.samples if (s.model, s.backend, s.dtype) not in models],
                       [w for w in old.whole if (w.model, w.backend, w.execution) not in runs], old.provenance)
    return kept.extended(new).save(calibration_path(device))


# Keras backends with no records on a calibration's GPU, and the records that stand in for them: (backend, execution)
# -> (the backend whose records of that execution stand in, what is said wherever a figure from them shows). Keras
# on TensorFlow compiles model.predict with XLA on a GPU (jit_compile="auto": keras/src/trainers/trainer.py,
# _resolve_auto_jit_compile), the compiler whose runs jax's jit records measured (its layers jitted alone and its
# whole models jitted); no TensorFlow run is recorded on the GPUs of the shipped calibrations. TensorFlow without
# XLA has no stand-in: its figures stay CARM bounds.
BORROWED = {("tensorflow", "jit"): ("jax", "calibrated from XLA runs on jax; TensorFlow not measured on this GPU")}


@dataclass
class BorrowedCalibration(Calibration):
    """A calibration in which another backend's records stand in for those of `borrowed`'s backends (BORROWED),
    and every description of a figure of theirs says so."""

    borrowed: dict[str, str] = field(default_factory=dict)   # backend -> where its records come from

    def describe(self, row, backend: str | None) -> str:
        return _noted(super().describe(row, backend), self.borrowed.get(backend or ""))

    def whole_describe(self, backend: str, execution: str, rows=None, model: str | None = None) -> str:
        return _noted(super().whole_describe(backend, execution, rows, model), self.borrowed.get(backend))


def _noted(text: str, note: str | None) -> str:
    return f"{text} ({note})" if note and text != "none" and note not in text else text


def with_borrowed(calibration, backend: str, execution: str):
    """`calibration` with the records BORROWED names for (backend, execution) relabelled as `backend`'s (a
    BorrowedCalibration), where it holds no record of `backend` of its own (a GPU that measured it: its own
    records stand); `calibration` itself otherwise (None stays None)."""
    stand_in = BORROWED.get((backend, execution))
    if calibration is None or stand_in is None or not isinstance(calibration, Calibration):
        return calibration
    if isinstance(calibration, BorrowedCalibration) and backend in calibration.borrowed:
        return calibration
    source, note = stand_in
    if any(s.backend == backend for s in calibration.samples) or any(w.backend == backend for w in calibration.whole):
        return calibration
    samples = [replace(s, backend=backend) for s in calibration.samples if s.backend == source and s.execution == execution]
    whole = [replace(w, backend=backend) for w in calibration.whole if w.backend == source and w.execution == execution]
    if not samples and not whole:
        return calibration
    done = dict(calibration.borrowed) if isinstance(calibration, BorrowedCalibration) else {}
    return BorrowedCalibration(calibration.samples + samples, calibration.whole + whole,
                               {**calibration.provenance, "borrowed": {**done, backend: f"{source} {execution}"}},
                               borrowed={**done, backend: note})


def borrowed_note(calibration, backend: str) -> str | None:
    """Where `backend`'s calibrated figures come from when another backend's records stand in (with_borrowed),
    else None."""
    return calibration.borrowed.get(backend) if isinstance(calibration, BorrowedCalibration) else None


def calibrated_backends(calibration) -> list[str]:
    """The Keras backends whose whole model, run as its user runs it (whole_model_execution), the calibration
    predicts from records of their own on its GPU (what a user can switch to for calibrated figures)."""
    if calibration is None or not hasattr(calibration, "whole_fit"):
        return []
    own = {w.backend for w in calibration.whole}
    borrowed = getattr(calibration, "borrowed", {})
    return [b for b in ("jax", "torch") if b in own and b not in borrowed
            and calibration.whole_fit(b, whole_model_execution(b)) is not None]


def launch_floor_of(profile, calibration=None) -> tuple[float | None, str]:
    """The GPU-side time of one kernel launch on the profile's GPU, measured, and where it comes from: the GPU side
    of the profile's launch_floor (provenance "gpu_time_s"), else the launch floor per kernel of a calibration
    recorded on that GPU model (provenance "kernel_floor": `calibration`, else the shipped one); (None, "") where
    neither was measured. The GPU side, not the host's launch + synchronisation (launch_floor's value): a layer
    inside a model queues its kernels behind the last one's, and 62% of the profiled in-model H100 layers took less
    than the host's 35.6 us (predict.Predictor says where it was measured); every compiled kernel pays the GPU side
    (the calibration's jit fit counts it per kernel)."""
    floor = (getattr(profile, "launch_floor", None) or {}).get("provenance", {}).get("gpu_time_s")
    if floor:
        return float(floor), "the GPU side of one kernel launch, the profile's measured launch floor"
    name = getattr(profile, "name", None)
    for calib in (calibration, shipped_calibration(name) if name in SHIPPED else None):
        provenance = getattr(calib, "provenance", None) or {}
        value = (provenance.get("kernel_floor") or {}).get("value_s")
        if value and provenance.get("device") in (None, name):
            return float(value), "the GPU side of one kernel launch, measured on this GPU model"
    return None, ""


def whole_execution_of(model, backend: str, measured=None) -> tuple[str, str | None]:
    """(how the user's model runs as a whole, why not under XLA where a TensorFlow model does not). torch: eager;
    jax: jit. TensorFlow: XLA ("jit", the execution jax's records measured) as Keras runs model.predict on a GPU
    (jit_compile="auto" resolves to XLA there: keras/src/trainers/trainer.py, _resolve_auto_jit_compile), unless
    the model is compiled without it (jit_compile=False or run_eagerly=True; Keras resolves "auto" to False on a
    machine without a GPU, so a model compiled there says False) or `measured` (the whole-model measurement, a
    dict or a ModelMeasurement) ran it otherwise (model(x), eagerly)."""
    if backend != "tensorflow":
        return whole_model_execution(backend), None
    ran = measured.get("execution") if isinstance(measured, dict) else getattr(measured, "execution", None)
    if ran and ran != "jit":
        return "eager", f"measured as model(x), {ran}"
    if getattr(model, "compiled", False) and getattr(model, "run_eagerly", False):
        return "eager", "the model is compiled with run_eagerly=True"
    if getattr(model, "compiled", False) and getattr(model, "_jit_compile", None) is False:
        return "eager", ("the model is compiled with jit_compile=False; Keras resolves jit_compile='auto' to False on "
                         "a machine without a GPU")
    return "jit", None


def calibration_notes(calib, backend: str, execution: str, without_xla: str | None, whole: dict) -> dict[str, Any]:
    """What the report says of its calibration beyond the fit: how the model runs as a whole, the execution the
    calibration was chosen for ("runs_as", whole_execution_of), where another backend's records stand in for this
    backend's ("borrowed"), and where no calibrated whole-model figure exists, why and what would give one
    ("none_reason": another backend with records of its own on this GPU, TensorFlow's XLA)."""
    out: dict[str, Any] = {"runs_as": execution}
    note = borrowed_note(calib, backend)
    if note:
        out["borrowed"] = note
    if whole.get("whole_time_s") or calib is None:
        return out
    others = [b for b in calibrated_backends(calib) if b != backend]
    switches = [f"KERAS_BACKEND={b}" for b in others]
    if without_xla and borrowed_note(with_borrowed(calib, backend, "jit"), backend):
        switches.insert(0, "model.compile(jit_compile=True) (XLA)")
    own = any(w.backend == backend for w in calib.whole) or any(s.backend == backend for s in calib.samples)
    what = (f"for {backend} without XLA ({without_xla})" if without_xla else
            f"for {backend}: no whole-model fit of it covers this model" if own else
            f"for {backend}: no recorded runs of it on this GPU")
    out["none_reason"] = what + (f"; {' or '.join(switches)} gives calibrated figures on this GPU" if switches else "")
    return out
