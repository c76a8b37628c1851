"""TuneResult: what a study found, from its storage: baseline, best, next best, Pareto front, the CARM
pruning it did, the layers that moved roof, a predicted clock recommendation; as rich text, JSON, plots.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carm_advisor.files import write_text_atomic
from carm_advisor.report.render import recurrent_caution
from carm_advisor.report.render import recurrent_layers as named_steps
from carm_advisor.trials.predicted import VALUE_CALIBRATED, layer_changes, predict_at_sm_clock, value_prediction
from carm_advisor.trials.space import (
    DEFAULT_MODEL_EXPR,
    SearchSpace,
    TrialConfig,
    application_expression,
    keras_default_config,
)
from carm_advisor.tune.breakdown import reference_gap, time_by_class
from carm_advisor.tune.objective import carm_prune_reason
from carm_advisor.tune.objectives import OBJECTIVES, Objective
from carm_advisor.tune.plots import plot_study
from carm_advisor.tune.records import TOP1_CAVEAT, TrialRecord, record_of, throughput, value_of
from carm_advisor.tune.render import render
from carm_advisor.units import named_list

SCHEMA = "carm-advisor/tune/1"
# A multi-objective study's best: the member of Optuna's Pareto front (study.best_trials) best in the first
# objective; first-objective values equal to TIE_DIGITS significant digits (as the summary shows them) tie, and
# the tie goes to the best in the next objective (then the one after; then the earliest trial).
TIE_DIGITS = 4
# SM clocks the predicted clock recommendation considers (an H200's range, in its 15 MHz steps).
PREDICTED_CLOCKS_MHZ = (1980.0, 1785.0, 1590.0, 1395.0, 1200.0, 1005.0)


@dataclass
class TuneResult:
    objectives: list[Objective]
    source: str                          # "measured", "predicted" or "fake": where every trial figure comes from
    trials: list[TrialRecord]
    baseline: TrialRecord | None
    best: TrialRecord | None
    next_best: list[TrialRecord]
    pareto: list[TrialRecord]
    counts: dict[str, int]
    blind_search: dict[str, Any]
    layer_changes: list[dict[str, Any]]
    clock_recommendation: dict[str, Any] | None
    space: SearchSpace
    storage_url: str
    study_name: str
    device: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    command: str = ""
    limits: dict[str, Any] = field(default_factory=dict)
    budget_stopped: bool = False
    value_policy: str | None = None      # predicted studies: how calibrated and bound values compete
    study: Any = field(default=None, repr=False)
    # predicted studies: the best against the Keras defaults (float32, channels_last, batch 32, uncompiled) of
    # each calibrated backend in the search, both calibrated (keras_default_gains)
    keras_defaults: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # several objectives: how `best` was picked from the Pareto front (best_rule); None with one objective
    best_rule: str | None = None
    # recurrent layers of the model (report.render.sequential_steps on the bound's rows): [{"layer", "steps"}]
    recurrent: list[dict[str, Any]] = field(default_factory=list)
    # the expression that builds the model in the best's Keras code (model_expression)
    model_expr: str = DEFAULT_MODEL_EXPR
    # predicted studies: where a backend's values come from when not from its own records ({backend: note})
    calibration_notes: dict[str, str] = field(default_factory=dict)
    # where the best's time per batch goes, class by class on the CARM (breakdown.time_by_class)
    best_breakdown: dict[str, Any] | None = None
    # the figure the best is held against (breakdown.reference_gap), None without one
    reference: dict[str, Any] | None = None

    def keras_code(self) -> str | None:
        """The Python lines that run the model in the best configuration (TrialConfig.keras_code), None without
        a best."""
        return self.best.keras_code(self.model_expr) if self.best is not None else None

    # --- figures -----------------------------------------------------------------------------

    def gain(self, objective: str | None = None) -> float | None:
        """best / baseline in the objective (>1 is better, whatever its direction)."""
        o = OBJECTIVES[objective] if objective else self.objectives[0]
        if not self._comparable():
            return None
        return o.gain(value_of(o, self.best), value_of(o, self.baseline))

    @property
    def slowdown(self) -> float | None:
        """Baseline throughput over the best's (>1: the best is slower)."""
        if not self._comparable():
            return None
        return throughput(self.baseline) / throughput(self.best)

    def _comparable(self) -> bool:
        """Baseline and best both have figures of the same kind (a CARM bound against a calibrated
        prediction is no gain: the bound is a best case)."""
        return bool(self.best and self.baseline and self.best.measurement and self.baseline.measurement
                    and (self.best.value_source or self.source) == (self.baseline.value_source or self.source))

    @property
    def gain_note(self) -> str | None:
        """Why there is no gain although a baseline and a best exist, else None."""
        if self.best and self.baseline and self.best.measurement and self.baseline.measurement and not self._comparable():
            return (f"no gain: the baseline's figure is a {self.baseline.value_source}, the best's a "
                    f"{self.best.value_source} prediction (not comparable)")
        return None

    @property
    def sequential_caveat(self) -> str | None:
        """What a PREDICTED gain of a model with recurrent layers leaves out ("ignoring the N sequential steps
        of ..."; said beside every gain), else None."""
        if self.source != "predicted" or not self.recurrent:
            return None
        steps = sum(r["steps"] for r in self.recurrent)
        return (f"ignoring the {steps} sequential steps of {named_list([r['layer'] for r in self.recurrent], 4)} "
                "(each waits for the one before)")

    def default_gain(self, backend: str, objective: str | None = None) -> float | None:
        """best / the Keras defaults on `backend` in the objective (>1 is better), both calibrated predictions;
        None where that backend's defaults have no calibrated value or the best is not calibrated."""
        o = OBJECTIVES[objective] if objective else self.objectives[0]
        for d in self.keras_defaults:
            if d["backend"] == backend:
                return d["gain"].get(o.name)
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "source": self.source, "objectives": [o.name for o in self.objectives],
            "study": {"name": self.study_name, "storage": self.storage_url}, "device": self.device,
            "space": self.space.to_dict(), "limits": self.limits,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "best": {**self.best.to_dict(), "code": self.keras_code()} if self.best else None,
            "best_rule": self.best_rule, "calibration_notes": self.calibration_notes,
            "gain": {o.name: self.gain(o.name) for o in OBJECTIVES.values()},
            "slowdown": self.slowdown, "gain_note": self.gain_note, "gain_caveat": (
                f"every gain is a prediction {self.sequential_caveat}" if self.sequential_caveat else None),
            "recurrent": self.recurrent,
            "gain_over_keras_default": self.keras_defaults, "warnings": self.warnings,
            "next_best": [t.to_dict() for t in self.next_best],
            "pareto": [t.to_dict() for t in self.pareto],
            "counts": self.counts, "blind_search": self.blind_search,
            "layer_changes": self.layer_changes, "clock_recommendation": self.clock_recommendation,
            "best_breakdown": self.best_breakdown, "reference": self.reference,
            "trials": [t.to_dict() for t in self.trials], "wall_s": self.wall_s, "command": self.command,
            "budget_stopped": self.budget_stopped, "value_policy": self.value_policy,
            "value_sources": self.value_sources(), "caveats": {"top1_agreement": TOP1_CAVEAT},
        }

    def value_sources(self) -> dict[str, int]:
        """How many evaluated (non-repeat COMPLETE) trials have each value source."""
        out: dict[str, int] = {}
        for t in self.trials:
            if t.state == "COMPLETE" and t.repeat_of is None:
                key = t.value_source or self.source
                out[key] = out.get(key, 0) + 1
        return out

    def to_json_text(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=_json_default, allow_nan=True) + "\n"

    def to_json(self, path: str | Path) -> None:
        write_text_atomic(path, self.to_json_text())

    def plot(self, directory: str | Path) -> list[Path]:
        return plot_study(self, Path(directory))

    def __rich_console__(self, console, options):
        yield from render(self)


