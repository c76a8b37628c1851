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

import contextlib
import dataclasses
import functools
import logging
import math
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from typing import Any, Iterable, Sequence

import optuna

from carm_advisor.errors import CarmError
from carm_advisor.models.builder import ModelSpec, content_hash, model_spec
from carm_advisor.tune.objectives import OBJECTIVES, PARETO_DEFAULT, Objective, get_objective
from carm_advisor.trials.predicted import ConfigPredictor, predicted_device, value_prediction
from carm_advisor.trials.runner import (FakeRunner, Measurement, PredictedRunner, TrialFailed, TrialOutOfMemory,
                                      WorkerRunner, WorkerSettings)
from carm_advisor.trials.space import SearchSpace, TrialConfig, baseline_config
from carm_advisor.tune.storage import HEARTBEAT_S, in_memory, open_storage, storage_url

PRUNE_MARGIN = 0.10   # the bound's energy comes from a fitted power model: keep 10% benefit of the doubt
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
MODES = ("inference", "training")
# Trials counted against a study's target: every one a worker has taken (enqueued WAITING ones are not yet).
STARTED = FINISHED + (optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING)


def resolve_objectives(objective: str | Sequence[str], pareto: bool = False) -> list[Objective]:
    names = [objective] if isinstance(objective, str) else list(objective)
    if pareto and len(names) < 2:
        names = list(PARETO_DEFAULT) if not names or names[0] == PARETO_DEFAULT[0] else [names[0], "throughput"]
    if len(set(names)) != len(names):
        raise ValueError(f"objectives must differ, received: {names}")
    return [get_objective(n) for n in names]


