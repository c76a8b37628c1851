"""Several GPUs, one study: a worker process per GPU, all running the same Optuna study through its storage.

Optuna's storage is the distributed engine: every worker (`carm-advise worker --storage URL --study NAME`,
here or on another machine) loads the study, rebuilds the run from the study's "run" user attributes
(model and its input shapes, mode, objectives, space, baseline, trial target) and calls study.optimize. `launch()` starts one
worker per local GPU, each pinned with CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index
means the same GPU to CUDA and to NVML), and gives each an exact share of the trials: the shares add up
to the trials asked for, so one machine runs exactly that many. A worker that dies is started again on
its GPU for the rest of its share (twice at most; then a GPU whose worker finished takes it over); its
trial is marked FAIL (RDB storages: by the heartbeat after the grace period; the journal has no
heartbeat in Optuna 5.1, so the launcher fails it). A worker joined from another machine takes trials
while the study has fewer than its target (Optuna's MaxTrialsCallback counting every trial taken), so a study
with joined workers may end a trial or two over the target, never under it.

Each trial records the GPU that ran it (user attribute "gpu": NVML index, UUID, name, host). GPUs of one
model still differ, so each worker first measures the baseline configuration on its own GPU (once per
GPU UUID, kept in the study's user attribute "gpu_baseline:<uuid>", not a trial) and each trial it
measures records "gain_over_gpu_baseline": its objective values over that GPU's baseline (higher is
better for every objective). Compare configurations across GPUs by that gain, not by raw figures.
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import optuna

from carm_advisor.mapping.input_shapes import shapes_from_json
from carm_advisor.models.builder import model_spec
from carm_advisor.models.keras_import import import_tensorflow_quietly
from carm_advisor.power.nvml import gpu_count
from carm_advisor.trials.predicted import ConfigPredictor
from carm_advisor.trials.runner import FakeRunner, PredictedRunner, TrialFailed, TrialOutOfMemory, WorkerRunner
from carm_advisor.trials.space import SearchSpace, TrialConfig
from carm_advisor.tune.objective import (
    STARTED,
    VALUE_POLICY_CALIBRATED,
    StudyState,
    constraints_func_for,
    fail_stale,
    log_callback,
    make_objective,
    quiet_optuna,
    sampler_for,
)
from carm_advisor.tune.objectives import get_objective
from carm_advisor.tune.options import TuneOptions
from carm_advisor.tune.storage import StorageError, open_storage, storage_file

MAX_RESTARTS = 2   # per GPU: a worker dying more often than this says the GPU, not the trial, is the problem


def parse_gpus(text: str) -> tuple[int, ...]:
    """'0,1,2,3' -> (0, 1, 2, 3): NVML indices, distinct, non-negative."""
    try:
        gpus = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"Expected GPU indices like 0,1,2,3, Received: --gpus {text!r}") from None
    if not gpus or any(g < 0 for g in gpus):
        raise ValueError(f"Expected GPU indices >= 0 like 0,1,2,3, Received: --gpus {text!r}")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"Expected each GPU once, Received: --gpus {text!r}")
    return gpus


def check_gpus_exist(gpus: Sequence[int], source: str) -> None:
    """A measured study needs every GPU it names; a predicted or fake one only counts processes."""
    if source != "measured":
        return
    count = gpu_count()
    missing = [g for g in gpus if g >= count]
    if missing:
        raise ValueError(f"Expected GPU indices in [0, {count}), Received: --gpus {','.join(map(str, gpus))}")


def shares(n_trials: int, n_workers: int) -> list[int]:
    """n_trials split as evenly as possible (the first workers take one more)."""
    base, extra = divmod(n_trials, n_workers)
    return [base + (i < extra) for i in range(n_workers)]


def load_factory(spec: str):
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"Expected a runner factory as 'package.module:function', Received: {spec!r}")
    return getattr(importlib.import_module(module), attr)


def this_gpu(source: str) -> dict[str, Any]:
    """The GPU this process measures on (its first CUDA-visible device), or the host alone where there is none."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if source == "measured":
        from carm_advisor.power.nvml import gpu_identity, open_visible_gpu

        try:
            return dict(gpu_identity(open_visible_gpu()), visible=visible)
        except Exception:   # no NVML: the trials still say where they ran
            pass
    return {"index": None, "uuid": None, "name": None, "host": socket.gethostname(), "visible": visible}