def _json_default(obj):
    if isinstance(obj, float):
        return None
    return str(obj)


def optuna_front(study, distinct: dict[str, TrialRecord]) -> list[TrialRecord]:
    """Optuna's own Pareto front (study.best_trials: complete trials meeting every constraint that no other
    beats in every objective), as the first feasible record of each configuration on it (a repeat stands for
    the trial it repeats)."""
    out: dict[str, TrialRecord] = {}
    for t in study.best_trials:
        cfg = t.user_attrs.get("config")
        record = distinct.get(TrialConfig.from_dict(cfg).key) if cfg else None
        if record is not None and record.feasible and record.values:
            out.setdefault(record.config.key, record)
    return list(out.values())


def best_rule(objectives: list[Objective]) -> str:
    """How pick_best picks a multi-objective study's best, in words."""
    first, rest = objectives[0], objectives[1:]
    return (f"the Pareto front member best in {first.name}; {first.name} values equal to {TIE_DIGITS} significant "
            f"digits tie, and the best in {', then '.join(o.name for o in rest)} among them wins")


def _tie_value(v: float) -> str:
    return f"{v:.{TIE_DIGITS}g}"


def pick_best(objectives: list[Objective], front: list[TrialRecord]) -> TrialRecord | None:
    """The member of `front` best_rule names (None for an empty front)."""
    if not front:
        return None
    first = objectives[0]
    top = front[first.select([r.values[0] for r in front])].values[0]
    tied = [r for r in front if _tie_value(r.values[0]) == _tie_value(top)]

    def order(r: TrialRecord):
        signed = [-v if o.direction == "maximize" else v for o, v in zip(objectives, r.values)]
        return (*signed[1:], signed[0], r.number)

    return min(tied, key=order)


