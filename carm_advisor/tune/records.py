"""One trial of a study as the result reads it from storage (TrialRecord), and the figures shown of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna

from carm_advisor.trials.runner import Measurement
from carm_advisor.trials.space import DEFAULT_MODEL_EXPR, TrialConfig
from carm_advisor.tune.objectives import Objective

# What the top-1 agreement figure is (and is not): said wherever it is shown.
TOP1_CAVEAT = ("top-1 agreement is measured on random weights and random inputs over a few samples "
               "(worker accuracy_samples, 8 by default): it shows whether the precision flips arg-max "
               "decisions of this network, not the accuracy of a trained model")


@dataclass
class TrialRecord:
    number: int
    state: str
    config: TrialConfig | None
    values: list[float] | None
    measurement: dict[str, Any] | None
    bound: dict[str, Any] | None
    feasible: bool
    pruned_reason: str | None = None
    pruned_detail: str | None = None
    error: str | None = None
    repeat_of: int | None = None
    role: str | None = None
    gpu: dict[str, Any] | None = None              # the GPU whose worker ran the trial (index, uuid, name, host)
    gain_over_gpu_baseline: list[float | None] | None = None   # objective / that GPU's baseline (> 1 better)
    value_source: str | None = None     # measured | calibrated | CARM bound | fake: what `values` are
    uncalibrated: bool = False          # its constraint 'uncalibrated' is > 0: a bound not ranked against calibrated values

    def keras_code(self, model_expr: str = DEFAULT_MODEL_EXPR) -> str | None:
        """The Python lines that run the model in this trial's configuration (TrialConfig.keras_code; `model_expr`
        builds the model); None for a trial with no configuration."""
        return self.config.keras_code(model_expr) if self.config is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "state": self.state, "config": self.config.to_dict() if self.config else None,
                "key": self.config.key if self.config else None, "values": self.values,
                "measurement": self.measurement, "bound": self.bound, "feasible": self.feasible,
                "pruned_reason": self.pruned_reason, "pruned_detail": self.pruned_detail, "error": self.error,
                "repeat_of": self.repeat_of, "role": self.role, "gpu": self.gpu,
                "gain_over_gpu_baseline": self.gain_over_gpu_baseline, "value_source": self.value_source}


def value_of(o: Objective, t: TrialRecord) -> float:
    return o.value(Measurement.from_dict(t.measurement))


def throughput(t: TrialRecord) -> float:
    return t.measurement["batch_size"] / t.measurement["time_s"]


def record_of(t: optuna.trial.FrozenTrial) -> TrialRecord:
    cfg = t.user_attrs.get("config")
    constraints = t.user_attrs.get("constraints", [0.0])
    return TrialRecord(
        number=t.number, state=t.state.name, config=TrialConfig.from_dict(cfg) if cfg else None,
        values=list(t.values) if t.values is not None else None, measurement=t.user_attrs.get("measurement"),
        bound=t.user_attrs.get("bound"), feasible=t.state == optuna.trial.TrialState.COMPLETE and all(c <= 0 for c in constraints),
        pruned_reason=t.user_attrs.get("pruned_reason"), pruned_detail=t.user_attrs.get("pruned_detail"),
        error=t.user_attrs.get("error"), repeat_of=t.user_attrs.get("repeat_of"), role=t.user_attrs.get("role"),
        gpu=t.user_attrs.get("measured_on") or t.user_attrs.get("gpu"),
        gain_over_gpu_baseline=t.user_attrs.get("gain_over_gpu_baseline"),
        value_source=t.user_attrs.get("value_source") or (t.user_attrs.get("measurement") or {}).get("source"),
        uncalibrated=len(constraints) > 2 and constraints[2] > 0,
    )