def runner_from_run(run: dict[str, Any], predictor=None):
    """(predictor, runner) for a worker of this study, from its "run" attributes."""
    if run.get("runner_factory"):
        return load_factory(run["runner_factory"])(run)
    options = TuneOptions.from_run(run)
    calibration = run.get("calibration", False)   # a path (the study's own calibration) or True/False
    shapes = shapes_from_json(run.get("input_shapes"))   # the model's input shapes, where the study was given some
    if not isinstance(calibration, str):
        calibration = bool(calibration)
    predictor = predictor or ConfigPredictor(model_spec(run["model"], input_shapes=shapes), options.profile,
                                             calibration=calibration, input_shapes=shapes)
    if run["source"] == "predicted":
        return predictor, PredictedRunner(predictor)
    if run["source"] == "fake":
        return predictor, FakeRunner(predictor, delay_s=run.get("fake_delay_s") or 0.0)
    return predictor, WorkerRunner(run["model"], predictor, options.worker_settings,
                                   trial_timeout_s=options.trial_timeout_s, input_shapes=run.get("input_shapes"))


# ---- one worker ---------------------------------------------------------------------------------


def join_study(storage: str, study_name: str, share: int | None = None, worker_id: str | None = None,
               seed: int | None = None, log=None) -> int:
    """Run trials of an existing study until it has its target (or, given `share`, that many); returns
    how many trials this worker ran. The whole run is read from the study itself; a study that is not there (no
    study file, or no study of that name in it) is refused (StorageError, one line), and nothing is created."""
    path = storage_file(storage)
    if path is not None and not os.path.exists(path):
        raise StorageError(f"no study {study_name!r} to join: there is no study file {path} (a worker joins a study "
                           "carm-advise tune started: give that study's --storage, as its result shows it)")
    quiet = quiet_optuna()
    try:
        probe = optuna.load_study(study_name=study_name, storage=open_storage(storage, "study"))
    except KeyError:
        quiet()
        names = optuna.get_all_study_names(open_storage(storage, "study"))
        raise StorageError(f"no study {study_name!r} in {storage} (studies there: {', '.join(map(repr, names)) or 'none'})"
                           "; a worker joins a study carm-advise tune started, by the name its result shows") from None
    except BaseException:
        quiet()
        raise
    attrs = probe.user_attrs
    if "run" not in attrs:
        quiet()
        raise StorageError(f"study {study_name!r} was not started by carm-advise tune (no 'run' attribute): "
                           "nothing to join")
    run = dict(attrs["run"], source=attrs["source"])
    options = TuneOptions.from_run(run)
    objectives = [get_objective(n) for n in attrs["objectives"]]
    space_d = attrs["space"]
    space = SearchSpace(tuple(space_d["backends"]), tuple(space_d["precisions"]), tuple(space_d["batch_sizes"]),
                        tuple(space_d["layouts"]), {b: tuple(c) for b, c in space_d["compilers"].items()},
                        tuple(space_d["sm_clocks_mhz"]))
    baseline = TrialConfig.from_dict(attrs["baseline"])
    calibrated = attrs.get("value_policy") == VALUE_POLICY_CALIBRATED
    constrained = options.max_output_error is not None or options.max_slowdown is not None
    store = open_storage(storage, "study", options.heartbeat_s)
    study = optuna.load_study(study_name=study_name, storage=store,
                              sampler=sampler_for(objectives, constraints_func_for(constrained, calibrated), seed))
    import_tensorflow_quietly()   # before the worker builds the model: Keras imports it (keras_import.py)
    predictor, runner = runner_from_run(run)
    worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
    gpu = this_gpu(run["source"])
    try:
        gain_over = _gpu_baseline(study, runner, baseline, objectives, gpu)
        state = StudyState(study, objectives, baseline, options.max_slowdown, options.max_output_error,
                            rank_calibrated_only=calibrated)
        objective_fn = make_objective(state, space, predictor, runner, options.carm_pruning, options.prune_margin,
                                      None, trial_attrs={"gpu": gpu, "worker": worker_id}, shared=True,
                                      gain_over=gain_over)
        target = run["trial_target"]
        callbacks = [optuna.study.MaxTrialsCallback(target, states=STARTED)] + ([log_callback(log, state)] if log else [])
        optimize = dict(catch=(TrialFailed,), callbacks=callbacks, gc_after_trial=False)
        if share is not None:
            if share > 0:
                study.optimize(objective_fn, n_trials=share, **optimize)
        else:
            while len(study.get_trials(deepcopy=False, states=STARTED)) < target:
                study.optimize(objective_fn, n_trials=1, **optimize)
    finally:
        runner.close()
        fail_stale(study)
        quiet()
    return sum(t.user_attrs.get("worker") == worker_id for t in study.get_trials(deepcopy=False))