def recurrent_layers(rows) -> list[dict[str, Any]]:
    """[{"layer", "steps"}] of the rows of recurrent layers: those whose notes give a sequential step count
    (report.render.sequential_steps, as analyze marks them)."""
    return [{"layer": name, "steps": steps} for name, steps in named_steps(rows or [])]


def recurrent_warning(recurrent: list[dict[str, Any]]) -> str:
    """The one-line caution a predicted study of a model with recurrent layers carries (analyze's legend)."""
    return recurrent_caution([(r["layer"], r["steps"]) for r in recurrent])


def uncosted_warning(rows) -> list[str]:
    """The one line a predicted study carries when some layers have no cost model (analyze says the same): their
    time and energy are in no predicted value, so each is a lower bound."""
    unknown = [r for r in rows or [] if not getattr(r, "known", True)]
    if not unknown:
        return []
    named = named_list([f"{r.name} ({r.type})" for r in unknown], 4)
    return [f"{len(unknown)} layer(s) have no cost model and are left out of every predicted value, so each is a "
            f"lower bound: {named}"]


def build_result(study, objectives: list[Objective], space: SearchSpace, predictor, baseline_cfg: TrialConfig, *,
                 source: str, storage_url: str, wall_s: float, device: dict, command: str, prune_margin: float,
                 max_slowdown, max_output_error, budget_stopped: bool = False,
                 reference: tuple[str, float] | None = None) -> TuneResult:
    records = [record_of(t) for t in study.get_trials(deepcopy=False)]
    distinct: dict[str, TrialRecord] = {}
    for r in records:
        if r.state == "COMPLETE" and r.config is not None and r.repeat_of is None:
            distinct.setdefault(r.config.key, r)
    measured = list(distinct.values())
    baseline = distinct.get(baseline_cfg.key)
    primary = objectives[0]
    feasible = [r for r in measured if r.feasible]
    ranked = sorted(feasible, key=lambda r: r.values[0], reverse=primary.direction == "maximize")
    if len(objectives) > 1:   # the best is on Optuna's front, picked by best_rule
        pareto = optuna_front(study, distinct)
        best = pick_best(objectives, pareto)
    else:
        best = ranked[0] if ranked else None
        pareto = [best] if best else []
    pareto.sort(key=lambda r: r.values[0], reverse=primary.direction == "maximize")
    counts = {
        "trials": len(records),
        "complete": sum(r.state == "COMPLETE" for r in records),
        # distinct configurations evaluated, under what they are: "measured" (0 where nothing ran), and in a
        # predicted (or fake) study "predicted" ("fake") too
        "measured": len(measured) if source == "measured" else 0,
        **({source: len(measured)} if source != "measured" else {}),
        "repeats_reused": sum(r.state == "COMPLETE" and r.repeat_of is not None for r in records),
        "pruned_by_carm": sum(r.pruned_reason == "carm_bound" for r in records),
        "pruned_out_of_memory": sum(r.pruned_reason == "out_of_memory" for r in records),
        "failed": sum(r.state == "FAIL" for r in records),
        "infeasible": sum(r.state == "COMPLETE" and not r.feasible and r.repeat_of is None for r in records),
        # calibrated predicted studies: configurations with only a CARM bound, not ranked against calibrated
        # values (their 'uncalibrated' constraint; a bound rejected by a limit alone is not counted here)
        "uncalibrated_not_ranked": sum(r.state == "COMPLETE" and r.repeat_of is None and r.uncalibrated
                                       for r in records),
        "running_or_waiting": sum(r.state in ("RUNNING", "WAITING") for r in records),
    }
    # How much a blind search of the whole space (clocks aside) would measure that the bound rules out.
    grid = space.grid()
    best_values = [[*r.values] for r in feasible]
    ruled_out = sum(1 for c in grid if c.key != baseline_cfg.key and carm_prune_reason(
        objectives, [o.value(predictor.predict(c)) for o in objectives], best_values, prune_margin))
    blind = {"grid_size": len(grid), "ruled_out_by_carm_bound": ruled_out,
             "note": "configurations of the whole space (clocks aside) whose CARM bound cannot beat the best found"}
    changes = []
    if best is not None and best.config is not None:
        changes = layer_changes(predictor.predict(baseline_cfg), predictor.predict(best.config))
    clock = None
    if best is not None and best.config.sm_clock_mhz is None and predictor.predict(best.config).rows:
        clock = _clock_recommendation(best, predictor, primary)
    defaults = keras_default_gains(best, space, predictor) if source == "predicted" else []
    breakdown = best_time_by_class(best, predictor, source) if best is not None and best.config is not None else None
    gap = reference_gap(best.values[0] if best is not None else None, reference, primary) if reference else None
    warnings = list(study.user_attrs.get("space_notes") or [])   # what a model file left out of the space
    warnings += batch_range_warnings(records, predictor) if source == "predicted" else []
    baseline_rows = predictor.predict(baseline_cfg).rows
    recurrent = recurrent_layers(baseline_rows)
    if recurrent and source == "predicted":   # measured times include the steps' dependence
        warnings.append(recurrent_warning(recurrent))
    if source == "predicted":   # measured times include every layer
        warnings += uncosted_warning(baseline_rows)
    return TuneResult(
        objectives=objectives, source=source, trials=records, baseline=baseline, best=best,
        next_best=[r for r in ranked if r is not best][:3], pareto=pareto, counts=counts, blind_search=blind,
        layer_changes=changes, clock_recommendation=clock,
        space=space, storage_url=storage_url, study_name=study.study_name, device=device, wall_s=wall_s,
        command=command, limits={"max_slowdown": max_slowdown, "max_output_error": max_output_error,
                                 "prune_margin": prune_margin},
        budget_stopped=budget_stopped, value_policy=study.user_attrs.get("value_policy"), study=study,
        keras_defaults=defaults, warnings=warnings, best_rule=best_rule(objectives) if len(objectives) > 1 else None,
        recurrent=recurrent, model_expr=model_expression(getattr(predictor, "spec", None)),
        calibration_notes=calibration_notes(space, predictor) if source == "predicted" else {},
        best_breakdown=breakdown, reference=gap,
    )


