"""What a study's stored trial values depend on beyond their configuration (its fingerprint), stored when the study
is made and checked when it is resumed: a study is never resumed into stale values."""

from __future__ import annotations

import dataclasses
from typing import Any

from carm_advisor.errors import CarmError
from carm_advisor.mapping.input_shapes import shapes_identity
from carm_advisor.models.builder import ModelSpec, build, content_hash, model_identity
from carm_advisor.tune.objective import FINISHED
from carm_advisor.tune.objectives import Objective


class StudyMismatchError(CarmError):
    """The study to resume was made with something its stored trial values depend on that differs now."""


def study_fingerprint(source: str, mode: str, objectives: list[Objective], spec: ModelSpec, predictor,
                      gpu: str | None = None, input_shapes=None) -> dict:
    """What a stored trial value depends on beyond its configuration. Every study: where the values come from
    (measured / predicted / fake), the mode, the objectives (in order), the model's name and its content
    ("model_identity", builder.model_identity: the same for the same model wherever its file lies and whatever
    was built before it; another for an edited file or another module's function of the same name), and, where
    given, the model's input shapes ("input_shapes", input_shapes.shapes_identity: a Functional model's inputs by
    name once resolved, a subclassed model's call shapes; never the batch; `input_shapes`, else the predictor's).
    A MEASURED study also the GPU model it measures on (`gpu`, its NVML name; several: their names). A PREDICTED
    study also: the cost model's version (mapping.registry.COST_MODEL_VERSION), the profile (its name and a hash of
    its content) and the calibration (a hash of its records, provenance and settings), since each predicted
    value is computed from them."""
    import keras

    model_for = getattr(predictor, "model", None)
    out: dict[str, Any] = {"source": source, "mode": mode, "objectives": [o.name for o in objectives],
                           "model": spec.name,
                           "model_identity": model_identity(spec, model_for if callable(model_for) else None)}
    if source == "measured":
        out["gpu"] = gpu
    if source == "predicted":
        from carm_advisor.mapping.registry import COST_MODEL_VERSION

        out["cost_model"] = COST_MODEL_VERSION
        out["profile"] = _profile_identity(getattr(predictor, "profile", None))
        out["calibration"] = _calibration_hash(getattr(predictor, "calibration", None))
    shapes = input_shapes if input_shapes is not None else getattr(predictor, "input_shapes", None)
    if shapes is not None:   # only where given: the fingerprints of studies stored before stay as they were
        layout = keras.config.image_data_format()
        if callable(model_for):
            model = model_for(layout)
        else:
            with keras.device("cpu"):   # the tuner's own process takes no GPU memory from the trials
                model = build(spec, "float32", layout, seed=0)
        out["input_shapes"] = shapes_identity(model, shapes)
    return out


def _profile_identity(profile) -> str:
    if profile is None:
        return "none"
    to_dict = getattr(profile, "to_dict", None)
    content = to_dict() if to_dict is not None else repr(profile)
    return f"{getattr(profile, 'name', type(profile).__name__)} sha256:{content_hash(content)}"


def _calibration_hash(calibration) -> str:
    """A hash of a Calibration's content: its samples, whole-model records, provenance and settings; for
    another object (a test's stub), its class and, where it has one, its to_dict()."""
    if calibration is None:
        return "none"
    if dataclasses.is_dataclass(calibration) and hasattr(calibration, "samples") and hasattr(calibration, "whole"):
        settings = {f.name: getattr(calibration, f.name) for f in dataclasses.fields(calibration)
                    if f.name not in ("samples", "whole")}
        content = {"samples": [list(vars(x).values()) for x in calibration.samples],
                   "whole": [list(vars(x).values()) for x in calibration.whole], "settings": settings}
        return f"sha256:{content_hash(content)}"
    to_dict = getattr(calibration, "to_dict", None)
    kind = f"{type(calibration).__module__}.{type(calibration).__qualname__}"
    return f"{kind} sha256:{content_hash(to_dict())}" if to_dict is not None else kind


# Fingerprint keys an older carm_advisor did not store: where a stored fingerprint lacks one it is added, not
# refused (the GPU of a measured study; the model's content, except in a predicted study with finished trials:
# those are cheap to compute again, and may be another model's).
ADDED_KEYS = ("gpu", "model_identity")


def check_fingerprint(study, fingerprint: dict, url: str) -> None:
    """Store the fingerprint in a new study; refuse to resume one made with a different one (its values would
    be stale), and a PREDICTED one with finished trials but no fingerprint, or one without the model's
    identity (made before they were stored: what its values were computed from is unknown). A measured study
    without one gets it (its values are measurements: no profile or calibration in them); one without its GPU
    or its model's identity gets them (ADDED_KEYS)."""
    stored = study.user_attrs.get("fingerprint")
    where = f"study {study.study_name!r} in {url}"
    advice = "pass a new --study name (study_name=) or another --storage to start a fresh study"
    finished = lambda: any(t.state in FINISHED for t in study.get_trials(deepcopy=False))  # noqa: E731
    if stored is None:
        if fingerprint.get("source") == "predicted" and finished():
            raise StudyMismatchError(f"{where} holds predicted trials with no record of the profile and "
                                     f"calibration they were computed from (an older carm_advisor made it), so "
                                     f"they may be stale: {advice}")
        study.set_user_attr("fingerprint", fingerprint)
        return
    added = {k: fingerprint[k] for k in ADDED_KEYS if k in fingerprint and k not in stored}
    if "model_identity" in added and fingerprint.get("source") == "predicted" and finished():
        raise StudyMismatchError(f"{where} holds predicted trials with no record of the model's content (an older "
                                 f"carm_advisor made it), so they may be another model's: {advice}")
    now = {k: v for k, v in fingerprint.items() if k not in added}
    differ = [k for k in sorted(set(stored) | set(now)) if stored.get(k) != now.get(k)]
    if differ:
        what = "; ".join(f"{k}: stored {stored.get(k)!r}, now {now.get(k)!r}" for k in differ)
        raise StudyMismatchError(f"{where} was made with a different {', '.join(differ)} ({what}); its trial "
                                 f"values would be stale here: {advice}")
    if added:
        study.set_user_attr("fingerprint", {**stored, **added})
