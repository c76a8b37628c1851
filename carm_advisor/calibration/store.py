"""Where calibrations come from: the ones that ship, one per GPU model, and what measured analyses on this very GPU
added (the cache beside its measured profiles)."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from importlib import resources
from pathlib import Path

from carm_advisor.calibration.policy import DEFAULT_SHIPPED, SHIPPED
from carm_advisor.calibration.samples import Sample
from carm_advisor.calibration.table import Calibration, read_json
from carm_advisor.profiles.cache import cache_dir, profile_key


def load_without_unmarked_copy_samples(path: str | Path) -> tuple["Calibration", int]:
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
