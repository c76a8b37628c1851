"""What tune() checks and builds before a study's trials run: the space narrowed to a model file and widened to
its baseline, the model loaded and costed once, the batch sizes that cannot fit, the first trials enqueued, and
what a resumed study must say."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from carm_advisor.errors import CarmError, MappingError, ModelLoadError
from carm_advisor.models.builder import ModelSpec, file_traits, narrowing_note
from carm_advisor.models.loader import application_names, load_model
from carm_advisor.power.nvml import open_gpu
from carm_advisor.trials.predicted import ConfigPredictor, value_prediction
from carm_advisor.trials.space import QUANTIZED_PRECISIONS, SearchSpace, TrialConfig, with_quantization
from carm_advisor.tune import parallel
from carm_advisor.tune.fingerprint import StudyMismatchError
from carm_advisor.tune.objective import FINISHED
from carm_advisor.tune.objectives import Objective
from carm_advisor.units import named_list


def batch_sizes_that_never_fit(space: SearchSpace, asked: Sequence[int], fits, predictor, mode: str) -> list[str]:
    """A predicted study's batch sizes asked for that no configuration of the space fits in the GPU's memory (the
    predicted memory lower bound exceeds it, fits(config) False for all): one note naming them and what the least
    needs, or a refusal (CarmError) where none asked for fits. None without a memory bound (fits None)."""
    if fits is None:
        return []
    grid = space.grid()
    never = {b: [c for c in grid if c.batch_size == b] for b in asked}
    never = {b: configs for b, configs in never.items() if configs and not any(fits(c) for c in configs)}
    if not never:
        return []
    why = "; ".join(f"batch {b} {smallest_need(predictor, configs, mode)}" for b, configs in sorted(never.items()))
    if len(never) == len(set(asked)):
        raise CarmError(f"no batch size asked for fits the GPU's memory by the predicted memory lower bound ({why}); "
                        "ask for smaller --batch-sizes")
    sizes = [str(b) for b in sorted(never)]
    others = ", ".join(str(b) for b in space.batch_sizes if b not in never)
    return [f"batch size{'s' if len(sizes) > 1 else ''} {named_list(sizes, 4)} asked for never "
            f"fit{'' if len(sizes) > 1 else 's'} the GPU's memory by the predicted memory lower bound ({why}); "
            f"the best comes from batch {others}"]


def smallest_need(predictor, configs: list[TrialConfig], mode: str) -> str:
    """What the configuration needing least memory of `configs` needs, as does_not_fit says it ("needs at least
    X GB, the GPU has Y GB (...)")."""
    memory = getattr(predictor, "memory", None)
    config = min(configs, key=lambda c: memory(c, mode).total_bytes) if memory is not None else configs[0]
    why = predictor.does_not_fit(config, mode)
    return why.removeprefix("predicted: ")


def resume_notes(study, space: SearchSpace, n_trials: int) -> list[str]:
    """What a resumed study should tell its user: n_trials is the study's total (no new trial where it already
    holds that many). A search space other than the one it was stored with is a StudyMismatchError: Optuna
    refuses new choices for a stored parameter (each new trial would fail), and the stored trials outside the
    space asked for would be ranked beside it."""
    finished = sum(t.state in FINISHED for t in study.get_trials(deepcopy=False))
    notes = []
    if finished and finished >= n_trials:
        notes.append(f"the study already holds {finished} finished trials and {n_trials} were asked for in all: "
                     "nothing new ran (--trials / n_trials counts the study's trials, earlier runs' included); "
                     "ask for more to search further")
    stored, now = study.user_attrs.get("space"), space.to_dict()
    if finished and stored and stored != now:
        changed = "; ".join(f"{k}: stored {stored.get(k)}, now {now.get(k)}"
                            for k in sorted(set(stored) | set(now)) if stored.get(k) != now.get(k))
        raise StudyMismatchError(f"study {study.study_name!r} was made with another search space ({changed}); "
                                 "Optuna cannot change a stored study's choices: give the same --backends, "
                                 "--batch-sizes (and other options) to resume it, or a new --study name or "
                                 "--storage for this space")
    return notes


def enqueue_start(study, space: SearchSpace, baseline: TrialConfig, predictor: ConfigPredictor,
                   objectives: list[Objective], carm_order: bool, calibrated_only: bool = False,
                   fits=None) -> None:
    """Baseline first, then per backend and compiler its configuration predicted best (once per study);
    calibrated_only: only the (backend, compiler) pairs the calibration covers (a predicted calibrated study);
    fits(config): False for a configuration that cannot fit in the GPU's memory (never picked)."""
    if study.user_attrs.get("enqueued"):
        return
    study.enqueue_trial(baseline.params(), user_attrs={"role": "baseline"}, skip_if_exists=True)
    if carm_order:
        primary = objectives[0]
        for backend in space.backends:
            configs = [c for c in space.grid() if c.backend == backend and c.key != baseline.key
                       and (fits is None or fits(c))]
            if not configs:
                continue
            # Per compiler (the calibrated prediction sees it, the bound does not): its best prediction.
            for compiler in space.compilers[backend]:
                mine = [c for c in configs if c.compiler == compiler]
                if not mine or (calibrated_only and not predictor.calibrates(backend, compiler)):
                    continue
                values = [primary.value(value_prediction(predictor, c)) for c in mine]
                pick = mine[primary.select(values)]
                study.enqueue_trial(pick.params(), user_attrs={"role": "carm_order"}, skip_if_exists=True)
    study.set_user_attr("enqueued", True)


def check_model(spec: ModelSpec, predictor, baseline: TrialConfig, own_predictor: bool) -> None:
    """Build (our predictor: it needs the model anyway) or at least name-check the model, so that a model that
    cannot load stops tune() before any storage is created."""
    if own_predictor and hasattr(predictor, "model"):
        predictor.model(baseline.layout)
    elif spec.kind == "application":
        if spec.spec.replace("-", "").replace("_", "") not in application_names():
            load_model(spec.spec)   # raises ModelLoadError with its one line (known names, a hint)


def check_costed(spec: ModelSpec, predictor, baseline: TrialConfig) -> None:
    """Refuse, in one line, a model none of whose layers the CARM could cost (unknown layers such as a Lambda,
    or only views and identities): its bound is no time at all, so there is nothing to rank or prune by
    (before any storage is created)."""
    bound = predictor.predict(baseline)
    if bound.time_s > 0 and math.isfinite(bound.time_s):
        return
    rows = list(getattr(bound, "rows", None) or [])

    def named(rs) -> str:
        return named_list([f"{r.name} ({r.type})" for r in rs], 4)

    unknown = [r for r in rows if not r.known]
    if unknown:
        why = f"no layer of the model could be costed (no cost model for {named(unknown)})"
    elif rows:
        why = f"no layer of the model does work the CARM can cost ({named(rows)}: views or identities at inference)"
    else:
        why = "the model has no layer the CARM can cost"
    raise MappingError(f"nothing to tune in {spec.name}: {why}, so there is no predicted time to rank or prune "
                       "configurations by")


def fits_in_memory(source: str, predictor, mode: str):
    """fits(config) for a predicted study whose predictor has a memory lower bound, else None."""
    check = getattr(predictor, "does_not_fit", None)
    if source != "predicted" or check is None:
        return None
    return lambda config: check(config, mode) is None


def measured_gpu_name(gpus: Sequence[int] | None) -> str | None:
    """The NVML name of the GPU a measured study runs on: this process's (tune/parallel.this_gpu), or, with
    several GPUs, theirs (distinct names joined by ", "); None where NVML cannot say."""
    if not gpus:
        return parallel.this_gpu("measured").get("name")
    try:
        return ", ".join(sorted({open_gpu(g).name() for g in gpus}))
    except Exception:   # no NVML: check_gpus_exist refuses the study later in one line
        return None


def narrow_to_file(space: SearchSpace, spec: ModelSpec) -> tuple[SearchSpace, Any, list[str]]:
    """The space of a model file or a built model (builder.file_traits): its own layout (where its layers have
    one) and, where its dtype policies cannot be replaced, the float32 precisions alone (what run it as saved);
    with the one-line note naming what was left out, why, and how to search it (none where nothing was)."""
    import keras

    traits = file_traits(spec)
    layout = traits.layout or keras.config.image_data_format()   # none: no layer has a layout, it changes nothing
    dropped = [lay for lay in space.layouts if lay != layout] if traits.layout else []
    precisions = space.precisions
    if traits.fixed_precision:
        precisions = tuple(p for p in precisions if p.startswith("float32")) or ("float32",)
        dropped = [p for p in space.precisions if p not in precisions] + dropped
    narrowed = SearchSpace(space.backends, precisions, space.batch_sizes, (layout,), space.compilers,
                           space.sm_clocks_mhz)
    return narrowed, traits, [narrowing_note(spec, traits, dropped)] if dropped else []


def with_baseline(space: SearchSpace, baseline: TrialConfig) -> SearchSpace:
    """The space widened (if need be) so the baseline is one of its points (Optuna can enqueue only those)."""
    def add(values, value):
        return tuple(values) if value in values else tuple(values) + (value,)

    compilers = dict(space.compilers)
    compilers[baseline.backend] = add(compilers[baseline.backend], baseline.compiler)
    return SearchSpace(add(space.backends, baseline.backend), add(space.precisions, baseline.precision),
                       tuple(sorted(add(space.batch_sizes, baseline.batch_size))), add(space.layouts, baseline.layout),
                       compilers, space.sm_clocks_mhz)


def searched_quantization(space: SearchSpace, predictor, baseline: TrialConfig, name: str) -> tuple[SearchSpace, list[str]]:
    """The space with Keras' quantised precisions kept only where the layers model.quantize converts carry enough of
    the FLOPs (trials.space.with_quantization) and the model can be quantised at all (a built model is quantised in a
    copy rebuilt from its config: one whose config cannot be rebuilt, a Python lambda in a Lambda layer, cannot);
    the notes that say what was dropped and why. A predictor without quantizable_shares leaves the space as it is."""
    shares = getattr(predictor, "quantizable_shares", None)
    if shares is None or not set(space.precisions) & set(QUANTIZED_PRECISIONS):
        return space, []
    space, notes = with_quantization(space, shares(baseline.layout), name, keep=(baseline.precision,))
    left = [p for p in space.precisions if p in QUANTIZED_PRECISIONS and p != baseline.precision]
    if left:
        try:
            predictor.quantized_model(baseline.layout, left[0])
        except ModelLoadError as exc:
            space = dataclasses.replace(space, precisions=tuple(p for p in space.precisions if p not in left))
            notes.append(f"{'/'.join(left)} not searched: {exc}")
    return space, notes