def gpu_present() -> bool:
    from carm_advisor.power.nvml import gpu_count

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
        from carm_advisor.advise.analyze import mapping_warnings

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
    from carm_advisor.errors import GPUUnavailableError
    from carm_advisor.tune.result import build_result

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
    gpu = _clock_gpu(apply_clocks, clock_gpu)
    clocks = tuple(sm_clocks_mhz) if sm_clocks_mhz else (_default_clocks(gpu) if apply_clocks else ())

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

    quiet = _quiet_optuna()
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
    constraints_func = _constraints_func(max_output_error is not None or max_slowdown is not None, calibrated)
    sampler = _sampler(objectives, constraints_func, seed)
    try:
        study = optuna.create_study(storage=store, study_name=study_name, sampler=sampler, load_if_exists=True,
                                    directions=[o.direction for o in objectives])
    except ValueError as exc:
        quiet()
        raise ValueError(f"cannot resume study {study_name!r} in {url}: {exc}") from None
    try:
        _check_fingerprint(study, fingerprint, url)
    except BaseException:
        quiet()
        raise
    _fail_stale(study)
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

    remaining = n_trials - _finished_count(study)
    target = sum(t.state != optuna.trial.TrialState.WAITING for t in study.get_trials(deepcopy=False)) + max(remaining, 0)
    files = _StudyFiles(url, study_name, store)   # beside the storage; a temporary one goes when tune() returns
    try:
        # A built model is saved to a file only where another process needs it.
        model_ref = None if spec.kind == "callable" or (spec.kind == "model" and not parallel and source == "predicted") \
            else _portable_model(spec, built, files)
        if model_ref is not None:   # what a worker joining by storage URL and study name rebuilds the run from
            study.set_user_attr("run", {
                "model": model_ref, "mode": mode, "trial_target": target, "carm_pruning": carm_pruning,
                "prune_margin": prune_margin, "max_slowdown": max_slowdown, "max_output_error": max_output_error,
                "profile": profile if isinstance(profile, str) else None, "seed": seed, "heartbeat_s": heartbeat_s,
                "worker_settings": dataclasses.asdict(dataclasses.replace(worker_settings or WorkerSettings(), mode=mode)),
                "trial_timeout_s": trial_timeout_s, "runner_factory": runner_factory,
                "calibration": _calibration_ref(calibration, predictor, own_predictor, parallel, log_dir, study_name,
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
                _fail_stale(study)
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
                model_ref = model_ref or _portable_model(spec, built, files)
                settings = dataclasses.replace(worker_settings or WorkerSettings(), mode=mode)
                runner = WorkerRunner(model_ref, predictor, settings, trial_timeout_s=trial_timeout_s, log_dir=log_dir)
        _enqueue_start(study, space, baseline, predictor, objectives, carm_order, calibrated, fits)

        state = _StudyState(study, objectives, baseline, max_slowdown, max_output_error, rank_calibrated_only=calibrated)
        from carm_advisor.tune.parallel import this_gpu

        # shared: `carm-advise worker` processes may join this study while it runs (RDB: heartbeats free a
        # configuration whose worker died; a journal has none, so a resumed run there does not wait)
        objective_fn = _make_objective(state, space, predictor, runner, carm_pruning, prune_margin, gpu,
                                       trial_attrs={"gpu": this_gpu(source)},
                                       shared=model_ref is not None and isinstance(store, optuna.storages.RDBStorage))
        deadline_s = None if budget_s is None else start_s + budget_s
        try:
            if remaining > 0:
                with _progress(progress, n_trials, state) as callback:
                    callbacks = [callback, _budget_callback(deadline_s, state),   # joined workers count too
                                 optuna.study.MaxTrialsCallback(target, states=STARTED)] + ([_log_callback(log, state)] if log else [])
                    study.optimize(objective_fn, n_trials=remaining, timeout=timeout_s, catch=(TrialFailed,),
                                   callbacks=callbacks, gc_after_trial=False)
        finally:
            runner.close()
            _fail_stale(study)
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


class _StudyState:
    """What the objective function needs to know about the study so far (read from storage)."""

    def __init__(self, study, objectives, baseline, max_slowdown, max_output_error,
                 rank_calibrated_only: bool = False) -> None:
        self.study = study
        self.rank_calibrated_only = rank_calibrated_only
        self.objectives = objectives
        self.baseline = baseline
        self.max_slowdown = max_slowdown
        self.max_output_error = max_output_error
        self.budget_stopped = False
        self.trial_s: list[float] = []

    def complete(self) -> list:
        return self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))

    def measured_by_key(self, complete: list | None = None) -> dict[str, Any]:
        out = {}
        for t in self.complete() if complete is None else complete:
            key = t.user_attrs.get("config_key")
            if key is not None and "repeat_of" not in t.user_attrs:
                out.setdefault(key, t)
        return out

    def baseline_throughput(self, complete: list | None = None) -> float | None:
        t = self.measured_by_key(complete).get(self.baseline.key)
        if t is None:
            return None
        m = t.user_attrs["measurement"]
        return m["batch_size"] / m["time_s"]

    def feasible_values(self, complete: list | None = None) -> list[list[float]]:
        return [list(t.values) for t in (self.complete() if complete is None else complete)
                if all(c <= 0 for c in t.user_attrs.get("constraints", [0.0]))]


def _sampler(objectives: list[Objective], constraints_func, seed: int | None):
    # TPE's constant liar (Optuna's default) counts trials still running in other workers as bad, so
    # workers sharing a study spread out instead of all proposing the same configuration.
    if len(objectives) == 1:
        return optuna.samplers.TPESampler(seed=seed, constraints_func=constraints_func, n_startup_trials=6)
    return optuna.samplers.NSGAIISampler(seed=seed, constraints_func=constraints_func, population_size=10)


def _make_objective(state: _StudyState, space: SearchSpace, predictor: ConfigPredictor, runner, carm_pruning: bool,
                    margin: float, gpu, trial_attrs: dict[str, Any] | None = None, shared: bool = False,
                    gain_over=None):
    """shared: other processes run trials of this study at the same time (wait for a configuration one of
    them is measuring); trial_attrs: set on every trial (the GPU that runs it); gain_over(values): the
    gain over this GPU's own baseline (parallel.py), recorded with each measured trial."""
    objectives = state.objectives

    def objective(trial: optuna.Trial):
        started = time.perf_counter()
        try:
            return _evaluate(trial)
        finally:
            state.trial_s.append(time.perf_counter() - started)

    def _evaluate(trial: optuna.Trial):
        # first: a process killed before the trial's first heartbeat is still found dead (_fail_stale)
        trial.set_user_attr("process", {"host": socket.gethostname(), "pid": os.getpid()})
        for k, v in (trial_attrs or {}).items():
            trial.set_user_attr(k, v)
        config = space.suggest(trial)
        trial.set_user_attr("config", config.to_dict())
        trial.set_user_attr("config_key", config.key)
        complete = state.complete()  # one read of the storage per trial
        earlier = state.measured_by_key(complete).get(config.key)
        if earlier is None and shared:
            complete = _wait_for_same_config(state, trial, config.key)
            earlier = state.measured_by_key(complete).get(config.key)
        if earlier is not None:   # measured before: the same figures, not a second measurement
            for k in ("measurement", "bound", "constraints", "gpu", "gain_over_gpu_baseline", "value_source"):
                if k in earlier.user_attrs:
                    trial.set_user_attr("measured_on" if k == "gpu" else k, earlier.user_attrs[k])
            trial.set_user_attr("repeat_of", earlier.number)
            _set_constraints(trial, earlier.user_attrs.get("constraints"))
            return list(earlier.values) if len(objectives) > 1 else earlier.values[0]

        bound = predictor.predict(config)
        bound_values = [o.value(bound) for o in objectives]
        trial.set_user_attr("bound", {"time_s": bound.time_s, "energy_j": bound.energy_j, "flops": bound.flops,
                                      "values": bound_values, "source": bound.source})
        # A predicted trial that cannot fit in the GPU's memory (its lower bound exceeds it) is pruned as a
        # measured one that ran out of memory would be, before the bound is compared.
        too_big = getattr(runner, "does_not_fit", None)
        too_big = too_big(config) if too_big is not None else None
        if too_big:
            trial.set_user_attr("pruned_reason", "out_of_memory")
            trial.set_user_attr("pruned_detail", too_big[:500])
            raise optuna.TrialPruned(f"out of memory: {too_big}")
        if carm_pruning and config.key != state.baseline.key:
            reason = _carm_prune_reason(objectives, bound_values, state.feasible_values(complete), margin)
            if reason:
                trial.set_user_attr("pruned_reason", "carm_bound")
                trial.set_user_attr("pruned_detail", reason)
                raise optuna.TrialPruned(reason)
        try:
            with _clock_lock(gpu, config.sm_clock_mhz):
                m = runner.run(config)
        except TrialOutOfMemory as exc:
            trial.set_user_attr("pruned_reason", "out_of_memory")
            trial.set_user_attr("pruned_detail", str(exc)[:500])
            raise optuna.TrialPruned(f"out of memory: {exc}") from None
        except TrialFailed as exc:
            trial.set_user_attr("error", str(exc)[:1000])
            raise
        trial.set_user_attr("measurement", m.to_dict())
        trial.set_user_attr("value_source", (m.extra or {}).get("value_source") or m.source)
        values = [o.value(m) for o in objectives]
        if any(v != v for v in values):
            trial.set_user_attr("error", "the measurement has no energy figure (no NVML?)")
            raise TrialFailed("no energy figure for an energy objective")
        if gain_over is not None:
            trial.set_user_attr("gain_over_gpu_baseline", gain_over(values))
        constraints = _constraints(m, state, complete)
        trial.set_user_attr("constraints", constraints)
        _set_constraints(trial, constraints)
        return values if len(objectives) > 1 else values[0]

    return objective


def _wait_for_same_config(state: _StudyState, trial: optuna.Trial, key: str, poll_s: float = 0.2) -> list:
    """Other running trials have this configuration: wait for one of them to measure it (its figures come back
    with the COMPLETE trials) instead of measuring it a second time.

    Each trial writes its configuration before it reads the others', so of two that pick one configuration
    at once, at least one sees the other: a trial that sees none measures; one that sees another waits
    (marked "waiting_for_config"). Trials that all wait for each other let the lowest number go, once it
    has seen them all waiting in two polls in a row (a trial that went on has cleared its mark by then).
    A dead worker's trial stops blocking when the heartbeat fails it."""
    calm = 0
    marked = False
    while True:
        complete = state.complete()
        if key in state.measured_by_key(complete):
            return complete
        others = [t for t in state.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
                  if t.number != trial.number and t.user_attrs.get("config_key") == key]
        if not others:
            break
        if not marked:
            trial.set_user_attr("waiting_for_config", True)
            marked = True
        elif all(t.user_attrs.get("waiting_for_config") for t in others) and trial.number < min(t.number for t in others):
            calm += 1
            if calm >= 2:
                break
        else:
            calm = 0
        time.sleep(poll_s)
        _fail_stale(state.study)
    if marked:
        trial.set_user_attr("waiting_for_config", False)
    return state.complete()


_HAS_SET_CONSTRAINT = hasattr(optuna.Trial, "set_constraint")
_CONSTRAINT_NAMES = ("output_error", "slowdown", "uncalibrated")
VALUE_POLICY_CALIBRATED = ("calibrated predictions are the trial values; a configuration the calibration does not "
                           "cover keeps its CARM bound (optimistic) and is not ranked (constraint 'uncalibrated')")
VALUE_POLICY_BOUND = "CARM bounds are the trial values (no calibration applies): every figure is a best case"


def _constraints_func(constrained: bool, calibrated: bool):
    """The sampler's constraints_func where Optuna has no trial.set_constraint (4.x), else None. A trial
    without constraints of its own (pruned) counts as feasible: as many zeros as _constraints gives."""
    if _HAS_SET_CONSTRAINT or not (constrained or calibrated):
        return None
    zeros = [0.0] * (3 if calibrated else 2)
    return lambda t: t.user_attrs.get("constraints", zeros)


def _calibration_ref(calibration, predictor, own_predictor: bool, parallel: bool, log_dir: str | None,
                     study_name: str, files: _StudyFiles):
    """What a worker process gives ConfigPredictor(calibration=...) to use the calibration this process
    uses: False (none), True (the shipped one), or a path (the one given; a Calibration object, or the
    calibration of a predictor given to tune(), is saved to a JSON file in the log directory, else in the
    study's folder beside its storage: `files`). A calibration that cannot be saved cannot run on several GPUs."""
    calib = getattr(predictor, "calibration", None)
    if calib is None:
        return False
    if own_predictor and isinstance(calibration, (str, os.PathLike)):
        return os.path.abspath(calibration)
    if own_predictor and calibration is True:
        return True
    if hasattr(calib, "save"):
        directory = log_dir or files.directory()
        safe = _file_chars(study_name)
        return str(calib.save(os.path.join(os.path.abspath(directory), f"calibration-{safe}.json")))
    if parallel:
        raise ValueError(f"several GPUs: the workers cannot load this calibration ({type(calib).__name__}: no save()); "
                         "give a calibration JSON path")
    return True


def _set_constraints(trial, constraints: list[float] | None) -> None:
    if _HAS_SET_CONSTRAINT and constraints:
        for name, value in zip(_CONSTRAINT_NAMES, constraints):
            trial.set_constraint(name, value)


def _constraints(m: Measurement, state: _StudyState, complete: list) -> list[float]:
    """Optuna constraints (<= 0 is feasible): [output error - limit, slowdown - limit], and in a calibrated
    predicted study [..., 1 if the value is only a CARM bound else 0] (a bound is not ranked against
    calibrated predictions)."""
    error_c = slow_c = 0.0
    if state.max_output_error is not None and m.output_error is not None:
        error_c = m.output_error - state.max_output_error
    base = state.baseline_throughput(complete)
    if state.max_slowdown is not None and base:
        slow_c = base / (m.batch_size / m.time_s) - state.max_slowdown
    if state.rank_calibrated_only:
        from carm_advisor.trials.predicted import VALUE_CALIBRATED

        return [error_c, slow_c, 0.0 if (m.extra or {}).get("value_source") == VALUE_CALIBRATED else 1.0]
    return [error_c, slow_c]


def _carm_prune_reason(objectives: list[Objective], bound_values: list[float], measured: list[list[float]],
                       margin: float) -> str | None:
    """Why a configuration cannot win (its optimistic bound is beaten by a measurement), or None."""
    if not measured:
        return None
    optimistic = [v * (1 + margin) if o.direction == "maximize" else v / (1 + margin)
                  for o, v in zip(objectives, bound_values)]
    if len(objectives) == 1:
        o = objectives[0]
        best = measured[o.select([m[0] for m in measured])][0]
        if not o.better(optimistic[0], best):
            return (f"CARM bound {bound_values[0]:.4g} {o.unit} (+{margin:.0%} margin: {optimistic[0]:.4g}) "
                    f"cannot beat the best measured {best:.4g}")
        return None
    for values in measured:
        if all(not o.better(b, v) for o, b, v in zip(objectives, optimistic, values)):
            return (f"CARM bound {', '.join(f'{b:.4g}' for b in bound_values)} is dominated by a measured "
                    f"trial ({', '.join(f'{v:.4g}' for v in values)})")
    return None


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
    from carm_advisor.errors import MappingError

    bound = predictor.predict(baseline)
    if bound.time_s > 0 and math.isfinite(bound.time_s):
        return
    rows = list(getattr(bound, "rows", None) or [])

    from carm_advisor.units import named_list

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


class StudyMismatchError(CarmError):
    """The study to resume was made with something its stored trial values depend on that differs now."""


def study_fingerprint(source: str, mode: str, objectives: list[Objective], spec: ModelSpec, predictor,
                      gpu: str | None = None) -> dict:
    """What a stored trial value depends on beyond its configuration. Every study: where the values come from
    (measured / predicted / fake), the mode, the objectives (in order), the model's name and its content
    ("model_identity", builder.model_identity: the same for the same model wherever its file lies and whatever
    was built before it; another for an edited file or another module's function of the same name). A MEASURED
    study also the GPU model it measures on (`gpu`, its NVML name; several: their names). A PREDICTED study
    also: the cost model's version (mapping.registry.COST_MODEL_VERSION), the profile (its name and a hash of
    its content) and the calibration (a hash of its records, provenance and settings), since each predicted
    value is computed from them."""
    import keras

    from carm_advisor.models.builder import model_identity

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
        shapes = getattr(predictor, "input_shapes", None)
        if shapes is not None:   # only where given: the fingerprints of studies stored before stay as they were
            out["input_shapes"] = _shapes_identity(predictor.model(keras.config.image_data_format()), shapes)
    return out


def _shapes_identity(model, shapes) -> str:
    """The call shapes as the walker reads them: shapes and dtypes, not the batch (the configuration's replaces it)
    nor the names of the keras.Input tensors given (new in every process). The same shapes given by position and
    by name read apart."""
    import json

    from carm_advisor.mapping.walker import call_shapes, given_shapes_json

    def unbatched(node):
        if isinstance(node, dict):
            return {k: (([None] + v[1:]) if k == "shape" and v else unbatched(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [unbatched(v) for v in node]
        return node

    with call_shapes(model, shapes):
        doc = json.loads(given_shapes_json(model))
    return json.dumps(unbatched({"args": doc["args"], "kwargs": doc["kwargs"]}), sort_keys=True)


def _measured_gpu_name(gpus: Sequence[int] | None) -> str | None:
    """The NVML name of the GPU a measured study runs on: this process's (tune/parallel.this_gpu), or, with
    several GPUs, theirs (distinct names joined by ", "); None where NVML cannot say."""
    from carm_advisor.tune import parallel

    if not gpus:
        return parallel.this_gpu("measured").get("name")
    from carm_advisor.power.nvml import open_gpu

    try:
        return ", ".join(sorted({open_gpu(g).name() for g in gpus}))
    except Exception:   # no NVML: check_gpus_exist refuses the study later in one line
        return None


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


def _check_fingerprint(study, fingerprint: dict, url: str) -> None:
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


def _narrow_to_file(space: SearchSpace, spec: ModelSpec) -> tuple[SearchSpace, Any, list[str]]:
    """The space of a model file or a built model (builder.file_traits): its own layout (where its layers have one) and, where
    its dtype policies cannot be replaced, the float32 precisions alone (what run it as saved); with the one-line
    note naming what was left out, why, and how to search it (none where nothing was)."""
    import keras

    from carm_advisor.models.builder import file_traits, narrowing_note

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


def _finished_count(study) -> int:
    """COMPLETE and PRUNED trials, and trials that failed with an error of theirs (not stale RUNNING ones)."""
    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in FINISHED or (t.state == optuna.trial.TrialState.FAIL and "error" in t.user_attrs):
            n += 1
    return n


def _fail_stale(study) -> None:
    """Trials left RUNNING by a killed process -> FAIL: by their stale heartbeat (RDB storages), and, for a
    trial whose process died before its first heartbeat (Optuna fails only trials that have one; seen in CI
    after a SIGKILL right after a trial was created), by its recorded process: this host and a pid no longer
    alive, or no "process" user attr at all after the heartbeat grace period (a live trial writes it first,
    within milliseconds of its creation)."""
    import datetime as dt

    with contextlib.suppress(Exception):  # a storage without heartbeats has nothing to fail
        optuna.storages.fail_stale_trials(study)
    host = socket.gethostname()
    storage = getattr(study, "_storage", None)
    storage = getattr(storage, "_backend", storage)   # Optuna wraps an RDB storage in a cache
    grace_s = getattr(storage, "grace_period", None) or 3 * HEARTBEAT_S
    now = dt.datetime.now()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        proc = t.user_attrs.get("process")
        dead = (not proc and t.datetime_start is not None and (now - t.datetime_start).total_seconds() > grace_s) or \
            (proc and proc.get("host") == host and proc.get("pid") and not _alive(int(proc["pid"])))
        if dead:
            with contextlib.suppress(Exception):   # another process failed it first
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True
    return True


def _log_callback(log, state: _StudyState):
    def callback(study, trial) -> None:
        attrs = trial.user_attrs
        what = attrs.get("pruned_detail") or attrs.get("error") or ""
        if trial.values and "repeat_of" in attrs:
            what = f"same configuration as trial {attrs['repeat_of']}"
        m = attrs.get("measurement") or {}
        if trial.values and not what:
            what = (f"{m.get('time_s', 0) * 1e3:.2f} ms/batch, spread {m.get('energy_spread') or m.get('time_spread') or 0:.1%}, "
                    f"{m.get('power_w') or 0:.0f} W, compile {m.get('compile_s') or 0:.1f} s, error {m.get('output_error')}")
        value = ", ".join(f"{v:.4g}" for v in trial.values) if trial.values else "-"
        log(f"trial {trial.number} {trial.state.name} {attrs.get('config_key')} {value} ({state.trial_s[-1]:.0f} s) {what}"[:400])

    return callback


def _budget_callback(deadline_s: float | None, state: _StudyState):
    def callback(study, trial) -> None:
        if deadline_s is None:
            return
        longest_s = max(state.trial_s[-5:], default=0.0)
        # Stop while another trial (as long as the longest recent one, +20%) still fits the budget.
        if time.perf_counter() + 1.2 * longest_s + 5.0 > deadline_s:
            state.budget_stopped = True
            study.stop()

    return callback


@contextlib.contextmanager
def _progress(enabled: bool, total: int, state: _StudyState):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    o = state.objectives[0]
    bar = Progress(TextColumn("[bold]tuning[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), disable=not enabled, transient=False)
    with bar:
        task = bar.add_task("", total=total, completed=_finished_count(state.study))

        def callback(study, trial) -> None:
            if not enabled:
                return
            feasible = state.feasible_values()
            text = ""
            if feasible:
                best = feasible[o.select([v[0] for v in feasible])][0]
                text = f"best {o.name} {best:.4g} {o.unit}"
            bar.update(task, completed=_finished_count(study), description=text)

        yield callback


def _quiet_optuna():
    """Optuna logs every trial (and failures with tracebacks) and flags heartbeats as experimental; our
    progress bar and result say what matters once."""
    import warnings

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    catcher = warnings.catch_warnings()
    catcher.__enter__()
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

    def restore() -> None:
        catcher.__exit__(None, None, None)
        optuna.logging.set_verbosity(previous)

    return restore


class _StudyFiles:
    """Where a study keeps the files its worker processes read: a built model saved as .keras, and a
    Calibration object saved as JSON (where no log_dir is given). The study's "run" attributes name them,
    for the processes that rebuild the run later -- a resumed tune(), `carm-advise worker` joining by
    storage URL and study name, the workers of several GPUs, fit_calibration.py --studies
    (calibration.whole_from_studies) -- so they live as long as the study, in one folder per study:

    - a SQLite file or a journal file: beside it, `<file name>.files/<study name>/`;
    - another database (postgresql://, mysql://...): the working directory, where the default storage
      would go: `carm-tune-<database>-<hash of the URL>.files/<study name>/` (a worker on another machine
      needs that folder at the same path);
    - an in-memory storage (sqlite:///:memory:): a temporary directory, removed when tune() returns,
      since no other process can join such a study.

    The same storage and study name give the same folder, so a resumed study overwrites its own copy
    rather than leaving another. Nothing is created before a file is saved."""

    def __init__(self, url: str, study_name: str, store=None) -> None:
        self._temporary = False
        self._path: str | None = None
        base = _storage_file(url)
        if base is None and (isinstance(store, optuna.storages.InMemoryStorage) or in_memory(url)):
            self._temporary = True
            return
        if base is None:
            base = os.path.join(os.getcwd(), f"carm-tune-{_rdb_label(url)}")
        self._path = os.path.join(f"{base}.files", _safe_name(study_name))

    def directory(self) -> str:
        if self._path is None:
            self._path = tempfile.mkdtemp(prefix="carm-tune-")
        os.makedirs(self._path, exist_ok=True)
        return self._path

    def remove_if_temporary(self) -> None:
        if self._temporary and self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


def _storage_file(url: str) -> str | None:
    """The absolute path of the file holding the storage (SQLite, journal); None for a server or in memory."""
    if url.startswith("journal:"):
        return os.path.abspath(url[len("journal:"):])
    if not url.startswith("sqlite") or in_memory(url):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    if database.startswith("file:"):   # a SQLite URI filename (?uri=true)
        database = database[len("file:"):].split("?")[0]
    return os.path.abspath(database)


def _rdb_label(url: str) -> str:
    """A file name for a server database: its name and a hash of where it is (the password left out)."""
    import hashlib

    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
        where, name = f"{u.get_backend_name()}://{u.host}:{u.port}/{u.database}", u.database or "db"
    except Exception:
        where, name = url, "db"
    return f"{_safe_name(name)}-{hashlib.sha1(where.encode()).hexdigest()[:8]}"


def _file_chars(text: str) -> str:
    """`text` with every character a file name should not hold made "_"."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _safe_name(text: str) -> str:
    """`text` as one file name: other characters become "_"; a name changed so (or over 100 characters)
    takes a hash of the original, so two study names never share a folder."""
    import hashlib

    safe = _file_chars(text).lstrip(".")
    if safe != text or len(safe) > 100:
        safe = f"{safe[:100] or 'study'}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return safe


def _portable_model(spec: ModelSpec, built, files: _StudyFiles) -> str:
    """The string a worker process rebuilds the model from; a built model is saved first (_StudyFiles says
    where), written whole under another name and then moved over the copy a resumed study left, so a worker
    still reading that copy is not handed a half-written file. The file keeps the model's name: a worker
    names the model by its file's stem."""
    if spec.kind == "model":
        directory = files.directory()
        path = os.path.join(directory, f"{spec.name}.keras")
        partial = os.path.join(directory, f".{spec.name}.{os.getpid()}.partial.keras")
        try:
            built.save(partial)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
        return path
    return spec.portable()


# ---- clocks -------------------------------------------------------------------------------------


def _clock_gpu(apply_clocks: bool, gpu=None):
    """The GPU whose clocks trials may lock; refuses at once (NoPermissionError) where that is not allowed."""
    if not apply_clocks:
        return None
    from carm_advisor.errors import NoPermissionError
    from carm_advisor.power.clocks import ENV_NO_CLOCK_CONTROL, ClockController, clock_control_disabled_by_env
    from carm_advisor.power.nvml import open_visible_gpu

    if clock_control_disabled_by_env():
        raise NoPermissionError(f"--apply-clocks refused: {ENV_NO_CLOCK_CONTROL} is set (this GPU's settings must not change)")
    gpu = gpu or open_visible_gpu()   # the GPU this process measures on, whatever CUDA_VISIBLE_DEVICES says
    # Probe the permission now, not after an hour of trials: lock at the top clock and restore.
    with ClockController(gpu, allow_changes=True) as ctl:
        top = max(gpu.supported_sm_clocks_mhz())
        ctl.lock_sm_clocks_mhz(top, top)
    return gpu


def _default_clocks(gpu) -> tuple[float, ...]:
    supported = sorted(gpu.supported_sm_clocks_mhz(), reverse=True)
    # The top clock and four steps down to about 55% of it: where DVFS savings usually lie.
    top = supported[0]
    targets = [top * f for f in (1.0, 0.9, 0.8, 0.7, 0.55)]
    return tuple(sorted({min(supported, key=lambda c: abs(c - t)) for t in targets}, reverse=True))


@contextlib.contextmanager
def _clock_lock(gpu, sm_clock_mhz: float | None):
    """Lock the SM clock for one trial through the ClockController (restored on every way out)."""
    if gpu is None or sm_clock_mhz is None:
        yield
        return
    from carm_advisor.power.clocks import ClockController

    with ClockController(gpu, allow_changes=True, sm_clocks_mhz=(sm_clock_mhz, sm_clock_mhz)):
        yield


# Exposed for tests and the benchmark script.
__all__ = ["tune", "resolve_objectives", "OBJECTIVES", "FakeRunner", "PredictedRunner", "WorkerRunner"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