def _gpu_baseline(study, runner, baseline, objectives, gpu: dict[str, Any]):
    """This GPU's baseline figures (measured once per GPU, kept in the study) -> a function giving a trial's
    gain over them, oriented so that > 1 is better for every objective. None when the baseline fails here."""
    key = "gpu_baseline:" + (gpu.get("uuid") or f"{gpu['host']}/{gpu.get('visible')}")
    record = study.user_attrs.get(key)
    if record is None:
        try:
            m = runner.run(baseline)
        except (TrialFailed, TrialOutOfMemory):
            return None
        record = {"values": [o.value(m) for o in objectives], "measurement": m.to_dict(), "gpu": gpu}
        study.set_user_attr(key, record)
    base = record["values"]

    def gain_over(values: list[float]) -> list[float | None]:
        return [(v / b if o.direction == "maximize" else b / v) if b and v else None
                for o, v, b in zip(objectives, values, base)]

    return gain_over


# ---- the launcher -------------------------------------------------------------------------------


def gpu_env(gpu: int) -> dict[str, str]:
    return dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), CUDA_DEVICE_ORDER="PCI_BUS_ID")


def launch(url: str, study_name: str, gpus: Sequence[int], n_trials: int, log_dir: str | None = None,
           log=None, deadline_s: float | None = None, poll_s: float = 0.2) -> dict[str, Any]:
    """Run `n_trials` new trials of the study on `gpus`, one worker process each; returns the device record
    {"gpus": [...], "workers": [...]} for the result."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="carm-tune-")
    started_s = time.monotonic()
    pending = dict(zip(gpus, shares(n_trials, len(gpus))))   # GPU -> trials it still owes
    restarts = {g: 0 for g in gpus}
    running: dict[int, tuple[subprocess.Popen, str, int, Any]] = {}
    workers: list[dict[str, Any]] = []
    orphaned = 0   # trials of GPUs given up on, for the next GPU that finishes
    stopped = False

    def start(gpu: int, share: int) -> None:
        worker_id = f"{socket.gethostname()}:gpu{gpu}:{len(workers)}"
        out = open(os.path.join(log_dir, f"worker-gpu{gpu}-{len(workers)}.log"), "ab")
        command = [sys.executable, "-m", "carm_advisor.cli", "worker", "--storage", url, "--study", study_name,
                   "--share", str(share), "--worker-id", worker_id, "--seed", str(len(workers))]
        env = gpu_env(gpu)
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        running[gpu] = (proc, worker_id, share, out)
        workers.append({"gpu": gpu, "worker": worker_id, "share": share, "pid": proc.pid, "log": out.name})
        if log:
            log(f"worker {worker_id} started on GPU {gpu} for {share} trials (pid {proc.pid})")

    for gpu, share in pending.items():
        if share > 0:
            start(gpu, share)
    try:
        while running:
            time.sleep(poll_s)
            if deadline_s is not None and time.monotonic() - started_s > deadline_s:
                stopped = True
                break
            for gpu, (proc, worker_id, share, out) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                out.close()
                del running[gpu]
                done = _worker_trials(url, study_name, worker_id)
                owed = max(0, share - done)
                record = next(w for w in workers if w["worker"] == worker_id)
                record.update(exit_code=code, trials=done)
                if code != 0:
                    _fail_running(url, study_name, worker_id)
                    restarts[gpu] += 1
                    if log:
                        log(f"worker {worker_id} on GPU {gpu} exited with code {code} after {done} trials; "
                            f"{owed} left" + (", GPU given up" if restarts[gpu] > MAX_RESTARTS else ""))
                    if restarts[gpu] > MAX_RESTARTS:
                        orphaned += owed
                    elif owed:
                        start(gpu, owed)
            idle = [g for g in gpus if g not in running and restarts[g] <= MAX_RESTARTS]
            if orphaned and idle:   # a given-up GPU's trials go to one that is free
                start(idle[0], orphaned)
                orphaned = 0
    finally:
        for proc, _, _, out in running.values():   # deadline or interrupt: stop what is left
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            out.close()
    return {"gpus": list(gpus), "workers": workers, "orphaned_trials": orphaned, "stopped_at_deadline": stopped}


def _study_storage(url: str, study_name: str):
    storage = open_storage(url, "study")
    return storage, storage.get_study_id_from_name(study_name)


def _worker_trials(url: str, study_name: str, worker_id: str) -> int:
    storage, study_id = _study_storage(url, study_name)
    return sum(t.user_attrs.get("worker") == worker_id for t in storage.get_all_trials(study_id, deepcopy=False))


def _fail_running(url: str, study_name: str, worker_id: str) -> None:
    """A dead worker's RUNNING trial -> FAIL now (the journal storage has no heartbeat to do it)."""
    storage, study_id = _study_storage(url, study_name)
    states = (optuna.trial.TrialState.RUNNING,)
    for t in storage.get_all_trials(study_id, deepcopy=False, states=states):
        if t.user_attrs.get("worker") == worker_id:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            try:
                storage.set_trial_user_attr(trial_id, "error", "its worker process died")
                storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
            except Exception:   # the heartbeat (or another launcher) failed it first
                pass
