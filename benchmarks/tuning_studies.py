"""Whole-model calibration samples from measured tuning studies (Optuna SQLite files written by `carm-advise tune`
on a GPU): every measured trial is a whole-model record of its configuration, with no layer measured."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import optuna

from carm_advisor.calibration import MATMUL_CLASSES, WholeSample, bound_sums, bounded_rows, kernel_calls, rows_dtype
from carm_advisor.errors import ProfileError
from carm_advisor.models.builder import model_spec
from carm_advisor.trials.predicted import ConfigPredictor
from carm_advisor.trials.space import TrialConfig
from carm_advisor.tune.storage import open_storage

# A tuning trial's compiler -> the whole-model execution it measured.
STUDY_EXECUTION = {("torch", "eager"): "eager", ("torch", "torch.compile"): "torch.compile", ("jax", "xla"): "jit"}


def study_trials(path: str | Path) -> list[dict]:
    """The measured inference trials of every study in an Optuna SQLite file: the first COMPLETE, not repeated
    (no "repeat_of"), measured trial per study and configuration, as {"model", "config", "measurement",
    "source"} (user_attrs written by tune/: config, measurement; the study's "run" attribute names the model)."""
    path = Path(path)
    if not path.is_file():
        raise ProfileError(f"Expected an Optuna SQLite study file, Received: {path} (no such file)")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = open_storage(str(path), "calibration")
    out = []
    for summary in optuna.get_all_study_summaries(storage):
        run = summary.user_attrs.get("run") or {}
        if run.get("mode", "inference") != "inference" or not run.get("model"):
            continue
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        seen = set()
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            a = t.user_attrs
            m, cfg, key = a.get("measurement"), a.get("config"), a.get("config_key")
            if not m or not cfg or key is None or "repeat_of" in a or key in seen:
                continue
            if (m.get("source") or "measured") != "measured" or not m.get("time_s"):
                continue
            seen.add(key)
            out.append({"model": run["model"], "config": cfg, "measurement": m, "key": key,
                        "source": f"study {path.name}#{t.number}"})
    return out


def whole_from_studies(paths: Iterable[str | Path], profile=None, builders: dict | None = None) -> list[WholeSample]:
    """Whole-model samples from measured tuning trials (study_trials), one per distinct configuration and
    measured time (the same trial copied into two files counts once): the execution of its compiler
    (STUDY_EXECUTION: torch eager -> "eager", torch.compile -> "torch.compile", jax xla -> "jit"), the CARM
    bounds of the model's rows as the tuner predicts them (tune/predicted.py, this profile). No layer was
    measured: the layer sums are 0 (the eager and cuda_graph fits skip such samples; jit and torch.compile
    use the bounds). `builders`: study model name -> what tune() was given (default: the name itself)."""
    predictors: dict[str, Any] = {}
    seen: set[tuple] = set()
    out: list[WholeSample] = []
    for path in paths:
        for trial in study_trials(path):
            cfg = TrialConfig.from_dict(trial["config"])
            execution = STUDY_EXECUTION.get((cfg.backend, cfg.compiler))
            m = trial["measurement"]
            if execution is None or cfg.sm_clock_mhz is not None or (trial["key"], m["time_s"]) in seen:
                continue   # a locked clock is another GPU speed than the records' default clocks
            seen.add((trial["key"], m["time_s"]))
            model = trial["model"]
            if model not in predictors:
                predictors[model] = ConfigPredictor(model_spec((builders or {}).get(model, model)), profile=profile, calibration=None)
            rows = predictors[model].predict(cfg).rows
            known = [r for r in rows if r.known]
            out.append(WholeSample(cfg.backend, execution, m["time_s"], 0.0, 0.0, len(known), model,
                                   sum(1 for r in known if r.type in MATMUL_CLASSES), None, rows_dtype(rows),
                                   *bound_sums(rows), cfg.batch_size, cfg.layout, trial["source"],
                                   kernel_calls(rows), len(bounded_rows(rows))))
    return out
