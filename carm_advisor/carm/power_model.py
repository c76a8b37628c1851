"""Power and energy-efficiency CARM: pure math.

    P(AI) = P_const + e_flop[path] * F(AI) + e_byte[level] * B(AI)      (Choi/Vuduc; Ilic et al.)

with F the FLOP rate and B = F / AI the byte rate at `level`. Energy of a piece of work is then
E = P_const * t + e_flop * flops + e_byte * bytes. A GPU at its board power limit slows down until
P = limit, so the time the roofs allow is stretched to t >= (e_flop * flops + e_byte * bytes) /
(limit - P_const): the power cap is a third roof.

Optional refinements, fitted over a whole sweep by carm/power_fit.py (a profile without them predicts
without them): a data factor per compute path (all-zero operands cost a fraction of random ones on Tensor
Cores; real layers are taken as random, DEFAULT_DATA), and a voltage curve that scales energy per
operation with the SM clock (DVFS), used by carm/dvfs.py to predict time, power and energy at any clock.

What real layers draw (H200, 284 layer windows of >= 0.5 s of VGG16 and ResNet50:
benchmarks/results/nvidia-h200-records-windows-500ms-2026-12-03/): NOT this model at their useful rates. A layer
at 3-40% of its roof draws nearly the power of its bounding unit running flat out: VGG16's convolutions 680-705 W at
13-45% of the BF16 roof, ResNet50's BatchNormalization 340-600 W at 2-6% of the HBM roof. Measured
power above the constant, divided by the model's dynamic power at the layer's FLOPs and bytes over its
measured time, is ~1.4-2x for VGG16's convolutions, 3.5x for ResNet50's, 24x for BatchNormalization
(Keras' BN on torch makes several passes over the tensor; the analytic bytes count one). The activity
that fills the rest of the time (operand staging through shared memory and L2, im2col and tile padding,
casts, extra passes) is not in the FLOPs and bytes a layer's cost counts, so the power at the measured
operating point misses by 46% (64% with the intercept fitted free, at 0 W: see power_fit). The power at
the CARM operating point (the busy power: the roofs' rates, the power limit as a third roof) misses
by 5.6% on VGG16 and 24% on ResNet50. What is left depends on the time per call, not the class,
precision or backend: a call of < 10 us replayed alone from a CUDA graph leaves the GPU idle between
replays (6-10 us calls draw 200-290 W), 20-100 us calls (ResNet50's 1x1 convolutions, Dense at batch
64) reach ~0.7 of their busy power above the constant, >= 0.3 ms calls all of it. DutyCurve is that
share, fitted on LAYER data (the sweep keeps the whole GPU busy for seconds and cannot see it) and validated
leave one model out; docs/design/power_model.md gives each figure below with its file.

Its first form, "time", P = P_const + (P_busy - P_const) * min(1, (t / t_full) ** gamma), was chosen on the
2026-12-03 records and tested on records taken after it (2026-12-04: VGG16 torch at batch 128,
float32/bf16/fp16, 66 layer windows of 0.5 s, and whole models of seven keras.applications models,
Xception, EfficientNetB0, InceptionV3 and ConvNeXtTiny new):
benchmarks/results/nvidia-h200-power-model-2026-12-04.json.xz, validation.form_test. predict.py's calibrated
energy is this headline: the profile's duty curve (power_model.duty) applied to the CARM-point power at the
calibrated time.

The form in use, "size_efficiency": P = P_const + (P_busy - P_const) * min(1, (t_bound / t_size) ** gamma_size)
* min(1, t_bound / t) ** gamma, t_bound the layer's CARM bound time. The second factor (the "efficiency" form
alone) says that what a replayed layer draws follows how busy its limiting unit is (the share of its roof it
reaches), not its duration: a short ReLU streaming HBM near its roof draws near its busy power. The first says
that a layer whose work is too small to fill the GPU (an Add or a 1x1 convolution on 14x14 maps at batch 64,
bound times of 0.5-2 us) draws 150-300 W replayed alone whatever share of its roof it reaches. Chosen among five
forms, each fitted leave one model out on the layers recorded before the ResNet50 and MobileNetV2 windows at
three precisions and batch 32/64/128, then scored on those windows: per-layer power 10.7% on the choosing
records (n=836), 16.4% on the later ones (n=1144), where two other forms did better
(benchmarks/results/nvidia-h200-power-model-duty-form-2026-12-04.json.xz, validation.duty_form_choice). The
time and efficiency forms still load (variable "time" is the default of a profile's power_model.duty).

Replay-paced calls: a layer replayed alone from a CUDA graph (the torch layer windows) costs the host one graph
launch per call, ~5-6 us on the H200 (calibration.Calibration.replay_floor_s); a layer whose kernels take less
leaves the GPU idle for the rest of each replay. Its power is the duty power times the GPU's share of the
replay, replay_paced_fraction = t_gpu / max(t_gpu, floor): among no share, the norm-2 overlap and the larger of
the two, the larger gives per-layer power 9.7% on the records it was chosen on (n=3581) and 11.2% on the later
small-batch torch windows (n=1298) (benchmarks/results/nvidia-h200-power-model-replay-pacing-2026-12-04.json.xz,
validation.replay_pacing_choice). The duty curve is fitted on that busy share, so it describes a layer inside a
model, which no replay paces (the product's per-layer and whole-model predictions use no replay share).

Host-paced calls (benchmarks/results/nvidia-h200-records-resnet50-mobilenetv2-windows-2026-12-04/
resnet50-jax-*.json): a ResNet50 layer jitted alone and dispatched from Python takes tens of microseconds per
call whatever its work, and small layers draw far below their busy power: the GPU idles while the host
dispatches. Such a call draws P_const + (P_busy - P_const) * t_gpu / t_wall (host_paced_fraction), t_gpu the
layer's GPU time; the duty curve (GPU-paced replays) is not applied on top (carm_advisor/validation/scoring.py
scores such layers so, and leaves them out of the curve's fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.errors import ProfileError

# What real layers feed the Tensor Cores: trained or random weights and activations, never all zeros.
DEFAULT_DATA = "random"
# Prior for the voltage curve where the records cannot pin it (few throttled clocks): voltage flat
# below half the maximum clock, 0.70 of its maximum there (Hopper-class V/f tables span ~0.7-1.05 V).
DEFAULT_F_KNEE_FRACTION = 0.5
DEFAULT_V_KNEE = 0.70


@dataclass(frozen=True)
class VoltageCurve:
    """v(f) = V(f)/V(f0): flat at v_knee below f_knee, linear up to 1 at f0 (see carm/power_fit.py)."""

    f0_mhz: float
    f_knee_mhz: float
    v_knee: float
    source: str = "assumed"   # "fitted" when the records chose it, "assumed" when it is the prior

    def __post_init__(self):
        if not (0 < self.f_knee_mhz < self.f0_mhz) or not (0 < self.v_knee <= 1):
            raise ProfileError(f"voltage curve needs 0 < f_knee < f0 and 0 < v_knee <= 1, received: "
                               f"f0={self.f0_mhz}, f_knee={self.f_knee_mhz}, v_knee={self.v_knee}")

    def relative_voltage(self, f_mhz: float) -> float:
        x = min(1.0, max(0.0, (f_mhz - self.f_knee_mhz) / (self.f0_mhz - self.f_knee_mhz)))
        return self.v_knee + (1.0 - self.v_knee) * x

    def energy_scale(self, f_mhz: float | None) -> float:
        """Energy per operation at f relative to f0: v(f)^2 (1 when the clock is unknown)."""
        return 1.0 if f_mhz is None else self.relative_voltage(f_mhz) ** 2

    def to_dict(self) -> dict[str, Any]:
        return {"f0_mhz": self.f0_mhz, "f_knee_mhz": self.f_knee_mhz, "v_knee": self.v_knee, "source": self.source,
                "assumption": "energy per operation ~ V(f)^2; V flat below f_knee, linear in f above it; "
                              "constant power and HBM energy per byte independent of the SM clock"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VoltageCurve:
        try:
            return cls(float(d["f0_mhz"]), float(d["f_knee_mhz"]), float(d["v_knee"]), str(d.get("source", "assumed")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"power_model.dvfs must hold numbers f0_mhz, f_knee_mhz, v_knee, received: {d!r}") from exc

    @classmethod
    def default(cls, f0_mhz: float) -> VoltageCurve:
        return cls(f0_mhz, f0_mhz * DEFAULT_F_KNEE_FRACTION, DEFAULT_V_KNEE, "assumed")




# What a duty curve is a function of (each scored in the result files named here; docs/design/power_model.md):
# the time per call ("time"); the layer's efficiency, its CARM bound time / its time per call ("efficiency");
# the efficiency times the layer's size, its CARM bound time against a fitted t_size_s ("size_efficiency", in
# use: a layer whose work is too small to fill the GPU draws little whatever share of its roof it reaches;
# nvidia-h200-power-model-duty-form-2026-12-04.json.xz, validation.duty_form_choice); the efficiency times how
# far the layer's output fills the GPU, its output elements against a fitted n_full ("fill_efficiency", not in
# use: per-layer power 10.0% against 9.5%, n=4900; nvidia-h200-power-model-jit-gpu-time-2026-12-04.json.xz,
# validation.duty_fill_choice); or both size terms together ("size_fill_efficiency", not in use: per whole model
# 8.8% against 7.2%, n=176; nvidia-h200-power-model-cell-statistic-2026-12-04.json.xz,
# validation.duty_size_fill_choice).
# Compute paths of the Tensor Cores (the CARM's "tc_bf16", "tc_fp16", "tc_tf32", "tc_fp8_e4m3", ...).
TENSOR_CORE_PATH_PREFIX = "tc_"
DUTY_VARIABLES = ("time", "efficiency", "size_efficiency", "fill_efficiency", "size_fill_efficiency")
OUTPUT_SIZE_VARIABLES = ("fill_efficiency", "size_fill_efficiency")   # the forms with an output-elements term
DUTY_BUSY_FORMS = ("capped", "uncapped")   # what the duty scales: PowerModel.duty_busy


@dataclass(frozen=True)
class DutyCurve:
    """Share of its busy power (above the constant power) that a layer taking `time_s` per call draws.
    It is fitted on the GPU's busy share of each replay (carm_advisor/validation/scoring.py, replay_share): the
    idle a replayed layer leaves while the host launches the next replay is not in it (the short-replay powers
    below are of whole replays, that idle included).
    variable "time": d(t) = min(1, (t / t_full_s) ** gamma). variable "efficiency": d = e ** gamma, e =
    min(1, bound_time_s / time_s) the share of its roof the layer reaches (how busy its limiting unit
    is), t_full_s unused (None). Fitted on measured LAYERS (carm/power_fit.fit_duty_curve), not on the
    sweep: every sweep benchmark keeps the whole GPU busy for seconds, so the sweep cannot see it. On the
    H200 (2026-12-03 records) short layer calls draw less: a 6 us call replayed from a CUDA graph leaves
    the GPU idle between replays, a 50-100 us one (ResNet50's 1x1 convolutions) fills part of the SMs, a
    >= 0.3 ms one runs at its busy power; but a 14 us ReLU streaming HBM near its roof draws ~600 W.
    variable "size_efficiency": d = min(1, (bound_time_s / t_size_s) ** gamma_size) * e ** gamma: the
    efficiency form times the layer's size (its CARM bound time, the work at the roofs' rates) against
    t_size_s: on the H200, MobileNetV2 and ResNet50 layers whose work takes < ~2 us at the roofs (an Add at
    batch 64, a 1x1 convolution on 14x14 maps) draw 150-300 W replayed alone, whatever their efficiency."""

    t_full_s: float | None
    gamma: float
    source: str = "fitted on layer records"
    variable: str = "time"
    t_size_s: float | None = None       # size_efficiency: the bound time from which a layer fills the GPU
    gamma_size: float = 0.0             # size_efficiency, fill_efficiency: the exponent of its size term
    n_full: float | None = None         # fill_efficiency: the output elements from which a layer fills the GPU
    gamma_fill: float = 0.0             # size_fill_efficiency: the exponent of its output-elements term

    def __post_init__(self):
        if self.variable not in DUTY_VARIABLES:
            raise ProfileError(f"duty curve variable must be one of {DUTY_VARIABLES}, received: {self.variable!r}")
        time_ok = self.variable != "time" or (isinstance(self.t_full_s, (int, float)) and math.isfinite(self.t_full_s)
                                              and self.t_full_s > 0)
        if not time_ok or not (math.isfinite(self.gamma) and self.gamma >= 0):
            raise ProfileError(f"duty curve needs t_full_s > 0 and gamma >= 0, received: t_full_s={self.t_full_s!r}, "
                               f"gamma={self.gamma!r}")
        size_ok = self.variable not in ("size_efficiency", "size_fill_efficiency") or (
            isinstance(self.t_size_s, (int, float)) and math.isfinite(self.t_size_s) and self.t_size_s > 0
            and math.isfinite(self.gamma_size) and self.gamma_size >= 0)
        size_ok = size_ok and (self.variable not in OUTPUT_SIZE_VARIABLES or (
            isinstance(self.n_full, (int, float)) and math.isfinite(self.n_full) and self.n_full > 0
            and math.isfinite(self.gamma_size) and self.gamma_size >= 0
            and math.isfinite(self.gamma_fill) and self.gamma_fill >= 0))
        if not size_ok:
            raise ProfileError(f"the {self.variable} duty curve needs "
                               f"{'n_full' if self.variable == 'fill_efficiency' else 't_size_s'} > 0 and "
                               f"gamma_size >= 0, received: n_full={self.n_full!r}, "
                               f"t_size_s={self.t_size_s!r}, gamma_size={self.gamma_size!r}, "
                               f"gamma_fill={self.gamma_fill!r}")

    def fraction(self, time_s: float | None, bound_time_s: float | None = None,
                 output_elements: float | None = None) -> float:
        """The duty in (0, 1]; 1 where the time (or, for the efficiency forms, the bound time) is unknown
        (the busy power stands); fill_efficiency without `output_elements`: the efficiency form alone."""
        if time_s is None or not time_s > 0:
            return 1.0
        if self.variable != "time":   # the efficiency forms
            if bound_time_s is None or not bound_time_s > 0:
                return 1.0
            d = min(1.0, bound_time_s / time_s) ** self.gamma
            if self.variable in ("size_efficiency", "size_fill_efficiency"):
                d *= min(1.0, (bound_time_s / self.t_size_s) ** self.gamma_size)
            if self.variable == "fill_efficiency" and output_elements and output_elements > 0:
                d *= min(1.0, (output_elements / self.n_full) ** self.gamma_size)
            if self.variable == "size_fill_efficiency" and output_elements and output_elements > 0:
                d *= min(1.0, (output_elements / self.n_full) ** self.gamma_fill)
            return d
        return min(1.0, (time_s / self.t_full_s) ** self.gamma)

    def to_dict(self) -> dict[str, Any]:
        if self.variable == "size_fill_efficiency":
            return {"variable": "size_fill_efficiency", "gamma": self.gamma, "t_size_s": self.t_size_s,
                    "gamma_size": self.gamma_size, "n_full": self.n_full, "gamma_fill": self.gamma_fill,
                    "source": self.source,
                    "form": "P = P_const + (P_busy - P_const) * min(1, (t_bound / t_size_s) ** gamma_size) * "
                            "min(1, (n_out / n_full) ** gamma_fill) * min(1, t_bound / t) ** gamma, n_out the "
                            "elements the layer writes, t the time per call, t_bound its CARM bound time"}
        if self.variable == "fill_efficiency":
            return {"variable": "fill_efficiency", "gamma": self.gamma, "n_full": self.n_full,
                    "gamma_size": self.gamma_size, "source": self.source,
                    "form": "P = P_const + (P_busy - P_const) * min(1, (n_out / n_full) ** gamma_size) * "
                            "min(1, t_bound / t) ** gamma, n_out the elements the layer writes, t the time per "
                            "call, t_bound its CARM bound time"}
        if self.variable == "size_efficiency":
            return {"variable": "size_efficiency", "gamma": self.gamma, "t_size_s": self.t_size_s,
                    "gamma_size": self.gamma_size, "source": self.source,
                    "form": "P = P_const + (P_busy - P_const) * min(1, (t_bound / t_size_s) ** gamma_size) * "
                            "min(1, t_bound / t) ** gamma, t the time per call, t_bound its CARM bound time"}
        if self.variable == "efficiency":
            return {"variable": "efficiency", "gamma": self.gamma, "source": self.source,
                    "form": "P = P_const + (P_busy - P_const) * min(1, t_bound / t) ** gamma, t the time per call, "
                            "t_bound its CARM bound time"}
        return {"t_full_s": self.t_full_s, "gamma": self.gamma, "source": self.source,
                "form": "P = P_const + (P_busy - P_const) * min(1, (t / t_full_s) ** gamma), t the time per call"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DutyCurve:
        try:
            variable = str(d.get("variable", "time"))
            t_full = float(d["t_full_s"]) if variable == "time" else None
            size = ((float(d["t_size_s"]), float(d["gamma_size"])) if variable in ("size_efficiency", "size_fill_efficiency")
                    else (None, float(d["gamma_size"])) if variable == "fill_efficiency" else (None, 0.0))
            n_full = float(d["n_full"]) if variable in OUTPUT_SIZE_VARIABLES else None
            gamma_fill = float(d["gamma_fill"]) if variable == "size_fill_efficiency" else 0.0
            return cls(t_full, float(d["gamma"]), str(d.get("source", "fitted on layer records")), variable, *size,
                       n_full, gamma_fill)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"power_model.duty must hold numbers t_full_s (variable time), gamma, t_size_s and "
                               f"gamma_size (variable size_efficiency; with n_full and gamma_fill, "
                               f"size_fill_efficiency), received: "
                               f"{d!r}") from exc


@dataclass(frozen=True)
class PowerModel:
    constant_w: float                                   # drawn whenever a kernel runs (static + uncore)
    joules_per_flop: dict[str, float] = field(default_factory=dict)   # per compute path
    joules_per_byte: dict[str, float] = field(default_factory=dict)   # per memory level
    power_limit_w: float | None = None
    data_factor: dict[str, dict[str, float]] = field(default_factory=dict)  # {path: {"zero": 0.21, ...}}
    voltage: VoltageCurve | None = None                 # energy per operation vs SM clock (None: clock-blind)
    fit: dict = field(default_factory=dict)            # fit quality: n, r2, median/max abs relative error
    duty: DutyCurve | None = None                      # busy power vs time per call (None: the busy power)
    # Layers on a Tensor Core path (TENSOR_CORE_PATH_PREFIX) follow this curve where set, the rest `duty`; None: one
    # curve for every layer. Per-layer power 10.9% against 11.0% for one curve (n=4900), whole-model power 7.5%
    # against 8.2% (n=208) (nvidia-h200-power-model-duty-per-unit-2026-12-05.json.xz, validation.duty_unit_choice).
    duty_tensor_core: DutyCurve | None = None
    # A compute path's own curve ({path: curve}): the layers on that path follow it before their unit's curve; a path
    # without one keeps its unit's. No shipped profile has one: per-layer power 9.1% against 11.8% for the per-unit
    # curves on the records it was chosen on (n=5956), 10.0% against 8.4% on the torch records made after (n=550)
    # (nvidia-h200-power-model-candidates-on-new-records-2026-12-05.json.xz, validation.duty_path_choice).
    duty_by_path: dict[str, DutyCurve] = field(default_factory=dict)
    # What the duty scales (DUTY_BUSY_FORMS): "capped", the busy power at the CARM operating point with the power
    # limit as a roof (the incumbent); "uncapped", the power at the roofs' own rates with no limit (each path's own
    # energy per FLOP: a half-precision Tensor Core path at a share of its roof draws less than TF32 at the same
    # share), the duty at the uncapped roofs' time, the result capped at the power limit. Over every H200 record
    # per-layer power 10.8% uncapped against 11.3% capped (n=6897), whole-model power 7.7% for both (n=277)
    # (nvidia-h200-power-model-2026-12-07.json.xz, validation.duty_busy_choice); the shipped profiles stay capped.
    # The caller passes the matching busy power and bound time.
    duty_busy: str = "capped"

    def __post_init__(self):
        if self.duty_busy not in DUTY_BUSY_FORMS:
            raise ProfileError(f"power model duty_busy must be one of {DUTY_BUSY_FORMS}, received: {self.duty_busy!r}")
        if not (math.isfinite(self.constant_w) and self.constant_w >= 0):
            raise ProfileError(f"power model constant_w must be >= 0, received: {self.constant_w!r}")
        for table, what in ((self.joules_per_flop, "joules_per_flop"), (self.joules_per_byte, "joules_per_byte")):
            for key, value in table.items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise ProfileError(f"power model {what}['{key}'] must be >= 0, received: {value!r}")
        for path, factors in self.data_factor.items():
            for data, value in (factors or {}).items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise ProfileError(f"power model data_factor['{path}']['{data}'] must be >= 0, received: {value!r}")
        for path, curve in self.duty_by_path.items():
            if not isinstance(curve, DutyCurve):
                raise ProfileError(f"power model duty_by_path['{path}'] must be a duty curve, received: {curve!r}")
        if self.power_limit_w is not None and self.power_limit_w <= self.constant_w:
            raise ProfileError(
                f"power limit ({self.power_limit_w} W) must exceed the constant power ({self.constant_w} W)"
            )

    def _e_flop(self, path: str) -> float:
        if path not in self.joules_per_flop:
            raise ProfileError(f"the power model has no energy per FLOP for '{path}'")
        return self.joules_per_flop[path]

    def _e_byte(self, level: str) -> float:
        if level not in self.joules_per_byte:
            raise ProfileError(f"the power model has no energy per byte for '{level}'")
        return self.joules_per_byte[level]

    def dynamic_energy_j(self, flops: float, bytes_: float, path: str, level: str) -> float:
        return self._e_flop(path) * flops + self._e_byte(level) * bytes_

    def power_w(self, flops_per_s: float, bytes_per_s: float, path: str, level: str,
                sm_clock_mhz: float | None = None, data: str = DEFAULT_DATA) -> float:
        """Uncapped board power for a kernel running at these rates (reached at `sm_clock_mhz`; None:
        the reference clock) on `data` operands ("random", the default for real layers, or "zero")."""
        s = self.voltage.energy_scale(sm_clock_mhz) if self.voltage is not None else 1.0
        flop_w = s * self._e_flop(path) * self.data_multiplier(path, data) * flops_per_s
        byte_w = (1.0 if level == "hbm" else s) * self._e_byte(level) * bytes_per_s
        return self.constant_w + flop_w + byte_w

    def data_multiplier(self, path: str, data: str = DEFAULT_DATA) -> float:
        """Energy per FLOP on `data` operands relative to random ones (1 where nothing was measured)."""
        if data == DEFAULT_DATA:
            return 1.0
        return float((self.data_factor.get(path) or {}).get(data, 1.0))

    def capped_time_s(self, roof_time_s: float, flops: float, bytes_: float, path: str, level: str) -> float:
        """The roofs' time, stretched where the power limit forbids running that fast."""
        if self.power_limit_w is None:
            return roof_time_s
        power_time_s = self.dynamic_energy_j(flops, bytes_, path, level) / (self.power_limit_w - self.constant_w)
        return max(roof_time_s, power_time_s)

    def duty_curve_for(self, path: str | None) -> DutyCurve | None:
        """The duty curve of a layer on compute path `path`: the path's own (duty_by_path) where the model has one,
        else duty_tensor_core for a Tensor Core path where the model has one, else duty."""
        if path in self.duty_by_path:
            return self.duty_by_path[path]
        if self.duty_tensor_core is not None and path and path.startswith(TENSOR_CORE_PATH_PREFIX):
            return self.duty_tensor_core
        return self.duty

    def duty_power_w(self, busy_w: float, time_s: float | None, wall_time_s: float | None = None,
                     bound_time_s: float | None = None, gpu_share: float = 1.0,
                     output_elements: float | None = None, path: str | None = None) -> float:
        """A layer's power from its busy power (the power model at its CARM operating point) and its time
        per call. GPU-paced calls (a CUDA graph replay, a layer inside a compiled model; wall_time_s None):
        P_const + (busy - P_const) * duty, the duty curve at time_s (and, for its efficiency form, at the
        layer's CARM bound time `bound_time_s`), the busy power without a duty curve. Host-paced calls
        (a layer jitted alone and dispatched from Python, `wall_time_s` its wall time per call, `time_s`
        its GPU time): P_const + (busy - P_const) * host_paced_fraction(time_s, wall_time_s), no duty
        curve: the idle share of each call is the gap the host leaves, which the duty curve (fitted on
        GPU-paced replays) would count a second time. `gpu_share` (GPU-paced form): the share of each
        call the GPU works (replay_paced_fraction: a small layer replayed alone from a CUDA graph idles the
        GPU while the host launches the next replay); 1 for a layer inside a model. `path`: the layer's compute
        path, which picks its curve (duty_curve_for)."""
        if wall_time_s is not None:
            return self.constant_w + (busy_w - self.constant_w) * host_paced_fraction(time_s, wall_time_s)
        curve = self.duty_curve_for(path)
        if self.duty_busy == "uncapped":   # busy_w uncapped: the duty power at most the power limit
            duty = curve.fraction(time_s, bound_time_s, output_elements) if curve is not None else 1.0
            p = self.constant_w + (busy_w - self.constant_w) * duty
            if self.power_limit_w is not None:
                p = min(p, self.power_limit_w)
            return self.constant_w + (p - self.constant_w) * gpu_share
        if curve is None and gpu_share == 1.0:
            return busy_w
        duty = curve.fraction(time_s, bound_time_s, output_elements) if curve is not None else 1.0
        return self.constant_w + (busy_w - self.constant_w) * duty * gpu_share

    def mean_duty_power_w(self, layers, gpu_share: float = 1.0) -> float | None:
        """A whole model's power from its layers, (busy_w, bound_time_s, time_s[, output_elements[, path]]) each: their
        duty powers (duty_power_w, GPU-paced) time-weighted over their times, then scaled above the constant
        power by `gpu_share` (host_paced_fraction of a host-paced whole-model call, 1 otherwise). None without
        layers. What carm_advisor/validation/scoring.py scores as the whole-model headline."""
        layers = [(b, bt, t, *rest) for b, bt, t, *rest in layers if t and t > 0]
        total = sum(layer[2] for layer in layers)
        if not total:
            return None
        mean = sum(self.duty_power_w(b, t, bound_time_s=bt, output_elements=rest[0] if rest else None,
                                     path=rest[1] if len(rest) > 1 else None) * t
                   for b, bt, t, *rest in layers) / total
        return self.constant_w + (mean - self.constant_w) * gpu_share

    def energy_j(self, time_s: float, flops: float, bytes_: float, path: str, level: str) -> float:
        return self.constant_w * time_s + self.dynamic_energy_j(flops, bytes_, path, level)