def best_time_by_class(best: TrialRecord, predictor, source: str) -> dict[str, Any] | None:
    """breakdown.time_by_class of the best configuration's predicted rows, against its whole batch's time as
    measured (a measured trial) or predicted (calibrated where the calibration gives it, else the bound)."""
    prediction = predictor.predict(best.config)
    measured_s = (best.measurement or {}).get("time_s") if source == "measured" else None
    if measured_s:
        whole, said = measured_s, "measured"
    elif prediction.calibrated_time_s:
        whole, said = prediction.calibrated_time_s, "calibrated prediction"
    else:
        whole, said = prediction.time_s, "CARM bound"
    return time_by_class(prediction.rows, whole, said)


def model_expression(spec) -> str:
    """The expression that builds the studied model in its Keras code: a keras.applications model's constructor
    (keras.applications.VGG16()); DEFAULT_MODEL_EXPR for a builder, a file or a built model, whose code the user
    has (a file keeps the dtype policies it was saved with: the tuner rebuilds it from its config)."""
    if getattr(spec, "kind", None) != "application":
        return DEFAULT_MODEL_EXPR
    return application_expression(spec.spec)


def calibration_notes(space: SearchSpace, predictor) -> dict[str, str]:
    """{backend: where its calibrated values come from} for the backends of the search whose calibration stands in
    from another backend's records (ConfigPredictor.calibration_note)."""
    note = getattr(predictor, "calibration_note", None)
    if note is None:
        return {}
    return {b: text for b in space.backends if (text := note(b))}


