"""The Optuna side of a study: the objective function that evaluates one trial (reused figures, the CARM bound's
pruning, the measurement, the constraints), the study's state read from storage, the sampler, and the callbacks
that report progress, log trials and stop at a time budget."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import time
import warnings
from typing import Any

import optuna

from carm_advisor.trials.predicted import ConfigPredictor
from carm_advisor.trials.runner import Measurement, TrialFailed, TrialOutOfMemory
from carm_advisor.trials.space import SearchSpace
from carm_advisor.tune.clocks import clock_lock
from carm_advisor.tune.objectives import Objective
from carm_advisor.tune.storage import HEARTBEAT_S

PRUNE_MARGIN = 0.10   # the bound's energy comes from a fitted power model: keep 10% benefit of the doubt


FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


# Trials counted against a study's target: every one a worker has taken (enqueued WAITING ones are not yet).
STARTED = FINISHED + (optuna.trial.TrialState.FAIL, optuna.trial.TrialState.RUNNING)


class StudyState:
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
        self.space_exhausted = False   # every configuration of the space has a finished trial (space_callback)
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


def sampler_for(objectives: list[Objective], constraints_func, seed: int | None):
    # TPE's constant liar (Optuna's default) counts trials still running in other workers as bad, so
    # workers sharing a study spread out instead of all proposing the same configuration.
    if len(objectives) == 1:
        return optuna.samplers.TPESampler(seed=seed, constraints_func=constraints_func, n_startup_trials=6)
    return optuna.samplers.NSGAIISampler(seed=seed, constraints_func=constraints_func, population_size=10)


def make_objective(state: StudyState, space: SearchSpace, predictor: ConfigPredictor, runner, carm_pruning: bool,
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
        # first: a process killed before the trial's first heartbeat is still found dead (fail_stale)
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
            set_constraints(trial, earlier.user_attrs.get("constraints"))
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
            reason = carm_prune_reason(objectives, bound_values, state.feasible_values(complete), margin)
            if reason:
                trial.set_user_attr("pruned_reason", "carm_bound")
                trial.set_user_attr("pruned_detail", reason)
                raise optuna.TrialPruned(reason)
        try:
            with clock_lock(gpu, config.sm_clock_mhz):
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
        constraints = constraints_of(m, state, complete)
        trial.set_user_attr("constraints", constraints)
        set_constraints(trial, constraints)
        return values if len(objectives) > 1 else values[0]

    return objective


def _wait_for_same_config(state: StudyState, trial: optuna.Trial, key: str, poll_s: float = 0.2) -> list:
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
        fail_stale(state.study)
    if marked:
        trial.set_user_attr("waiting_for_config", False)
    return state.complete()


HAS_SET_CONSTRAINT = hasattr(optuna.Trial, "set_constraint")


CONSTRAINT_NAMES = ("output_error", "slowdown", "uncalibrated")


VALUE_POLICY_CALIBRATED = ("calibrated predictions are the trial values; a configuration the calibration does not "
                           "cover keeps its CARM bound (optimistic) and is not ranked (constraint 'uncalibrated')")


VALUE_POLICY_BOUND = "CARM bounds are the trial values (no calibration applies): every figure is a best case"


def constraints_func_for(constrained: bool, calibrated: bool):
    """The sampler's constraints_func where Optuna has no trial.set_constraint (4.x), else None. A trial
    without constraints of its own (pruned) counts as feasible: as many zeros as constraints_of gives."""
    if HAS_SET_CONSTRAINT or not (constrained or calibrated):
        return None
    zeros = [0.0] * (3 if calibrated else 2)
    return lambda t: t.user_attrs.get("constraints", zeros)


def set_constraints(trial, constraints: list[float] | None) -> None:
    if HAS_SET_CONSTRAINT and constraints:
        for name, value in zip(CONSTRAINT_NAMES, constraints):
            trial.set_constraint(name, value)


def constraints_of(m: Measurement, state: StudyState, complete: list) -> list[float]:
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


def carm_prune_reason(objectives: list[Objective], bound_values: list[float], measured: list[list[float]],
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


def finished_count(study) -> int:
    """COMPLETE and PRUNED trials, and trials that failed with an error of theirs (not stale RUNNING ones)."""
    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in FINISHED or (t.state == optuna.trial.TrialState.FAIL and "error" in t.user_attrs):
            n += 1
    return n


def fail_stale(study) -> None:
    """Trials left RUNNING by a killed process -> FAIL: by their stale heartbeat (RDB storages), and, for a
    trial whose process died before its first heartbeat (Optuna fails only trials that have one; seen in CI
    after a SIGKILL right after a trial was created), by its recorded process: this host and a pid no longer
    alive, or no "process" user attr at all after the heartbeat grace period (a live trial writes it first,
    within milliseconds of its creation)."""
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


def log_callback(log, state: StudyState):
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


def evaluated_keys(study) -> set[str]:
    """The configuration keys with a finished trial: complete, pruned, or failed with an error of its own."""
    return {t.user_attrs.get("config_key") for t in study.get_trials(deepcopy=False)
            if t.state in FINISHED or (t.state == optuna.trial.TrialState.FAIL and "error" in t.user_attrs)} - {None}


def space_callback(keys: set[str], state: StudyState):
    """Stop the study once every key of `keys` (the space's configurations) has a finished trial: for a predicted
    study, whose values are the same every time, another trial can only repeat one."""
    def callback(study, trial) -> None:
        if evaluated_keys(study) >= keys:
            state.space_exhausted = True
            study.stop()

    return callback


def budget_callback(deadline_s: float | None, state: StudyState):
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
def progress_bar(enabled: bool, total: int, state: StudyState):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    o = state.objectives[0]
    bar = Progress(TextColumn("[bold]tuning[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), disable=not enabled, transient=False)
    with bar:
        task = bar.add_task("", total=total, completed=finished_count(state.study))

        def callback(study, trial) -> None:
            if not enabled:
                return
            feasible = state.feasible_values()
            text = ""
            if feasible:
                best = feasible[o.select([v[0] for v in feasible])][0]
                text = f"best {o.name} {best:.4g} {o.unit}"
            bar.update(task, completed=finished_count(study), description=text)

        yield callback


def quiet_optuna():
    """Optuna logs every trial (and failures with tracebacks) and flags heartbeats as experimental; our
    progress bar and result say what matters once."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    catcher = warnings.catch_warnings()
    catcher.__enter__()
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

    def restore() -> None:
        catcher.__exit__(None, None, None)
        optuna.logging.set_verbosity(previous)

    return restore