def host_paced_fraction(gpu_time_s: float | None, wall_time_s: float | None) -> float:
    """The share of each call's wall time the GPU is busy: gpu / wall, capped at 1 (1 where either is
    unknown). A call dispatched from the host (jax: a layer jitted alone, tens of microseconds of Python and
    XLA dispatch per call on the H200, see the module docstring) keeps the GPU busy only for the layer's GPU time:
    the rest of each call the GPU idles at the constant power."""
    if gpu_time_s is None or wall_time_s is None or not gpu_time_s > 0 or not wall_time_s > 0:
        return 1.0
    return min(1.0, gpu_time_s / wall_time_s)


# How a replayed layer's GPU time and the host's launch per replay combine (replay_paced_fraction): the larger
# of the two. Per-layer power 9.7% against 10.1% with no share and 10.5% with the norm-2 overlap on the records it
# was chosen on (n=3581), 11.2% against 14.5% and 12.4% on the later small-batch torch windows (n=1298)
# (nvidia-h200-power-model-replay-pacing-2026-12-04.json.xz, validation.replay_pacing_choice).
REPLAY_OVERLAP_NORM = math.inf


def replay_paced_fraction(gpu_time_s: float | None, floor_s: float | None,
                          norm: float = REPLAY_OVERLAP_NORM) -> float:
    """The share of each replay the GPU is busy for a layer replayed alone from a CUDA graph, one host launch
    per call: gpu / (gpu ** p + floor ** p) ** (1 / p) (p = `norm`; inf: gpu / max(gpu, floor)), `floor_s` the
    host's time per replay (calibration.Calibration.replay_floor_s), gpu the layer's GPU time. On the H200
    (the torch layer windows of nvidia-h200-power-model-replay-pacing-2026-12-04.json.xz) layers whose kernels
    take < 6 us were busy 0.4-0.7 of each 5-6 us replay, and their power was over-predicted by 24-80% without it.
    1 where either is unknown."""
    if not norm > 0:
        raise ValueError(f"Expected an overlap norm > 0 (inf: the larger), Received: {norm!r}")
    if gpu_time_s is None or floor_s is None or not gpu_time_s > 0 or not floor_s > 0:
        return 1.0
    wall = max(gpu_time_s, floor_s) if math.isinf(norm) else (gpu_time_s ** norm + floor_s ** norm) ** (1 / norm)
    return min(1.0, gpu_time_s / wall)


def gflops_per_watt(flops: float, energy_j: float) -> float:
    """Energy efficiency: GFLOP/s per W is GFLOP per J."""
    return flops / energy_j / 1e9 if energy_j > 0 else float("nan")
