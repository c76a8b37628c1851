"""Every CARM prediction the tuner uses, in one adapter over carm_advisor.predict.Predictor (a
calibration, issue 10, plugs in here: `ConfigPredictor(..., calibration=...)`).

- `ConfigPredictor.predict(config)`: the CARM bound of a configuration: each layer's time from the
  roofs (stretched where the power limit forbids running that fast), its energy from the profile's
  power model; summed over the layers. No real run of that configuration can be faster; its energy
  is the power model's, so the pruning that compares it with measurements keeps a margin.
- `predict_at_sm_clock`: the same at a locked SM clock, PREDICTED by the profile's DVFS model
  (carm/dvfs.py).
- `layer_changes`: which layers change roof (or bound time) between two configurations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.tune.builder import ModelSpec, build
from carm_advisor.tune.space import TrialConfig

SOURCE_BOUND = "predicted (CARM bound)"
SOURCE_CLOCK = "predicted (CARM bound at a locked SM clock, the profile's DVFS model)"

# float32 math of each precision name, per backend (what the predictor's compute-path choice reads).
_FLOAT32_MATH = {"float32_tf32": {"conv": "tf32", "matmul": "tf32"},
                 "float32_no_tf32": {"conv": "fp32", "matmul": "fp32"}}


@dataclass
class Prediction:
    """Per-batch figures of one configuration from the CARM. Units: s, J, FLOP."""

    time_s: float
    energy_j: float | None
    flops: float
    batch_size: int
    source: str = SOURCE_BOUND
    rows: list = field(default_factory=list, repr=False)
    calibrated_time_s: float | None = None      # with a calibration: the expected figures beside the bound
    calibrated_energy_j: float | None = None

    @property
    def power_w(self) -> float | None:
        return self.energy_j / self.time_s if self.energy_j and self.time_s else None


def expected(p: Prediction) -> Prediction:
    """The calibrated figures where a calibration gave them (to rank configurations), else the bound."""
    if p.calibrated_time_s is None:
        return p
    return Prediction(p.calibrated_time_s, p.calibrated_energy_j, p.flops, p.batch_size,
                      "predicted (calibrated)", p.rows)


def math_mode_for(config: TrialConfig) -> dict[str, str]:
    from carm_advisor.predict import resolve_math_mode

    mode = dict(resolve_math_mode(config.backend))
    mode.update(_FLOAT32_MATH.get(config.precision, {}))
    return mode




class ConfigPredictor:
    """CARM bounds of configurations of one model on one profile; cached per distinct prediction."""

    def __init__(self, spec: ModelSpec, profile=None, model=None, calibration=None) -> None:
        from carm_advisor.profiles.profile import Profile, load_profile

        self.spec = spec
        self.calibration = calibration
        self.profile: Profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self._models: dict[str, Any] = {}
        if model is not None:
            self._models[_layout_key(spec, None)] = model
        self._cache: dict[tuple, Prediction] = {}

    def model(self, layout: str):
        """The model built in this layout (float32; the precision enters as the compute dtype)."""
        key = _layout_key(self.spec, layout)
        if key not in self._models:
            import keras

            # Variables on the CPU: the tuner's own process must not take GPU memory from the trials.
            with keras.device("cpu"):
                self._models[key] = build(self.spec, "float32", layout, seed=0)
        return self._models[key]

    def predict(self, config: TrialConfig) -> Prediction:
        mode = math_mode_for(config)
        key = (config.precision if config.compute_dtype != "float32" else "float32",
               mode.get("conv"), mode.get("matmul"), config.batch_size, _layout_key(self.spec, config.layout),
               config.backend if self.calibration is not None else None)
        if key not in self._cache:
            from carm_advisor.predict import Predictor

            predictor = Predictor(self.profile, mode, backend=config.backend, calibration=self.calibration)
            rows = predictor.rows(self.model(config.layout), batch_size=config.batch_size, dtype=config.compute_dtype)
            known = [r for r in rows if r.known and r.predicted_time_s is not None]
            energies = [r.predicted_energy_j for r in known]
            calibrated_t = [getattr(r, "calibrated_time_s", None) for r in known]
            calibrated_e = [getattr(r, "calibrated_energy_j", None) for r in known]
            self._cache[key] = Prediction(
                time_s=sum(r.predicted_time_s for r in known),
                energy_j=sum(energies) if energies and None not in energies else None,
                flops=float(sum(r.flops for r in rows if r.known)),
                batch_size=config.batch_size,
                rows=rows,
                calibrated_time_s=sum(calibrated_t) if known and None not in calibrated_t else None,
                calibrated_energy_j=sum(calibrated_e) if known and None not in calibrated_e else None,
            )
        return self._cache[key]

    def flops(self, config: TrialConfig) -> float:
        """Analytic FLOPs of one batch (1 multiply-add = 2 FLOPs)."""
        return self.predict(config).flops


def _layout_key(spec: ModelSpec, layout: str | None) -> str:
    return "own" if not spec.rebuilds_per_precision or spec.kind == "model" else str(layout)


def predict_at_sm_clock(prediction: Prediction, profile, sm_clock_mhz: float) -> Prediction:
    """PREDICTED figures of the same configuration asked to run at `sm_clock_mhz`, from the profile's
    DVFS model (carm/dvfs.py: roofs scale with the clock, energy per operation with the voltage curve,
    the power limit lowers the clock it sustains). Never measured: the source says so."""
    from carm_advisor.carm.dvfs import Work, predict_model_at_clock

    pm = profile.power_model
    works = [Work(r.flops, r.bytes, r.path, r.level) for r in prediction.rows
             if r.known and (r.flops or r.bytes) and r.predicted_time_s is not None]
    if pm is None or not works:
        raise ValueError("a clock prediction needs a profile with a power model and a mapped model")
    fallback = profile.device.get("sm_clock_max_mhz") or profile.device.get("max_sm_clock_mhz")
    p = predict_model_at_clock(profile.carm(), pm, works, sm_clock_mhz, reference_sm_clock_mhz=fallback)
    curve = pm.voltage.source if pm.voltage is not None else "none: energy per operation independent of the clock"
    return Prediction(p.time_s, p.energy_j, prediction.flops, prediction.batch_size,
                      f"{SOURCE_CLOCK} (voltage curve: {curve})", prediction.rows)


def layer_changes(before: Prediction, after: Prediction, limit: int = 8) -> list[dict[str, Any]]:
    """Layers whose roof changed between two configurations, or whose bound time moved most (CARM bound)."""
    old = {r.name: r for r in before.rows if r.known}
    out = []
    for r in after.rows:
        o = old.get(r.name)
        if o is None or not r.known or not (o.predicted_time_s and r.predicted_time_s):
            continue
        per_sample_old = o.predicted_time_s / before.batch_size
        per_sample_new = r.predicted_time_s / after.batch_size
        out.append({
            "layer": r.name, "type": r.type,
            "bound_before": o.bound, "bound_after": r.bound,
            "path_before": o.path, "path_after": r.path,
            "time_per_sample_before_s": per_sample_old, "time_per_sample_after_s": per_sample_new,
            "speedup": per_sample_old / per_sample_new if per_sample_new else math.nan,
            "source": SOURCE_BOUND,
        })
    changed = [c for c in out if c["bound_before"] != c["bound_after"] or c["path_before"] != c["path_after"]]
    rest = [c for c in out if c not in changed]
    rest.sort(key=lambda c: -abs(math.log(c["speedup"])) if c["speedup"] and c["speedup"] == c["speedup"] else 0)
    changed.sort(key=lambda c: -c["time_per_sample_before_s"])
    return (changed + rest)[:limit]
