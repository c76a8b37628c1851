"""TuneOptions: everything tune() takes besides the model, in one frozen, checked value.

    from carm_advisor.tune.options import TuneOptions
    options = TuneOptions(objective="samples_per_joule", n_trials=50, backends=("torch",))
    result = advisor.tune("vgg16", options)
    wider = options.replace(batch_sizes=(32, 64, 128, 256, 512))

tune(model, **overrides) takes the same fields as keywords (`advisor.tune("vgg16", n_trials=30)`); an unknown
name is a TypeError naming the valid ones. Values are checked when an options object is made (ValueError,
"Expected ..., Received: ..."); what depends on this machine (a GPU, an installed backend, a storage that can
be written) is checked by tune() itself.

A study's worker processes (tune/parallel.py) rebuild their part of the options from the study's "run" user
attributes: `run_attributes` writes them, `TuneOptions.from_run` reads them back.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.trials.runner import WorkerSettings
from carm_advisor.trials.space import BACKENDS, SearchSpace, TrialConfig
from carm_advisor.tune.breakdown import parse_reference
from carm_advisor.tune.objective import PRUNE_MARGIN
from carm_advisor.tune.objectives import OBJECTIVES
from carm_advisor.tune.storage import HEARTBEAT_S

MODES = ("inference", "training")
# Optuna's RDB storages hold a study name in a VARCHAR(512) column (optuna.storages._rdb.models).
MAX_STUDY_NAME_CHARS = 512


@dataclass(frozen=True)
class TuneOptions:
    """What to search, how, and what to report; every field has a default (Keras defaults as the baseline, 30
    trials, energy efficiency). Units are in the names: _s seconds, _mhz MHz.

    What is optimised
      objective: one name of tune.objectives.OBJECTIVES ("gflops_per_watt", "samples_per_joule", "throughput",
        "latency", "edp", ...) or a sequence of two or more (a multi-objective study).
      pareto: a multi-objective study of energy efficiency and throughput (or of `objective` and throughput).
      mode: "inference" or "training" (training is measured only: the CARM predictor maps forward passes).
      max_slowdown: a configuration slower than the baseline by more than this factor (> 0) is infeasible.
      max_output_error: a configuration whose max |y - y_ref| / max |y_ref| against float32 (TF32 off) exceeds
        this (> 0) is infeasible.

    The search space
      space: a whole SearchSpace (then backends / batch_sizes are not used); None: the default space of the
        installed backends (of the named ones in a predicted study).
      backends: Keras backends to search ("torch", "jax", "tensorflow"); None: those installed here.
      batch_sizes: batch sizes to search (samples per call, each >= 1); None: 32, 64, 128, 256.
      baseline: the configuration gains are measured against; None: the Keras defaults on the current backend.
      apply_clocks: lock the SM clock per trial through NVML (a measured study on a GPU; needs root).
      sm_clocks_mhz: SM clocks to search with apply_clocks (MHz, each > 0); None: five from the GPU's range.

    The study
      n_trials: trials in the study in all, earlier runs' included (>= 1).
      storage: Optuna storage (sqlite:///x.db, a .db file, postgresql://..., journal:PATH); None: carm-tune-MODEL.db
        in the working directory. The same storage and study name resume a study.
      study_name: None: model, objectives, mode and source (e.g. vgg16-gflops_per_watt-inference-predicted).
      timeout_s: stop starting trials after this many seconds (Optuna's timeout; > 0).
      budget_s: stop while one more trial (as long as the longest recent one, +20%) still fits this many seconds.
      seed: the sampler's seed (None: Optuna draws one).
      heartbeat_s: seconds between an RDB storage's heartbeats while a trial runs (a killed process's trial is
        failed after 3 of them).

    Where the figures come from
      predict: "auto" measures on an NVIDIA GPU and predicts elsewhere; True predicts; False insists on a GPU.
      profile: a GPU profile (path or Profile) for the CARM bounds; None: this GPU's, else the recorded H200's.
      calibration: "auto" (a predicted study uses the shipped calibration), True, False / None, a path or a
        Calibration.
      input_shapes: the model's input shapes (mapping/input_shapes.py: batch-first shapes in order or {name: shape};
        a keras.Input keeps its dtype): an application's image size, a Functional model's inputs of unknown size
        (keras_hub's BERT), a subclassed model's call() arguments. Predicted and measured studies alike: the
        trials are predicted and measured on them, the study's fingerprint holds them and a joining worker reads
        them from the study's "run" attributes.

    How trials are ordered and pruned
      carm_order: after the baseline, each backend's configuration predicted best comes first.
      carm_pruning: a configuration whose CARM bound cannot beat the best so far is not run.
      prune_margin: how much better (a fraction, >= 0) the bound is made before that comparison.

    Running trials
      gpus: NVML indices of the GPUs to measure on at once (one worker process each); None: this process's GPU.
      worker_settings: how a measuring worker takes its windows (trials.runner.WorkerSettings).
      trial_timeout_s: a measured trial taking longer than this many seconds is failed (> 0).
      log_dir: where the workers' logs go; None: a temporary directory.
      runner, predictor, clock_gpu: replace the trial runner, the CARM predictor and the GPU whose clocks
        apply_clocks locks (tests, calibrated predictions).
      runner_factory: "package.module:function" giving a worker process its (predictor, runner) from the study's
        "run" attributes (replaces `runner` on several GPUs, since an object cannot cross into another process).

    Reporting
      progress: show a progress bar.
      log: a function given one line per finished trial (for runs without a terminal).
      command: the command line recorded in the result (None: this process's own).
    """

    # what is optimised
    objective: str | tuple[str, ...] = "gflops_per_watt"
    pareto: bool = False
    mode: str = "inference"
    max_slowdown: float | None = None
    max_output_error: float | None = None
    # a figure the best is held against, in the primary objective's unit: "NAME=VALUE" or (name, value)
    reference: Any = None
    # the search space
    space: SearchSpace | None = None
    backends: tuple[str, ...] | None = None
    batch_sizes: tuple[int, ...] | None = None
    baseline: TrialConfig | None = None
    apply_clocks: bool = False
    sm_clocks_mhz: tuple[float, ...] | None = None
    # the study
    n_trials: int = 30
    storage: str | None = None
    study_name: str | None = None
    timeout_s: float | None = None
    budget_s: float | None = None
    seed: int | None = 0
    heartbeat_s: float = HEARTBEAT_S
    # where the figures come from
    predict: bool | str = "auto"
    profile: Any = None
    calibration: Any = "auto"
    input_shapes: Any = None
    # how trials are ordered and pruned
    carm_order: bool = True
    carm_pruning: bool = True
    prune_margin: float = PRUNE_MARGIN
    # running trials
    gpus: tuple[int, ...] | None = None
    worker_settings: WorkerSettings | None = None
    trial_timeout_s: float = 900.0
    log_dir: str | None = None
    runner: Any = field(default=None, repr=False)
    runner_factory: str | None = None
    predictor: Any = field(default=None, repr=False)
    clock_gpu: Any = field(default=None, repr=False)
    # reporting
    progress: bool = True
    log: Callable[[str], None] | None = field(default=None, repr=False)
    command: str | None = None

    def __post_init__(self) -> None:
        for name in ("backends", "batch_sizes", "sm_clocks_mhz", "gpus"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, _as_tuple(name, value))
        if not isinstance(self.objective, str) and self.objective is not None:
            object.__setattr__(self, "objective", _as_tuple("objective", self.objective))
        self._check_goal()
        self._check_space()
        self._check_study()
        self._check_running()

    # ---- checks, one group each -------------------------------------------------------------------

    def _check_goal(self) -> None:
        names = [self.objective] if isinstance(self.objective, str) else list(self.objective or ())
        if not names or any(not isinstance(n, str) or n not in OBJECTIVES for n in names):
            _refuse("objective", f"one or more names from {', '.join(OBJECTIVES)}", self.objective)
        if len(set(names)) != len(names):
            _refuse("objective", "names that differ", self.objective)
        _check_flag("pareto", self.pareto)
        if self.mode not in MODES:
            _refuse("mode", f"one of {', '.join(MODES)}", self.mode)
        for name in ("max_slowdown", "max_output_error"):
            _check_positive(name, getattr(self, name), optional=True)
        if self.reference is not None:
            text = self.reference if isinstance(self.reference, str) else "=".join(map(str, self.reference))
            object.__setattr__(self, "reference", parse_reference(text))   # ValueError in one line

    def _check_space(self) -> None:
        _check_type("space", self.space, SearchSpace)
        _check_type("baseline", self.baseline, TrialConfig)
        if self.backends is not None and (not self.backends or any(b not in BACKENDS for b in self.backends)):
            _refuse("backends", f"names from {', '.join(BACKENDS)}", self.backends)
        if self.batch_sizes is not None and (not self.batch_sizes or not all(_is_int(b) and b >= 1
                                                                           for b in self.batch_sizes)):
            _refuse("batch_sizes", "integers >= 1", self.batch_sizes)
        _check_flag("apply_clocks", self.apply_clocks)
        if self.sm_clocks_mhz is not None:
            for clock in self.sm_clocks_mhz:
                _check_positive("sm_clocks_mhz", clock, whole=self.sm_clocks_mhz)

    def _check_study(self) -> None:
        if not _is_int(self.n_trials) or self.n_trials < 1:
            _refuse("n_trials", "an integer >= 1", self.n_trials)
        if self.storage is not None and not isinstance(self.storage, (str, os.PathLike)):
            _refuse("storage", "a URL or a file path", self.storage)
        if self.study_name is not None:
            check_study_name(self.study_name)
        for name in ("timeout_s", "budget_s"):
            _check_positive(name, getattr(self, name), optional=True)
        if self.seed is not None and not _is_int(self.seed):
            _refuse("seed", "an integer or None", self.seed)
        _check_positive("heartbeat_s", self.heartbeat_s)

    def _check_running(self) -> None:
        if not (self.predict == "auto" or isinstance(self.predict, bool)):
            _refuse("predict", "'auto', True or False", self.predict)
        for name in ("carm_order", "carm_pruning", "progress"):
            _check_flag(name, getattr(self, name))
        if not (isinstance(self.prune_margin, (int, float)) and not isinstance(self.prune_margin, bool)
                and math.isfinite(self.prune_margin) and self.prune_margin >= 0):
            _refuse("prune_margin", "a fraction >= 0", self.prune_margin)
        if self.gpus is not None and (not self.gpus or not all(_is_int(g) and g >= 0 for g in self.gpus)
                                      or len(set(self.gpus)) != len(self.gpus)):
            _refuse("gpus", "distinct NVML indices >= 0 like (0, 1)", self.gpus)
        _check_type("worker_settings", self.worker_settings, WorkerSettings)
        _check_positive("trial_timeout_s", self.trial_timeout_s)
        if self.runner_factory is not None and not (isinstance(self.runner_factory, str)
                                                    and all(self.runner_factory.partition(":")[::2])):
            _refuse("runner_factory", "'package.module:function'", self.runner_factory)
        if self.log is not None and not callable(self.log):
            _refuse("log", "a function taking one line, or None", self.log)

    # ---- deriving ---------------------------------------------------------------------------------

    def replace(self, **changes: Any) -> TuneOptions:
        """A copy with `changes` (field names as keywords), checked as a new TuneOptions is."""
        unknown = [name for name in changes if name not in FIELD_NAMES]
        if unknown:
            raise TypeError(unknown_option_message(unknown[0]))
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def objectives(self) -> tuple[str, ...]:
        """The objective names in order (one for a single-objective study)."""
        return (self.objective,) if isinstance(self.objective, str) else tuple(self.objective)

    # ---- a study's worker processes --------------------------------------------------------------

    @classmethod
    def from_run(cls, run: dict[str, Any]) -> TuneOptions:
        """The options a worker process joining a study runs by, read from the study's "run" user attributes
        (run_attributes wrote them)."""
        settings = run.get("worker_settings")
        return cls(mode=run.get("mode", "inference"), carm_pruning=run.get("carm_pruning", True),
                   prune_margin=run.get("prune_margin", PRUNE_MARGIN), max_slowdown=run.get("max_slowdown"),
                   max_output_error=run.get("max_output_error"), profile=run.get("profile"),
                   seed=run.get("seed", 0), heartbeat_s=run.get("heartbeat_s", HEARTBEAT_S),
                   worker_settings=WorkerSettings(**settings) if settings else None,
                   trial_timeout_s=run.get("trial_timeout_s", 900.0), runner_factory=run.get("runner_factory"))


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TuneOptions))


def run_attributes(options: TuneOptions, *, model: str, trial_target: int, calibration: Any,
                   fake_delay_s: float | None, input_shapes: str | None = None) -> dict[str, Any]:
    """The study's "run" user attribute: what a worker joining by storage URL and study name rebuilds the run
    from (TuneOptions.from_run), with the model as a worker loads it (a name, a file, "module:function"), the
    study's trial target, the calibration as a worker loads it (calibration_ref), a fake runner's delay and the
    model's input shapes (mapping.input_shapes.shapes_json text, None where none were given)."""
    return {
        "model": model, "mode": options.mode, "trial_target": trial_target, "carm_pruning": options.carm_pruning,
        "prune_margin": options.prune_margin, "max_slowdown": options.max_slowdown,
        "max_output_error": options.max_output_error,
        "profile": options.profile if isinstance(options.profile, str) else None, "seed": options.seed,
        "heartbeat_s": options.heartbeat_s,
        "worker_settings": dataclasses.asdict(dataclasses.replace(options.worker_settings or WorkerSettings(),
                                                                  mode=options.mode)),
        "trial_timeout_s": options.trial_timeout_s, "runner_factory": options.runner_factory,
        "calibration": calibration, "fake_delay_s": fake_delay_s, "input_shapes": input_shapes}


def unknown_option_message(name: str) -> str:
    close = difflib.get_close_matches(name, FIELD_NAMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown tune option {name!r}{hint}; valid options: {', '.join(FIELD_NAMES)}"


def check_study_name(name: Any) -> str:
    """A study name Optuna can store and a terminal can print on one line; ValueError otherwise."""
    if not isinstance(name, str) or not name.strip():
        _refuse("study_name", "text that is not empty", name)
    if any(not ch.isprintable() for ch in name):
        _refuse("study_name", "text without control characters (newlines, tabs)", name)
    if len(name) > MAX_STUDY_NAME_CHARS:
        _refuse("study_name", f"at most {MAX_STUDY_NAME_CHARS} characters long",
                f"{name[:40]}... ({len(name)} characters)")
    return name


def _as_tuple(name: str, value: Any) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        _refuse(name, "a sequence", value)
    return tuple(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse(name: str, expected: str, received: Any):
    raise ValueError(f"Expected {name} to be {expected}, Received: {name}={received!r}")


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        _refuse(name, "True or False", value)


def _check_type(name: str, value: Any, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        _refuse(name, f"a {kind.__name__} or None", value)


def _check_positive(name: str, value: Any, optional: bool = False, whole: Any = None) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        _refuse(name, "a finite number > 0" + (" or None" if optional else ""), value if whole is None else whole)
