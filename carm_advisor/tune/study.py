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
that, and never picked as a first trial; a batch size asked for that no configuration of the space fits is
named in the result's warnings, and a study none of whose asked batch sizes fits is refused before it starts.
A predicted study's values are the same every time, so it stops once every configuration of its space has
a finished trial, and says so. A stop at the timeout is said too.

Resuming: a study stores a fingerprint of what its trial values depend on (study_fingerprint: source, mode,
objectives, model name and content; for a measured study also its GPU model; for a predicted study also the
profile and a hash of the calibration) when it is created;
tune() refuses (StudyMismatchError, one line) to resume one made with a different fingerprint. The model is
loaded (or its name checked) before the storage is opened, so a bad model leaves no study file behind.

tune() runs in named steps over one `_Run` (what is resolved so far): the source of the figures
(_resolve_source), the space, baseline and predictor (_build_space, _build_predictor), the study
(_open_study, _store_run), the trials (_run_serial, or _run_parallel on several GPUs) and the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from carm_advisor.advise.analyze import mapping_warnings
from carm_advisor.errors import GPUUnavailableError
from carm_advisor.mapping.input_shapes import shapes_json
from carm_advisor.measure.profile import profile_for_this_gpu
from carm_advisor.models.builder import ModelSpec, model_spec
from carm_advisor.models.keras_import import import_tensorflow_quietly
from carm_advisor.power.nvml import gpu_count
from carm_advisor.trials.predicted import ConfigPredictor, predicted_device
from carm_advisor.trials.runner import FakeRunner, PredictedRunner, TrialFailed, WorkerRunner, WorkerSettings
from carm_advisor.trials.space import SearchSpace, TrialConfig, baseline_config
from carm_advisor.tune import clocks as clock_control
from carm_advisor.tune import parallel
from carm_advisor.tune.fingerprint import check_fingerprint, study_fingerprint
from carm_advisor.tune.objective import (
    STARTED,
    VALUE_POLICY_BOUND,
    VALUE_POLICY_CALIBRATED,
    StudyState,
    budget_callback,
    constraints_func_for,
    evaluated_keys,
    fail_stale,
    finished_count,
    log_callback,
    make_objective,
    progress_bar,
    quiet_optuna,
    sampler_for,
    space_callback,
)
from carm_advisor.tune.objectives import OBJECTIVES, PARETO_DEFAULT, Objective, get_objective
from carm_advisor.tune.options import MODES, TuneOptions, run_attributes
from carm_advisor.tune.result import TuneResult, build_result
from carm_advisor.tune.storage import open_storage, read_only_error, storage_url
from carm_advisor.tune.study_files import StudyFiles, calibration_ref, portable_model
from carm_advisor.tune.study_setup import (
    batch_sizes_that_never_fit,
    check_costed,
    check_model,
    enqueue_start,
    fits_in_memory,
    measured_gpu_name,
    narrow_to_file,
    resume_notes,
    searched_quantization,
    with_baseline,
)
from carm_advisor.units import plural


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C while trials ran: the message says where the study is and what it keeps."""


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


@dataclass
class _Run:
    """What tune() has resolved so far, filled in step by step."""

    options: TuneOptions
    spec: ModelSpec
    built: Any                       # the keras.Model given, else None
    objectives: list[Objective]
    source: str                      # "measured", "predicted" or "fake"
    parallel: bool                   # several GPUs: one worker process each
    gpu: Any = None                  # the GPU whose clocks trials lock (apply_clocks), else None
    clocks: tuple[float, ...] = ()
    space: SearchSpace | None = None
    asked_batch_sizes: tuple[int, ...] = ()
    baseline: TrialConfig | None = None
    traits: Any = None               # a model file's own layout and precision (builder.file_traits)
    space_notes: list[str] = field(default_factory=list)
    predictor: Any = None
    own_predictor: bool = True
    calibration: Any = None          # options.calibration with "auto" resolved
    calibrated: bool = False         # a predicted study ranking calibrated values only
    fits: Any = None                 # fits(config) -> bool in a predicted study with a memory bound
    notes: list[str] = field(default_factory=list)   # the result's warnings from before the trials
    url: str = ""
    store: Any = None
    study_name: str = ""
    study: Any = None
    remaining: int = 0               # trials still to run for the study to hold n_trials
    target: int = 0                  # trials the study holds at the end, waiting ones not counted
    start_s: float = 0.0             # time.perf_counter() when tune() was called


@dataclass
class _Outcome:
    device: dict[str, Any]
    budget_stopped: bool = False
    notes: list[str] = field(default_factory=list)


@_mapping_said_once
def tune(model_or_builder: Any, options: TuneOptions | None = None, **overrides: Any) -> TuneResult:
    """Search the configuration space for the best objective and return a TuneResult.

    model_or_builder: a keras.applications name, a .keras file, "module:function", a builder function
    `f(config)` (built under the trial's dtype policy and layout), or a built model (predicted only, or saved to a
    .keras file for the workers). options: a TuneOptions (tune/options.py says what each field does); keyword
    `overrides` replace its fields (`tune("vgg16", objective="gflops_per_watt", n_trials=30)`), an unknown one is a
    TypeError naming the valid ones.

    Two objectives make a multi-objective study (`pareto=True` pairs energy efficiency with throughput; the
    result's best is then a member of Optuna's Pareto front, picked as result.best_rule says:
    tune/result.pick_best). A model none of whose layers the CARM can cost is refused (MappingError, one line)
    before the storage is opened. The same storage and study name resume a study (finished trials are kept, not
    measured again).

    The saved copy of a built model (and of a Calibration object, without log_dir) is kept as long as the
    study, since the study's "run" attributes name it for workers joining later and for
    fit_calibration.py --studies: beside a SQLite or journal file, in `<file name>.files/<study name>/`
    (`s.db` -> `s.db.files/<study name>/<model name>.keras`); for a database server, in the working
    directory, `carm-tune-<database>-<hash of the URL>.files/<study name>/`; for an in-memory storage
    (sqlite:///:memory:), in a temporary directory removed when tune() returns. A resumed study overwrites
    its own copy. Delete that folder with the study.

    calibration "auto": a predicted study uses the shipped calibration of the profile's GPU model (with this GPU's
    cache) and reports its predictions as trial values; a measured study orders its first trials by the CARM
    bound (benchmarks/tuning_prediction_check.py found the calibrated ranking of VGG16's batch sizes on jax
    inverted against the H200's measurements). True: the calibration in either (a measured study then orders by
    it). Pruning always compares the bound. Several `gpus`: one worker process per GPU runs the study
    (tune/parallel.py). input_shapes: the model's input shapes (mapping/input_shapes.py), which every trial is
    predicted or measured on (an application is built at its image size); the study's fingerprint holds them, its
    "run" attributes give them to joining workers. A predicted study stops once every configuration of its space
    has a finished trial.
    """
    if options is None:
        options = TuneOptions()
    elif not isinstance(options, TuneOptions):
        raise TypeError(f"tune() takes its options as a TuneOptions or as keywords, received: {options!r} "
                        "(objective=, n_trials=, ...)")
    options = options.replace(**overrides)
    run = _resolve_source(model_or_builder, options)
    _build_space(run)
    _build_predictor(run)
    files = None
    try:
        with _optuna_quiet():
            _open_study(run)
            files = StudyFiles(run.url, run.study_name, run.store)   # a temporary one goes when tune() returns
            model_ref = _store_run(run, files)
            outcome = _run_parallel(run, model_ref) if run.parallel else _run_serial(run, model_ref, files)
        return _result(run, outcome)
    finally:
        if files is not None:
            files.remove_if_temporary()


# ---- the steps ----------------------------------------------------------------------------------


def _resolve_source(model_or_builder: Any, o: TuneOptions) -> _Run:
    """The model, the objectives and where the figures come from; what cannot be done here is refused."""
    start_s = time.perf_counter()
    objectives = resolve_objectives(o.objective, o.pareto)
    spec = model_or_builder if isinstance(model_or_builder, ModelSpec) else model_spec(model_or_builder,
                                                                                         input_shapes=o.input_shapes)
    several = o.gpus is not None and len(o.gpus) > 1
    if several and ((o.runner is not None and not isinstance(o.runner, FakeRunner)) or o.apply_clocks):
        raise ValueError("several GPUs: each worker process builds its own runner (give runner_factory, not runner), "
                         "and --apply-clocks is not supported there yet")
    source = _source(o)
    if o.gpus is not None and source == "predicted":
        raise GPUUnavailableError(_predicted_gpus_message(o))
    if source == "predicted" and o.mode == "training":
        raise ValueError("a predicted study covers inference only (the CARM predictor maps forward passes); "
                         "training needs a GPU to measure")
    if o.apply_clocks and source == "predicted":
        raise GPUUnavailableError("--apply-clocks locks the clocks of an NVIDIA GPU; this study is not measured on one")
    gpu = clock_control.clock_gpu(o.apply_clocks, o.clock_gpu)
    clocks = o.sm_clocks_mhz or (clock_control.default_clocks(gpu) if o.apply_clocks else ())
    return _Run(options=o, spec=spec, built=model_or_builder if spec.kind == "model" else None,
                objectives=objectives, source=source, parallel=several, gpu=gpu, clocks=clocks, start_s=start_s)


def _source(o: TuneOptions) -> str:
    if o.runner_factory is not None:
        return getattr(parallel.load_factory(o.runner_factory), "source", "fake")
    if o.runner is not None:
        return o.runner.source
    if o.predict is True:
        return "predicted"
    if gpu_present():
        return "measured"
    if o.predict is False:
        raise GPUUnavailableError("measuring needs an NVIDIA GPU; none is visible here (use predict=True / --predict)")
    return "predicted"


def _predicted_gpus_message(o: TuneOptions) -> str:
    """GPUs named for a predicted study: refused, since nothing would run on them (a user naming GPUs expects
    trials measured there, and a predicted study would silently ignore them)."""
    gpus = ",".join(map(str, o.gpus))
    if o.predict is True:
        return (f"--gpus {gpus} names GPUs to measure on, but this study is predicted (--predict): its trials run "
                "in this process and use no GPU; drop --gpus, or --predict to measure")
    return (f"--gpus {gpus}: no NVIDIA GPU is visible here, so no GPU worker can start and nothing can be measured; "
            "drop --gpus to predict the study from the CARM on this machine, or run it where those GPUs are")


def _build_space(run: _Run) -> None:
    """The search space (narrowed to a model file's own layout and precision) and the baseline in it."""
    o = run.options
    # Keras imports TensorFlow wherever it is installed, whatever the backend (set_random_seed seeds it when a model
    # is built; loading and saving a file check its types): quietly, here, before the first model is touched.
    import_tensorflow_quietly()
    space = o.space or SearchSpace.default(o.backends, o.batch_sizes, sm_clocks_mhz=run.clocks,
                                           require_installed=run.source != "predicted")
    run.asked_batch_sizes = tuple(space.batch_sizes)
    # A file or built model: its own layout, and its own precision where it cannot be rebuilt.
    if run.spec.keeps_own_layout:
        space, run.traits, run.space_notes = narrow_to_file(space, run.spec)
    baseline = o.baseline
    if baseline is None:
        import keras

        current = _current_backend()
        layout = keras.config.image_data_format()
        baseline = baseline_config(current if current in space.backends else space.backends[0],
                                   layout if layout in space.layouts else space.layouts[0])
        traits = run.traits
        if traits is not None and not traits.fixed_precision and traits.policy in space.precisions:
            baseline = dataclasses.replace(baseline, precision=traits.policy)   # a file saved mixed runs mixed
    run.baseline = baseline
    run.space = with_baseline(space, baseline)


def _build_predictor(run: _Run) -> None:
    """The predictor (ours, or the one given), the model checked with it, and the study's fingerprint inputs."""
    o = run.options
    calibration = o.calibration
    if isinstance(calibration, str) and calibration == "auto":
        calibration = run.source == "predicted"
    run.calibration = calibration
    run.own_predictor = o.predictor is None
    if o.profile is None and o.predictor is None and run.source == "measured":
        # the bounds of the GPU measured on, never another model's; its workers load it by this name or file
        chosen = profile_for_this_gpu(o.gpus[0] if o.gpus else None, o.progress)
        run.options = o = o.replace(profile=chosen.ref or chosen.profile)
    traits = run.traits
    run.predictor = o.predictor or ConfigPredictor(
        run.spec, o.profile, model=run.built, calibration=calibration,
        policies_fixed=None if traits is None else bool(traits.fixed_precision), input_shapes=o.input_shapes)
    # A predicted study with a calibration for some of its space: calibrated values, bounds not ranked.
    space = run.space
    calibrates = getattr(run.predictor, "calibrates", lambda b, c: False)
    run.calibrated = run.source == "predicted" and any(calibrates(b, c) for b in space.backends
                                                       for c in space.compilers[b])
    # The model first: a bad name or file fails here, before a storage file (and its baseline trial) exists.
    check_model(run.spec, run.predictor, run.baseline, run.own_predictor)
    check_costed(run.spec, run.predictor, run.baseline)
    # Keras' quantised precisions only where the layers model.quantize converts carry enough of the FLOPs
    run.space, said = searched_quantization(run.space, run.predictor, run.baseline, run.spec.name)
    run.space_notes = run.space_notes + said
    run.fits = fits_in_memory(run.source, run.predictor, o.mode)
    run.notes += batch_sizes_that_never_fit(run.space, run.asked_batch_sizes, run.fits, run.predictor, o.mode)


def _open_study(run: _Run) -> None:
    """Open (or resume) the study: refuse a mismatched one, store what the workers and the result read."""
    o = run.options
    fingerprint = study_fingerprint(run.source, o.mode, run.objectives, run.spec, run.predictor,
                                    gpu=measured_gpu_name(o.gpus if run.parallel else None)
                                    if run.source == "measured" else None, input_shapes=o.input_shapes)
    run.url = storage_url(o.storage, run.spec.name)
    run.store = open_storage(o.storage, run.spec.name, o.heartbeat_s)
    # "-calibrated": an older bound-valued predicted study in the same file is not resumed into mixed values.
    run.study_name = o.study_name or (f"{run.spec.name}-{'+'.join(ob.name for ob in run.objectives)}-{o.mode}-"
                                      f"{run.source}" + ("-calibrated" if run.calibrated else ""))
    # Optuna >= 5 takes constraints from trial.set_constraint; older ones from the sampler's constraints_func
    # (a calibrated predicted study always has one: its 'uncalibrated' constraint).
    constraints_func = constraints_func_for(o.max_output_error is not None or o.max_slowdown is not None,
                                            run.calibrated)
    sampler = sampler_for(run.objectives, constraints_func, o.seed)
    try:
        study = optuna.create_study(storage=run.store, study_name=run.study_name, sampler=sampler,
                                    load_if_exists=True, directions=[ob.direction for ob in run.objectives])
    except ValueError as exc:
        raise ValueError(f"cannot resume study {run.study_name!r} in {run.url}: {exc}") from None
    except optuna.exceptions.StorageInternalError as exc:   # Optuna's words for any failed write
        refusal = read_only_error(exc, run.url)
        if refusal is None:
            raise
        raise refusal from None
    check_fingerprint(study, fingerprint, run.url)
    fail_stale(study)
    run.notes[:0] = resume_notes(study, run.space, o.n_trials)
    study.set_user_attr("space", run.space.to_dict())
    study.set_user_attr("objectives", [ob.name for ob in run.objectives])
    study.set_user_attr("source", run.source)
    study.set_user_attr("baseline", run.baseline.to_dict())
    study.set_user_attr("space_notes", run.space_notes)
    if run.source == "predicted":
        study.set_user_attr("value_policy", VALUE_POLICY_CALIBRATED if run.calibrated else VALUE_POLICY_BOUND)
    run.study = study
    run.remaining = o.n_trials - finished_count(study)
    run.target = (sum(t.state != optuna.trial.TrialState.WAITING for t in study.get_trials(deepcopy=False))
                  + max(run.remaining, 0))


def _store_run(run: _Run, files: StudyFiles) -> str | None:
    """Save a built model where another process needs it and store the study's "run" attributes (what a worker
    joining by storage URL and study name rebuilds the run from); the model as a worker loads it, else None."""
    o, spec = run.options, run.spec
    if spec.kind == "callable" or (spec.kind == "model" and not run.parallel and run.source == "predicted"):
        return None
    model_ref = portable_model(spec, run.built, files)
    calibration = calibration_ref(run.calibration, run.predictor, run.own_predictor, run.parallel, o.log_dir,
                                  run.study_name, files)
    run.study.set_user_attr("run", run_attributes(
        o, model=model_ref, trial_target=run.target, calibration=calibration,
        fake_delay_s=o.runner.delay_s if isinstance(o.runner, FakeRunner) else None,
        input_shapes=shapes_json(o.input_shapes)))
    return model_ref


def _run_parallel(run: _Run, model_ref: str | None) -> _Outcome:
    """One worker process per GPU runs the study (tune/parallel.py); workers still running at the timeout or the
    budget are stopped."""
    o = run.options
    if model_ref is None:
        run.spec.portable()   # raises: this builder cannot run in a worker process
    parallel.check_gpus_exist(o.gpus, run.source)
    enqueue_start(run.study, run.space, run.baseline, run.predictor, run.objectives, o.carm_order, run.calibrated,
                  run.fits)
    limits_s = [v for v in (o.timeout_s, o.budget_s) if v is not None]
    try:
        device = parallel.launch(run.url, run.study_name, o.gpus, max(run.remaining, 0), log_dir=o.log_dir, log=o.log,
                                 deadline_s=min(limits_s) if limits_s else None)
        names = {(t.user_attrs.get("gpu") or {}).get("name") for t in run.study.get_trials(deepcopy=False)} - {None}
        device["name"] = ", ".join(sorted(names)) or None
    finally:
        fail_stale(run.study)
    stopped = bool(device.get("stopped_at_deadline"))
    notes = [_timeout_note(run)] if stopped and o.timeout_s is not None and o.timeout_s == min(limits_s) else []
    return _Outcome(device, budget_stopped=stopped, notes=notes)


def _run_serial(run: _Run, model_ref: str | None, files: StudyFiles) -> _Outcome:
    """This process runs the trials (`carm-advise worker` processes may join the study while it runs)."""
    o = run.options
    runner = _runner(run, model_ref, files)
    enqueue_start(run.study, run.space, run.baseline, run.predictor, run.objectives, o.carm_order, run.calibrated,
                  run.fits)
    state = StudyState(run.study, run.objectives, run.baseline, o.max_slowdown, o.max_output_error,
                       rank_calibrated_only=run.calibrated)
    # shared: `carm-advise worker` processes may join this study while it runs (RDB: heartbeats free a
    # configuration whose worker died; a journal has none, so a resumed run there does not wait)
    objective_fn = make_objective(state, run.space, run.predictor, runner, o.carm_pruning, o.prune_margin, run.gpu,
                                  trial_attrs={"gpu": parallel.this_gpu(run.source)},
                                  shared=model_ref is not None and isinstance(run.store, optuna.storages.RDBStorage))
    deadline_s = None if o.budget_s is None else run.start_s + o.budget_s
    # A predicted configuration's value is the same every time: the study is done once each has a finished trial.
    grid = {c.key for c in run.space.grid()} if run.source == "predicted" else None
    exhausted = grid is not None and evaluated_keys(run.study) >= grid
    timed_out = interrupted = False
    try:
        if run.remaining > 0 and not exhausted:
            with progress_bar(o.progress, o.n_trials, state) as callback:
                callbacks = [callback, budget_callback(deadline_s, state),   # joined workers count too
                             optuna.study.MaxTrialsCallback(run.target, states=STARTED)]
                callbacks += [space_callback(grid, state)] if grid is not None else []
                callbacks += [log_callback(o.log, state)] if o.log else []
                started_s = time.perf_counter()
                run.study.optimize(objective_fn, n_trials=run.remaining, timeout=o.timeout_s, catch=(TrialFailed,),
                                   callbacks=callbacks, gc_after_trial=False)
                timed_out = o.timeout_s is not None and time.perf_counter() - started_s >= o.timeout_s
    except KeyboardInterrupt:
        interrupted = True
    finally:
        runner.close()
        fail_stale(run.study)
    held = finished_count(run.study)
    if interrupted:
        raise StudyInterrupted(f"study {run.study_name!r} in {run.url} keeps its {plural(held, 'finished trial')}; "
                               "rerun the same command to resume it")
    notes = []
    if (exhausted or state.space_exhausted) and held < o.n_trials:
        notes.append(f"all {len(grid)} configurations of the space were predicted; stopped after "
                     f"{plural(held, 'trial')} ({o.n_trials} asked for)")
    elif timed_out and not state.budget_stopped and held < o.n_trials:
        notes.append(_timeout_note(run))
    device = predicted_device(run.predictor) if run.source == "predicted" else getattr(runner, "device", None) or {}
    return _Outcome(device, budget_stopped=state.budget_stopped, notes=notes)


def _runner(run: _Run, model_ref: str | None, files: StudyFiles):
    """The trial runner of this process: the one given, the runner factory's, or ours for the source."""
    o = run.options
    if o.runner is not None:
        return o.runner
    if o.runner_factory is not None:
        run.predictor, runner = parallel.runner_from_run(run.study.user_attrs["run"], run.predictor)
        return runner
    if run.source == "predicted":
        return PredictedRunner(run.predictor, o.mode)
    model_ref = model_ref or portable_model(run.spec, run.built, files)
    settings = dataclasses.replace(o.worker_settings or WorkerSettings(), mode=o.mode)
    return WorkerRunner(model_ref, run.predictor, settings, trial_timeout_s=o.trial_timeout_s, log_dir=o.log_dir,
                        input_shapes=shapes_json(o.input_shapes))


def _timeout_note(run: _Run) -> str:
    o = run.options
    return (f"stopped at the timeout of {o.timeout_s:g} s after {finished_count(run.study)} of the {o.n_trials} "
            "trials asked for; rerun the same command to resume the study")


def _result(run: _Run, outcome: _Outcome) -> TuneResult:
    o = run.options
    result = build_result(run.study, run.objectives, run.space, run.predictor, run.baseline, source=run.source,
                          storage_url=run.url, wall_s=time.perf_counter() - run.start_s, device=outcome.device,
                          command=o.command or shlex.join(sys.argv), prune_margin=o.prune_margin,
                          max_slowdown=o.max_slowdown, max_output_error=o.max_output_error,
                          budget_stopped=outcome.budget_stopped, reference=o.reference)
    result.warnings[:0] = run.notes + outcome.notes
    return result


@contextlib.contextmanager
def _optuna_quiet():
    restore = quiet_optuna()
    try:
        yield
    finally:
        restore()


# Exposed for tests and the benchmark script.
__all__ = ["MODES", "OBJECTIVES", "FakeRunner", "PredictedRunner", "StudyInterrupted", "TuneOptions", "WorkerRunner",
           "resolve_objectives", "tune"]

logging.getLogger(__name__).addHandler(logging.NullHandler())