def keras_default_gains(best: TrialRecord | None, space: SearchSpace, predictor) -> list[dict[str, Any]]:
    """A predicted study's best against the Keras defaults (float32, channels_last, batch 32, compiled as
    model.predict compiles on a GPU: torch eager, jax XLA, tensorflow XLA: space.keras_default_config) on each
    backend of the search whose defaults have a calibrated value, gain as TuneResult.gain: best / defaults per
    objective (>1 better), None where the best's value is not calibrated too (a CARM bound against a calibrated
    value is no gain)."""
    calibrates = getattr(predictor, "calibrates", None)
    if calibrates is None:
        return []
    comparable = bool(best is not None and best.measurement and best.value_source == VALUE_CALIBRATED)
    out = []
    for backend in space.backends:
        cfg = keras_default_config(backend)
        if not calibrates(backend, cfg.compiler):
            continue
        check = getattr(predictor, "does_not_fit", None)
        if check is not None and check(cfg):   # defaults that cannot run are no reference
            continue
        p = value_prediction(predictor, cfg)
        if p.value_source != VALUE_CALIBRATED:
            continue
        values = {name: o.value(p) for name, o in OBJECTIVES.items()}
        gain = {name: (o.gain(value_of(o, best), values[name]) if comparable else None) for name, o in OBJECTIVES.items()}
        out.append({"backend": backend, "config": cfg.to_dict(), "key": cfg.key, "value_source": p.value_source,
                    "values": values, "gain": gain, "best": best.config.key if best and best.config else None})
    return out


def batch_range_warnings(records: list[TrialRecord], predictor) -> list[str]:
    """One warning naming the calibrated trials whose batch size lies outside the batch sizes of the whole-model
    records their calibrated value was fitted on (an extrapolation); none where the calibration notes none."""
    ranges = getattr(predictor, "calibrated_batch_range", None)
    if ranges is None:
        return []
    outside: dict[tuple, set[int]] = {}
    for r in records:
        if r.state != "COMPLETE" or r.repeat_of is not None or r.config is None or r.value_source != "calibrated":
            continue
        rng = ranges(r.config.backend, r.config.compiler)
        if rng and not rng[0] <= r.config.batch_size <= rng[1]:
            outside.setdefault((r.config.backend, r.config.compiler, rng), set()).add(r.config.batch_size)
    if not outside:
        return []
    parts = [f"{b} {c} at batch {', '.join(str(x) for x in sorted(sizes))} (records: batch {lo}-{hi})"
             for (b, c, (lo, hi)), sizes in sorted(outside.items())]
    return ["calibrated values outside the batch sizes the calibration was fitted on are extrapolations: "
            + "; ".join(parts)]


def _clock_recommendation(best: TrialRecord, predictor, objective: Objective) -> dict[str, Any] | None:
    """PREDICTED: the best configuration's objective at a few locked SM clocks (carm/dvfs.py through
    predicted.predict_at_sm_clock), against the GPU's own clock management (its maximum clock)."""
    base = predictor.predict(best.config)
    rows = []
    source = None
    for mhz in PREDICTED_CLOCKS_MHZ:
        try:
            p = predict_at_sm_clock(base, predictor.profile, mhz)
        except Exception:  # noqa: BLE001 - no power model or no DVFS reference: no clock advice
            return None
        source = p.source
        rows.append({"sm_clock_mhz": mhz, "value": objective.value(p), "time_s": p.time_s, "energy_j": p.energy_j})
    pick = rows[objective.select([r["value"] for r in rows])]
    default = rows[0]["value"]
    return {"objective": objective.name, "source": source, "at_default_clock": default, "clocks": rows,
            "recommended_sm_clock_mhz": pick["sm_clock_mhz"],
            "predicted_gain": objective.gain(pick["value"], default) if default else math.nan}
