"""tune(): configuration space -> Optuna study -> trial runner -> measurement -> storage -> TuneResult.

Order of trials: the user's configuration (Keras defaults unless given) first, as the baseline; then,
per backend and compiler, the configuration predicted best (calibrated where a calibration applies,
else the CARM bound: the CARM orders the space); then the
sampler (TPE, or NSGA-II for several objectives), with Optuna constraints for --max-output-error and
--max-slowdown. Before a configuration is measured its CARM bound is computed: when even the bound
(made `prune_margin` more optimistic, for the power model's error) cannot beat the best feasible
measurement so far, the trial is pruned unmeasured and says why in its user attributes. A
configuration measured before (same key) is not measured again: its figures are reused.

A PREDICTED study (no GPU) reports the calibrated whole-model prediction as each trial's value where the
calibration has one for the configuration's backend and compiler (tune/predicted.py), else the CARM
bound; each trial says which in its "value_source" user attribute. A bound is optimistic (every real
run is slower), so in a study where some configurations are calibrated, a bound-valued one is not
ranked against them: it is marked infeasible through the Optuna constraint "uncalibrated" (shown with
its bound, never the best); the calibration offers no other-backend fallback for a backend without a
single record (tensorflow on the H200), only for layers of a backend it has records of. Without any
calibration (--no-calibration) every trial is the bound and all compete. Pruning always compares a
configuration's CARM bound with the best measured (or calibrated) value. A predicted configuration whose
memory LOWER BOUND (mapping/memory.py) exceeds the profile's memory_bytes is pruned "out_of_memory" before
that, and never picked as a first trial.

Resuming: a study stores a fingerprint of what its trial values depend on (study_fingerprint: source, mode,
objectives, model name and content; for a measured study also its GPU model; for a predicted study also the
profile and a hash of the calibration) when it is created;
tune() refuses (StudyMismatchError, one line) to resume one made with a different fingerprint. The model is
loaded (or its name checked) before the storage is opened, so a bad model leaves no study file behind.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import shlex
import sys
import time
from typing import Any, Iterable, Sequence

import optuna

from carm_advisor.advise.analyze import mapping_warnings
from carm_advisor.errors import GPUUnavailableError, MappingError
from carm_advisor.models.builder import ModelSpec, file_traits, model_spec, narrowing_note
from carm_advisor.power.nvml import gpu_count, open_gpu
from carm_advisor.trials.predicted import ConfigPredictor, predicted_device, value_prediction
from carm_advisor.trials.runner import FakeRunner, PredictedRunner, TrialFailed, WorkerRunner, WorkerSettings
from carm_advisor.trials.space import SearchSpace, TrialConfig, baseline_config
from carm_advisor.tune import clocks as clock_control
from carm_advisor.tune import parallel
from carm_advisor.tune.fingerprint import StudyMismatchError, check_fingerprint, study_fingerprint
from carm_advisor.tune.objective import (
    FINISHED,
    PRUNE_MARGIN,
    STARTED,
    VALUE_POLICY_BOUND,
    VALUE_POLICY_CALIBRATED,
    StudyState,
    budget_callback,
    constraints_func_for,
    fail_stale,
    finished_count,
    log_callback,
    make_objective,
    progress_bar,
    quiet_optuna,
    sampler_for,
)
from carm_advisor.tune.objectives import OBJECTIVES, PARETO_DEFAULT, Objective, get_objective
from carm_advisor.tune.result import build_result
from carm_advisor.tune.storage import HEARTBEAT_S, open_storage, storage_url
from carm_advisor.tune.study_files import StudyFiles, calibration_ref, portable_model
from carm_advisor.units import named_list

MODES = ("inference", "training")


def resolve_objectives(objective: str | Sequence[str], pareto: bool = False) -> list[Objective]:
    names = [objective] if isinstance(objective, str) else list(objective)
    if pareto and len(names) < 2:
        names = list(PARETO_DEFAULT) if not names or names[0] == PARETO_DEFAULT[0] else [names[0], "throughput"]
    if len(set(names)) != len(names):
        raise ValueError(f"objectives must differ, received: {names}")
    return [get_objective(n) for n in names]


def gpu_present() -> bool:
    try:
        return gpu_count() > 0
    except Exception:
        return False


def _current_backend() -> str:
    import keras

    return keras.backend.backend()


def _mapping_said_once(fn):
    """tune() maps the model for every configuration: the mapping's own warning (a subclassed model whose call()
    could not be traced, so every value is a lower bound) goes to the result's warnings once, not to stderr each
    time (analysis.mapping_warnings)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with mapping_warnings() as said:
            result = fn(*args, **kwargs)
        result.warnings[:0] = said
        return result

    return wrapper


