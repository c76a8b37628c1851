"""The figures of an analysis, as plain data: one row per layer call, the advice, and what was analysed on which
GPU. Nothing here renders or measures; report/ renders these, advise/ computes them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class LayerRow:
    name: str
    type: str
    dtype: str
    flops: int                        # per batch
    bytes: int                        # per batch (analytic, compulsory traffic)
    ai: float | None                  # FLOP/byte; measured (counters) where available, else analytic
    ai_source: str                    # "analytic" | "counters"
    path: str                         # compute roof key
    level: str                        # memory slope key
    bound: str                        # "compute:<path>", "memory:<level>", "none", "unknown", "above-roof"
    attainable_flops_per_s: float | None
    predicted_time_s: float | None
    predicted_energy_j: float | None
    tensor_core: bool
    known: bool
    time_s: float | None = None       # measured
    energy_j: float | None = None     # measured
    power_w: float | None = None      # measured
    sm_clock_mhz: float | None = None  # measured
    time_spread: float | None = None
    measured: bool = False
    notes: str = ""
    channels: tuple[int, ...] = ()    # (input, output) channels of matmul-class layers; () where n/a
    analytic_ai: float | None = None  # FLOP/byte from the cost model, kept when counters replace `ai`
    predicted_bound: str = ""         # the analytic bound, kept when a measurement rebinds the layer
    input_bytes: int = 0              # activations read (bytes minus weights and outputs), per batch
    output_elements: int = 0          # elements the layer writes, per batch (its outputs' sizes): how far it fills the GPU
    layout_copy_s: float = 0.0        # CARM bound of the copies the backend makes around it for its data format
                                      # (calibration.layout_copy_passes: Keras' torch backend, channels_last), per batch
    layout_copy_calibrated_s: float | None = None   # the same copies as the calibration counts them
                                      # (predict.layout_copies_time_s; None: not calibrated)
    # A calibration's figures beside the CARM bound's (predicted_*); serialised only when one was applied.
    # (carm_advisor/calibration/: what this backend is expected to reach; JSON: bound_time_s is the bound.)
    calibrated_time_s: float | None = None
    calibrated_energy_j: float | None = None
    predicted_power_w: float | None = None  # board power at its CARM operating point (cap included), predicted
    energy_optimal_sm_clock_mhz: float | None = None  # predicted, where the profile has a voltage curve
    energy_optimal_gain: float | None = None  # predicted energy at the default clock / at the optimal one
    calibration: str = ""             # the calibration key and its sample count, "none", or "" (not asked)

    @property
    def achieved_flops_per_s(self) -> float | None:
        if self.time_s and self.flops:
            return self.flops / self.time_s
        return None

    @property
    def efficiency(self) -> float | None:
        a = self.achieved_flops_per_s
        if a is None or not self.attainable_flops_per_s:
            return None
        return a / self.attainable_flops_per_s

    @property
    def calibrated_power_w(self) -> float | None:
        """The layer's predicted board power at its calibrated time, inside the model (the duty power; benchmarks/
        power_model_validation.py validates it per layer against layers replayed alone, scaled there by the GPU's
        busy share of each replay, which a layer inside a model does not pay), None without a calibration."""
        if self.calibrated_energy_j and self.calibrated_time_s:
            return self.calibrated_energy_j / self.calibrated_time_s
        return None

    @property
    def effective_time_s(self) -> float | None:
        """Measured time where there is one, else the CARM's prediction."""
        return self.time_s if self.measured else self.predicted_time_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("calibrated_time_s", "calibrated_energy_j"):
            if d[key] is None:
                del d[key]
        if not d["layout_copy_s"]:
            del d["layout_copy_s"]
        if d["layout_copy_calibrated_s"] is None or d["layout_copy_calibrated_s"] == d.get("layout_copy_s"):
            del d["layout_copy_calibrated_s"]   # only where the calibration counts the copies apart from their bound
        d["achieved_flops_per_s"] = self.achieved_flops_per_s
        d["efficiency"] = self.efficiency
        d["bound_time_s"] = self.predicted_time_s
        d["bound_energy_j"] = self.predicted_energy_j
        return d

    @property
    def expected_time_s(self) -> float | None:
        """The calibrated prediction where there is one, else the CARM bound."""
        return self.calibrated_time_s if self.calibrated_time_s is not None else self.predicted_time_s


@dataclass
class Recommendation:
    title: str
    detail: str
    expected_gain: str                # human-readable, e.g. "1.8x faster, 1.6x less energy (predicted)"
    speedup: float | None = None      # predicted time ratio current/new
    energy_ratio: float | None = None  # predicted energy ratio current/new
    layers: list[str] = field(default_factory=list)
    basis: str = "CARM prediction"
    # A configuration change `--verify` can apply and measure: keys of trials/child.py's config
    # (precision, layout, batch_size, backend, compile); None for advice that is not a switch.
    change: dict[str, Any] | None = None
    verified: dict[str, Any] | None = None   # measured beside predicted gain (advise/verify.py)
    # The Python lines that run the model in the changed configuration (trials.space.TrialConfig.keras_code);
    # None for advice that is no configuration change Keras makes.
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def measured_gain(self) -> float | None:
        """The larger of the gains --verify measured (time, energy), None where it measured none."""
        return measured_gain(self.verified)


def measured_gain(verified: dict | None) -> float | None:
    """The larger of the gains in a --verify result (time, energy), None where it measured none."""
    v = verified or {}
    gains = [g for g in (v.get("measured_speedup"), v.get("measured_energy_ratio")) if g]
    return max(gains) if gains and not v.get("error") else None


@dataclass
class ModelInfo:
    """What was analysed: the model and the configuration it ran (or is predicted to run) in."""

    name: str
    batch_size: int
    precision: str                    # the Keras dtype policy name, or the precision asked for
    layout: str                       # "channels_last" | "channels_first"
    backend: str                      # the Keras backend
    math_mode: dict[str, str]         # what float32 ran as: {"conv": "tf32"|"fp32", "matmul": ..., "source": ...}
    params: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DeviceInfo:
    """The GPU the figures are for, and the profile whose roofs placed them."""

    name: str | None
    source: str                       # "measured" | "profile"
    profile: str                      # the profile's device name
    profile_source: str               # "measured" | "recorded" | ...
    profile_provenance: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # what the measuring run recorded (uuid, driver, ...)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update({k: v for k, v in self.extra.items() if k not in d})
        return d


@dataclass
class MeasurementInfo:
    """Whole-model measurements of the run the report merged (each a ModelMeasurement as a dict)."""

    inference: dict[str, Any] | None
    training_step: dict[str, Any] | None
    inference_graph: dict[str, Any] | None
    date: str | None
    command: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