@_mapping_said_once
def tune(
    model_or_builder: Any,
    objective: str | Sequence[str] = "gflops_per_watt",
    n_trials: int = 30,
    storage: str | None = None,
    study_name: str | None = None,
    space: SearchSpace | None = None,
    mode: str = "inference",
    *,
    pareto: bool = False,
    backends: Iterable[str] | None = None,
    batch_sizes: Iterable[int] | None = None,
    timeout_s: float | None = None,
    budget_s: float | None = None,
    max_slowdown: float | None = None,
    max_output_error: float | None = None,
    baseline: TrialConfig | None = None,
    predict: bool | str = "auto",
    profile=None,
    apply_clocks: bool = False,
    sm_clocks_mhz: Iterable[float] | None = None,
    runner=None,
    predictor=None,
    calibration: Any = "auto",
    clock_gpu=None,
    worker_settings: WorkerSettings | None = None,
    log_dir: str | None = None,
    trial_timeout_s: float = 900.0,
    carm_pruning: bool = True,
    carm_order: bool = True,
    prune_margin: float = PRUNE_MARGIN,
    heartbeat_s: float = HEARTBEAT_S,
    seed: int = 0,
    progress: bool = True,
    log=None,
    command: str | None = None,
    gpus: Sequence[int] | None = None,
    runner_factory: str | None = None,
    input_shapes=None,
):
    """Search the configuration space for the best `objective` and return a TuneResult.

    model_or_builder: a keras.applications name, a .keras file, "module:function", a builder function
    `f(config)` (built under the trial's dtype policy and layout), or a built model (predicted only,
    or saved to a .keras file for the workers). objective: one name of OBJECTIVES, or two (multi-objective;
    `pareto=True` pairs energy efficiency with throughput; the result's best is then a member of Optuna's
    Pareto front, picked as result.best_rule says: tune/result.pick_best). A model none of whose layers the
    CARM can cost is refused (MappingError, one line) before the storage is opened. predict: "auto" measures on an NVIDIA GPU
    and predicts elsewhere; True predicts; False insists on measuring. storage / study_name: Optuna's;
    the same storage and name resume a study (finished trials are kept, not measured again).
    The saved copy of a built model (and of a Calibration object, without log_dir) is kept as long as the
    study, since the study's "run" attributes name it for workers joining later and for
    fit_calibration.py --studies: beside a SQLite or journal file, in `<file name>.files/<study name>/`
    (`s.db` -> `s.db.files/<study name>/<model name>.keras`); for a database server, in the working
    directory, `carm-tune-<database>-<hash of the URL>.files/<study name>/`; for an in-memory storage
    (sqlite:///:memory:), in a temporary directory removed when tune() returns. A resumed study overwrites
    its own copy. Delete that folder with the study.
    log: a function given one line per finished trial (for runs without a terminal).
    calibration: "auto" (default): a predicted study uses the shipped calibration of the profile's GPU model
    (with this GPU's cache) and reports its predictions as trial values; a measured study orders its first
    trials by the CARM bound (benchmarks/tuning_prediction_check.py found the calibrated ranking of VGG16's
    batch sizes on jax inverted against the H200's measurements). True: the calibration in either (a
    measured study then orders by it); False/None: none (a predicted study reports CARM bounds); a path
    or a Calibration: that one. Pruning always compares the bound. log_dir: where the workers' logs go (default a temporary directory).
    runner / predictor / clock_gpu replace the trial runner, the CARM predictor and the GPU whose
    clocks --apply-clocks locks (tests, calibrated predictions).
    gpus: NVML indices of the GPUs to measure on at once (default: this process's one GPU); with two or
    more, one worker process per GPU runs the study (tune/parallel.py). runner_factory: "module:function"
    giving a worker process its (predictor, runner) from the study's "run" attributes (tests; replaces
    `runner` there, since an object cannot cross into another process).
    input_shapes: a subclassed model whose call() takes several tensors (analyze()'s input_shapes): a predicted
    study maps it on them instead of a lower bound; a measured study refuses them (its workers run the model with
    predict_on_batch on the one input it was built on).
    """
    start_s = time.perf_counter()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, received: {mode!r}")
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be a positive integer, received: {n_trials!r}")
    for name, value in (("max_slowdown", max_slowdown), ("max_output_error", max_output_error)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number, received: {value!r}")
    objectives = resolve_objectives(objective, pareto)
    spec = model_or_builder if isinstance(model_or_builder, ModelSpec) else model_spec(model_or_builder)
    built = model_or_builder if spec.kind == "model" else None

    parallel = gpus is not None and len(gpus) > 1
    if parallel and ((runner is not None and not isinstance(runner, FakeRunner)) or apply_clocks):
        raise ValueError("several GPUs: each worker process builds its own runner (give runner_factory, not runner), "
                         "and --apply-clocks is not supported there yet")
    if runner_factory is not None:
        from carm_advisor.tune.parallel import load_factory

        source = getattr(load_factory(runner_factory), "source", "fake")
    elif runner is not None:
        source = runner.source
    elif predict == "auto":
        source = "measured" if gpu_present() else "predicted"
    elif predict is True:
        source = "predicted"
    elif predict is False:
        if not gpu_present():
            raise GPUUnavailableError("measuring needs an NVIDIA GPU; none is visible here (use predict=True / --predict)")
        source = "measured"
    else:
        raise ValueError(f"predict must be 'auto', True or False, received: {predict!r}")
    if source == "predicted" and mode == "training":
        raise ValueError("a predicted study covers inference only (the CARM predictor maps forward passes); "
                         "training needs a GPU to measure")
    if input_shapes is not None and source != "predicted":
        raise ValueError("input_shapes is for predicted studies (predict=True / --predict): a measured study runs "
                         "the model with predict_on_batch on the one input it was built on")
    if apply_clocks and source == "predicted":
        raise GPUUnavailableError("--apply-clocks locks the clocks of an NVIDIA GPU; this study is not measured on one")
    gpu = clock_control.clock_gpu(apply_clocks, clock_gpu)
    clocks = tuple(sm_clocks_mhz) if sm_clocks_mhz else (clock_control.default_clocks(gpu) if apply_clocks else ())

    if space is None:
        space = SearchSpace.default(backends, batch_sizes, sm_clocks_mhz=clocks,
                                    require_installed=source != "predicted")
    traits, space_notes = None, []
    if spec.keeps_own_layout:   # a file or built model: its own layout, and its own precision where it cannot be rebuilt
        space, traits, space_notes = _narrow_to_file(space, spec)
    if baseline is None:
        import keras

        current = _current_backend()
        layout = keras.config.image_data_format()
        baseline = baseline_config(current if current in space.backends else space.backends[0],
                                   layout if layout in space.layouts else space.layouts[0])
        if traits is not None and not traits.fixed_precision and traits.policy in space.precisions:
            baseline = dataclasses.replace(baseline, precision=traits.policy)   # a file saved mixed runs mixed
    space = _with_baseline(space, baseline)
    if isinstance(calibration, str) and calibration == "auto":
        calibration = source == "predicted"
    own_predictor = predictor is None
    predictor = predictor or ConfigPredictor(spec, profile, model=built, calibration=calibration,
                                             policies_fixed=None if traits is None else bool(traits.fixed_precision),
                                             input_shapes=input_shapes)
    # A predicted study with a calibration for some of its space: calibrated values, bounds not ranked.
    calibrated = source == "predicted" and any(
        getattr(predictor, "calibrates", lambda b, c: False)(b, c) for b in space.backends for c in space.compilers[b])

    # The model first: a bad name or file fails here, before a storage file (and its baseline trial) exists.
    _check_model(spec, predictor, baseline, own_predictor)
    _check_costed(spec, predictor, baseline)
    fits = _fits(source, predictor, mode)
    fingerprint = study_fingerprint(source, mode, objectives, spec, predictor,
                                    gpu=_measured_gpu_name(gpus if parallel else None) if source == "measured" else None)

    quiet = quiet_optuna()
    url = storage_url(storage, spec.name)
    try:
        store = open_storage(storage, spec.name, heartbeat_s)
    except BaseException:
        quiet()
        raise
    # "-calibrated": an older bound-valued predicted study in the same file is not resumed into mixed values.
    study_name = study_name or (f"{spec.name}-{'+'.join(o.name for o in objectives)}-{mode}-{source}"
                                + ("-calibrated" if calibrated else ""))
    # Optuna >= 5 takes constraints from trial.set_constraint; older ones from the sampler's constraints_func
    # (a calibrated predicted study always has one: its 'uncalibrated' constraint).
    constraints_func = constraints_func_for(max_output_error is not None or max_slowdown is not None, calibrated)
    sampler = sampler_for(objectives, constraints_func, seed)
    try:
        study = optuna.create_study(storage=store, study_name=study_name, sampler=sampler, load_if_exists=True,
                                    directions=[o.direction for o in objectives])
    except ValueError as exc:
        quiet()
        raise ValueError(f"cannot resume study {study_name!r} in {url}: {exc}") from None
    try:
        check_fingerprint(study, fingerprint, url)
    except BaseException:
        quiet()
        raise
    fail_stale(study)
    try:
        resumed_notes = _resume_notes(study, space, n_trials)
    except BaseException:
        quiet()
        raise
    study.set_user_attr("space", space.to_dict())
    study.set_user_attr("objectives", [o.name for o in objectives])
    study.set_user_attr("source", source)
    study.set_user_attr("baseline", baseline.to_dict())
    study.set_user_attr("space_notes", space_notes)
    if source == "predicted":
        study.set_user_attr("value_policy", VALUE_POLICY_CALIBRATED if calibrated else VALUE_POLICY_BOUND)

    remaining = n_trials - finished_count(study)
    target = sum(t.state != optuna.trial.TrialState.WAITING for t in study.get_trials(deepcopy=False)) + max(remaining, 0)
    files = StudyFiles(url, study_name, store)   # beside the storage; a temporary one goes when tune() returns
    try:
        # A built model is saved to a file only where another process needs it.
        model_ref = None if spec.kind == "callable" or (spec.kind == "model" and not parallel and source == "predicted") \
            else portable_model(spec, built, files)
        if model_ref is not None:   # what a worker joining by storage URL and study name rebuilds the run from
            study.set_user_attr("run", {
                "model": model_ref, "mode": mode, "trial_target": target, "carm_pruning": carm_pruning,
                "prune_margin": prune_margin, "max_slowdown": max_slowdown, "max_output_error": max_output_error,
                "profile": profile if isinstance(profile, str) else None, "seed": seed, "heartbeat_s": heartbeat_s,
                "worker_settings": dataclasses.asdict(dataclasses.replace(worker_settings or WorkerSettings(), mode=mode)),
                "trial_timeout_s": trial_timeout_s, "runner_factory": runner_factory,
                "calibration": calibration_ref(calibration, predictor, own_predictor, parallel, log_dir, study_name,
                                                files),
                "fake_delay_s": runner.delay_s if isinstance(runner, FakeRunner) else None})
        if parallel:
            if model_ref is None:
                spec.portable()   # raises: this builder cannot run in a worker process
            from carm_advisor.tune.parallel import check_gpus_exist, launch

            check_gpus_exist(gpus, source)
            _enqueue_start(study, space, baseline, predictor, objectives, carm_order, calibrated, fits)
            try:
                limits_s = [v for v in (timeout_s, budget_s) if v is not None]   # workers still running then are stopped
                device = launch(url, study_name, gpus, max(remaining, 0), log_dir=log_dir, log=log,
                                deadline_s=min(limits_s) if limits_s else None)
                names = {(t.user_attrs.get("gpu") or {}).get("name") for t in study.get_trials(deepcopy=False)} - {None}
                device["name"] = ", ".join(sorted(names)) or None
                if source == "predicted":
                    device.update(predicted_device(predictor))
            finally:
                fail_stale(study)
                quiet()
            return _with_notes(build_result(study, objectives, space, predictor, baseline, source=source, storage_url=url,
                                wall_s=time.perf_counter() - start_s, device=device, command=command or shlex.join(sys.argv),
                                prune_margin=prune_margin, max_slowdown=max_slowdown, max_output_error=max_output_error,
                                budget_stopped=bool(device.get("stopped_at_deadline"))), resumed_notes)
        if runner is None and runner_factory is not None:
            from carm_advisor.tune.parallel import runner_from_run

            predictor, runner = runner_from_run(study.user_attrs["run"], predictor)
        if runner is None:
            if source == "predicted":
                runner = PredictedRunner(predictor, mode)
            else:
                model_ref = model_ref or portable_model(spec, built, files)
                settings = dataclasses.replace(worker_settings or WorkerSettings(), mode=mode)
                runner = WorkerRunner(model_ref, predictor, settings, trial_timeout_s=trial_timeout_s, log_dir=log_dir)
        _enqueue_start(study, space, baseline, predictor, objectives, carm_order, calibrated, fits)

        state = StudyState(study, objectives, baseline, max_slowdown, max_output_error, rank_calibrated_only=calibrated)
        from carm_advisor.tune.parallel import this_gpu

        # shared: `carm-advise worker` processes may join this study while it runs (RDB: heartbeats free a
        # configuration whose worker died; a journal has none, so a resumed run there does not wait)
        objective_fn = make_objective(state, space, predictor, runner, carm_pruning, prune_margin, gpu,
                                       trial_attrs={"gpu": this_gpu(source)},
                                       shared=model_ref is not None and isinstance(store, optuna.storages.RDBStorage))
        deadline_s = None if budget_s is None else start_s + budget_s
        try:
            if remaining > 0:
                with progress_bar(progress, n_trials, state) as callback:
                    callbacks = [callback, budget_callback(deadline_s, state),   # joined workers count too
                                 optuna.study.MaxTrialsCallback(target, states=STARTED)] + ([log_callback(log, state)] if log else [])
                    study.optimize(objective_fn, n_trials=remaining, timeout=timeout_s, catch=(TrialFailed,),
                                   callbacks=callbacks, gc_after_trial=False)
        finally:
            runner.close()
            fail_stale(study)
            quiet()
        return _with_notes(build_result(study, objectives, space, predictor, baseline, source=source, storage_url=url,
                            wall_s=time.perf_counter() - start_s,
                            device=predicted_device(predictor) if source == "predicted" else getattr(runner, "device", None) or {},
                            command=command or shlex.join(sys.argv), prune_margin=prune_margin,
                            max_slowdown=max_slowdown, max_output_error=max_output_error,
                            budget_stopped=state.budget_stopped), resumed_notes)
    finally:
        files.remove_if_temporary()


# ---- pieces -------------------------------------------------------------------------------------


def _resume_notes(study, space: SearchSpace, n_trials: int) -> list[str]:
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


def _with_notes(result, notes: list[str]):
    result.warnings[:0] = notes
    return result


def _enqueue_start(study, space: SearchSpace, baseline: TrialConfig, predictor: ConfigPredictor,
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


def _check_model(spec: ModelSpec, predictor, baseline: TrialConfig, own_predictor: bool) -> None:
    """Build (our predictor: it needs the model anyway) or at least name-check the model, so that a model that
    cannot load stops tune() before any storage is created."""
    if own_predictor and hasattr(predictor, "model"):
        predictor.model(baseline.layout)
    elif spec.kind == "application":
        from carm_advisor.models.loader import application_names, load_model

        if spec.spec.replace("-", "").replace("_", "") not in application_names():
            load_model(spec.spec)   # raises ModelLoadError with its one line (known names, a hint)


def _check_costed(spec: ModelSpec, predictor, baseline: TrialConfig) -> None:
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


def _fits(source: str, predictor, mode: str):
    """fits(config) for a predicted study whose predictor has a memory lower bound, else None."""
    check = getattr(predictor, "does_not_fit", None)
    if source != "predicted" or check is None:
        return None
    return lambda config: check(config, mode) is None


def _measured_gpu_name(gpus: Sequence[int] | None) -> str | None:
    """The NVML name of the GPU a measured study runs on: this process's (tune/parallel.this_gpu), or, with
    several GPUs, theirs (distinct names joined by ", "); None where NVML cannot say."""
    if not gpus:
        return parallel.this_gpu("measured").get("name")
    try:
        return ", ".join(sorted({open_gpu(g).name() for g in gpus}))
    except Exception:   # no NVML: check_gpus_exist refuses the study later in one line
        return None


def _narrow_to_file(space: SearchSpace, spec: ModelSpec) -> tuple[SearchSpace, Any, list[str]]:
    """The space of a model file or a built model (builder.file_traits): its own layout (where its layers have one) and, where
    its dtype policies cannot be replaced, the float32 precisions alone (what run it as saved); with the one-line
    note naming what was left out, why, and how to search it (none where nothing was)."""
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


def _with_baseline(space: SearchSpace, baseline: TrialConfig) -> SearchSpace:
    """The space widened (if need be) so the baseline is one of its points (Optuna can enqueue only those)."""
    def add(values, value):
        return tuple(values) if value in values else tuple(values) + (value,)

    compilers = dict(space.compilers)
    compilers[baseline.backend] = add(compilers[baseline.backend], baseline.compiler)
    return SearchSpace(add(space.backends, baseline.backend), add(space.precisions, baseline.precision),
                       tuple(sorted(add(space.batch_sizes, baseline.batch_size))), add(space.layouts, baseline.layout),
                       compilers, space.sm_clocks_mhz)


# ---- clocks -------------------------------------------------------------------------------------


# Exposed for tests and the benchmark script.
__all__ = ["tune", "resolve_objectives", "OBJECTIVES", "FakeRunner", "PredictedRunner", "WorkerRunner"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
