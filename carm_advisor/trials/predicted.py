"""Every CARM prediction the tuner uses, in one adapter over carm_advisor.predict.Predictor (a
calibration plugs in here: `ConfigPredictor(..., calibration=...)`).

- `ConfigPredictor.predict(config)`: the CARM bound of a configuration: each layer's time from the
  roofs (stretched where the power limit forbids running that fast), its energy from the profile's
  power model; summed over the layers. No real run of that configuration can be faster; its energy
  is the power model's, so the pruning that compares it with measurements keeps a margin.
- `ConfigPredictor.value_prediction(config)`: what a PREDICTED study reports as the trial's value: the
  calibrated whole-model prediction of this backend and compiler where the calibration has one
  (`calibrated`), else the CARM bound (labelled so). Compiler -> the calibration's whole-model
  execution (whole_execution): torch eager -> "eager" (max of the GPU's time and the host's dispatch
  time per layer call), torch.compile -> the calibration's own "torch.compile" fit where it has one
  (COMPILED_EXECUTION: fitted on measured torch.compile runs), else "cuda_graph" (WHOLE_EXECUTION: an
  ASSUMPTION: a compiled graph takes about the GPU time of the layers, as a CUDA-graph replay does),
  jax xla -> "jit", tensorflow xla -> "jit" from jax's jit records (calibration.store.BORROWED: no TensorFlow run is
  recorded on the calibrated GPUs; its values are labelled so); tensorflow graph (no XLA) keeps the bound. Energy of a calibrated
  prediction: calibrated time x the whole-model power of this configuration as benchmarks/power_model_validation.py
  validates it (predict.whole_model_power_w: its layers' busy powers, at their CARM operating points capped
  at the power limit, scaled by the profile's duty curve and time-weighted: on 91 H200 whole-model records the
  busy power alone is 17.7% off, this power 7.2% with the validation's sweep fit and 8.1% with the shipped
  profile's power model, benchmarks/results/nvidia-h200-power-model-duty-form-2026-12-04.json.xz,
  validation.models; the busy power where no calibrated layer time exists). The alternative, the same work's
  dynamic energy spread over the longer time (P_const * T + e_flop * FLOPs + e_byte * bytes,
  `stretched_energy_j`), draws less power the slower a layer runs; measured
  H200 trials drew near the limit even where layers ran far below their roofs (642 W for float32
  eager VGG16 at 13% of the bound), so the tuner uses the former; benchmarks/tuning_prediction_check.py
  reports both against the measured trials.
- `predict_at_sm_clock`: the same at a locked SM clock, PREDICTED by the profile's DVFS model
  (carm/dvfs.py).
- `layer_changes`: which layers change roof (or bound time) between two configurations.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.calibration import Calibration, load_calibration
from carm_advisor.calibration.store import borrowed_note, with_borrowed
from carm_advisor.carm.dvfs import Work, predict_model_at_clock
from carm_advisor.carm.placement import QUANTIZED_DTYPE
from carm_advisor.mapping.layers_dense import QUANTIZED_MODES, quantizable_flops
from carm_advisor.mapping.memory import does_not_fit
from carm_advisor.models.builder import ModelSpec, build
from carm_advisor.predict import resolve_math_mode, whole_batch_range, whole_model_power_w
from carm_advisor.profiles.profile import DEFAULT_EMBEDDED, EMBEDDED, Profile, load_profile
from carm_advisor.report.render import power_limited
from carm_advisor.trials.space import PRECISION_SETUP, TrialConfig

SOURCE_BOUND = "predicted (CARM bound)"
SOURCE_CALIBRATED = "predicted (calibrated)"
VALUE_CALIBRATED = "calibrated"      # a trial's value_source in a predicted study
VALUE_BOUND = "CARM bound"
# (backend, compiler) -> the calibration's whole-model execution, and what that mapping assumes.
# WHOLE_EXECUTION is the fallback; COMPILED_EXECUTION is preferred where the calibration has that fit.
WHOLE_EXECUTION = {("torch", "eager"): "eager", ("torch", "torch.compile"): "cuda_graph", ("jax", "xla"): "jit",
                   ("tensorflow", "xla"): "jit"}
WHOLE_ASSUMPTION = {
    ("torch", "eager"): "torch eager: the calibration's eager whole-model fit",
    ("torch", "torch.compile"): "torch.compile: ASSUMED to take the GPU time of the layers (the CUDA-graph fit; "
                                "no torch.compile record was fitted)",
    ("jax", "xla"): "jax XLA: the calibration's jit whole-model fit",
    ("tensorflow", "xla"): "tensorflow XLA: the calibration's tensorflow jit whole-model fit",
}
# What a configuration without a calibrated whole-model execution is told, where more than "no records" is known.
NO_EXECUTION = {("tensorflow", "graph"): "tensorflow graph (without XLA): no calibration (TensorFlow not measured on "
                                         "this GPU; only its XLA configurations take jax's XLA calibration)"}
COMPILED_EXECUTION = {("torch", "torch.compile"): "torch.compile"}
COMPILED_SOURCE = {("torch", "torch.compile"): "torch.compile: the calibration's torch.compile whole-model fit "
                                               "(measured torch.compile runs)"}


def whole_execution(calibration, backend: str, compiler: str) -> tuple[str | None, str]:
    """(the calibration's whole-model execution for this backend and compiler, what that mapping is):
    the compiler's own fit where the calibration has one (COMPILED_EXECUTION), else WHOLE_EXECUTION's
    (for torch.compile an assumption, and the text says so); (None, why) without any."""
    key = (backend, compiler)
    own = COMPILED_EXECUTION.get(key)
    if own is not None and calibration is not None and _has_fit(calibration, backend, own):
        return own, COMPILED_SOURCE[key]
    execution = WHOLE_EXECUTION.get(key)
    if execution is None:
        return None, NO_EXECUTION.get(key, f"no calibrated whole-model execution for {backend} {compiler} (no records)")
    note = borrowed_note(calibration, backend)
    return execution, WHOLE_ASSUMPTION[key] + (f", {note}" if note else "")


def _has_fit(calibration, backend: str, execution: str) -> bool:
    fit = getattr(calibration, "whole_fit", None)
    return fit is not None and fit(backend, execution) is not None
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
    value_source: str = VALUE_BOUND              # calibrated | CARM bound: what time_s / energy_j are
    detail: str = ""                             # how the figure was made (the fit, the assumption)

    @property
    def power_w(self) -> float | None:
        return self.energy_j / self.time_s if self.energy_j and self.time_s else None


def expected(p: Prediction) -> Prediction:
    """The calibrated figures where a calibration gave them (to rank configurations), else the bound."""
    if p.calibrated_time_s is None:
        return p
    return Prediction(p.calibrated_time_s, p.calibrated_energy_j, p.flops, p.batch_size,
                      "predicted (calibrated)", p.rows)


def value_prediction(predictor, config: TrialConfig) -> Prediction:
    """The predictor's value_prediction where it has one (ConfigPredictor), else its bound (test stubs)."""
    fn = getattr(predictor, "value_prediction", None)
    return fn(config) if fn is not None else predictor.predict(config)


def math_mode_for(config: TrialConfig) -> dict[str, str]:
    mode = dict(resolve_math_mode(config.backend))
    mode.update(_FLOAT32_MATH.get(config.precision, {}))
    return mode




def resolve_calibration(calibration, profile):
    """True: the shipped calibration when it was recorded on the profile's GPU model (with this GPU's
    cache); False/None: none (CARM bounds alone); a path: that calibration JSON; a Calibration: itself."""
    if calibration is None or calibration is False:
        return None
    if calibration is True:
        return load_calibration(None, getattr(profile, "name", None))
    if isinstance(calibration, (str, os.PathLike)):
        return Calibration.load(calibration)
    return calibration


# The policy a predicted study builds an application or a builder's model under, only to tell its layers apart:
# those that follow the policy a trial builds under take the trial's compute dtype, those the builder pins to
# another (Keras' mixed-precision guide: the output layer at dtype="float32") keep theirs, as a real build under
# the trial's policy does. Under float32 a pinned float32 layer could not be told from the rest. Variables are
# float32 under it as under float32 (the weights' bytes in memory are the same); 12 keras.applications models map
# to the same costs under it as under float32 at every compute dtype (tests/test_tune_predicted_pinned.py).
PROBE_POLICY = "mixed_float16"


class ConfigPredictor:
    """CARM bounds of configurations of one model on one profile; cached per distinct prediction."""

    def __init__(self, spec: ModelSpec, profile=None, model=None, calibration=None,
                 policies_fixed: bool | None = None, input_shapes=None) -> None:
        """policies_fixed: whether the model's dtype policies cannot be replaced, where the caller has read its
        traits already (tune(): builder.file_traits); None: read here when first needed. input_shapes: a
        subclassed model's call() argument shapes (map_model's), for every model built here."""
        self.spec = spec
        self.profile: Profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.profile_origin = profile_origin(profile)
        # tensorflow's XLA configurations take jax's jit records where the calibration has none of tensorflow's
        self.calibration = with_borrowed(resolve_calibration(calibration, self.profile), "tensorflow", "jit")
        self._models: dict[str, Any] = {}
        if model is not None:
            self._models[_layout_key(spec, None)] = model
        self._cache: dict[tuple, Prediction] = {}
        self._fixed: bool | None = policies_fixed
        self.input_shapes = input_shapes

    def model(self, layout: str):
        """The model built in this layout: an application or a builder's under PROBE_POLICY, a model file as saved;
        its layers pinned to another policy keep it. The precision enters as the compute dtype of the layers under
        the model's own policy (_costs)."""
        key = _layout_key(self.spec, layout)
        if key not in self._models:
            import keras

            # Variables on the CPU: the tuner's own process must not take GPU memory from the trials.
            with keras.device("cpu"):
                policy = None if self.spec.kind == "file" else PROBE_POLICY
                self._models[key] = build(self.spec, policy, layout, seed=0)
        return self._models[key]

    def _policies_fixed(self) -> bool:
        """True where the model's dtype policies cannot be replaced (builder.file_traits: a file or built model
        with bfloat16 variables, quantized layers): it computes at its own dtypes whatever the configuration."""
        if self._fixed is None:
            from carm_advisor.models.builder import file_traits

            self._fixed = self.spec.kind in ("file", "model") and bool(file_traits(self.spec).fixed_precision)
        return self._fixed

    def predict(self, config: TrialConfig) -> Prediction:
        mode = math_mode_for(config)
        # a quantised layer's roof depends on the backend (carm.placement.QUANTIZED_PATHS), as a calibration does
        key = (config.precision if config.compute_dtype != "float32" else "float32",
               mode.get("conv"), mode.get("matmul"), config.batch_size, _layout_key(self.spec, config.layout),
               config.backend if self.calibration is not None or config.quantize else None)
        if key not in self._cache:
            from carm_advisor.predict import Predictor

            predictor = Predictor(self.profile, mode, backend=config.backend, calibration=self.calibration)
            costs = self._costs(config)
            rows = predictor.rows_for_costs(costs)
            if config.quantize:
                _note_quantized_projections(costs, rows, config.quantize)
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

    def quantized_model(self, layout: str, precision: str):
        """The model of a quantised precision (TrialConfig.quantize), built under its policy and quantised as a
        trial builds it (builder.build(..., quantize=mode)), in this layout; on the CPU, kept."""
        setup = PRECISION_SETUP[precision]
        key = ("quantized", setup.policy, setup.quantize, _layout_key(self.spec, layout))
        if key not in self._models:
            import keras

            with keras.device("cpu"):
                self._models[key] = build(self.spec, setup.policy, layout, seed=0, quantize=setup.quantize)
        return self._models[key]

    def quantizable_shares(self, layout: str = "channels_last") -> dict[str, tuple[int, int]]:
        """{quantisation mode: (FLOPs of the layers model.quantize(mode) converts, FLOPs of the model)} of the model
        at batch 1 (mapping.layers_dense.quantizable_flops): what decides whether a study searches the mode
        (space.with_quantization)."""
        key = ("shares", _layout_key(self.spec, layout))
        if key not in self._cache:
            from carm_advisor.mapping import map_model

            costs = map_model(self.model(layout), batch_size=1, input_shapes=self.input_shapes)
            self._cache[key] = {mode: quantizable_flops(costs, mode) for mode in QUANTIZED_MODES}
        return self._cache[key]

    def _costs(self, config: TrialConfig) -> list:
        """The model's layer costs at this configuration's layout, batch size and compute dtype (map_model): the
        layers under the model's own policy (builder.model_policy) at the configuration's compute dtype, layers
        pinned to another policy (a built mixed model's float32 output layer) at theirs, as analyze does; every
        layer at its own where the model's policies cannot be replaced (_policies_fixed). A quantised precision:
        its quantised model's costs, each layer at its own dtype policy (quantized_model)."""
        key = ("costs", _layout_key(self.spec, config.layout), config.batch_size, config.compute_dtype,
               config.quantize)
        if key not in self._cache:
            from carm_advisor.mapping import map_model
            from carm_advisor.models.builder import model_policy

            if config.quantize:
                model, dtypes = self.quantized_model(config.layout, config.precision), None
            else:
                model = self.model(config.layout)
                # A model whose policies cannot be replaced runs at its own dtypes whatever the configuration.
                dtypes = None if self._policies_fixed() else {model_policy(model): config.compute_dtype}
            self._cache[key] = map_model(model, batch_size=config.batch_size, compute_dtype=dtypes,
                                         input_shapes=self.input_shapes)
        return self._cache[key]

    def memory(self, config: TrialConfig, mode: str = "inference"):
        """A LOWER BOUND on the GPU memory one call of this configuration needs (mapping/memory.py says what it
        counts): weights at their storage dtype + the largest matmul layer's input + output at the batch and
        the compute dtype of its cost (_costs: a file whose bfloat16 policy cannot be replaced computes in 16 bits
        under a float32 configuration); in training the largest of that,
        the gradients and the activations kept for backward."""
        key = ("memory", _layout_key(self.spec, config.layout), config.batch_size, config.compute_dtype, mode,
               config.backend if mode == "training" else None, config.quantize)
        if key not in self._cache:
            from carm_advisor.mapping.memory import footprint_lower_bound

            model = (self.quantized_model(config.layout, config.precision) if config.quantize
                     else self.model(config.layout))
            self._cache[key] = footprint_lower_bound(model, self._costs(config), training=mode == "training",
                                                     backend=config.backend)
        return self._cache[key]

    def does_not_fit(self, config: TrialConfig, mode: str = "inference") -> str | None:
        """"predicted: needs at least X GB, the GPU has Y GB (...)" where the memory lower bound exceeds the
        profile's memory_bytes; None where it may fit (or the profile records no memory size)."""
        why = does_not_fit(self.memory(config, mode), self.profile)
        return f"predicted: {why}" if why else None

    def calibrated_batch_range(self, backend: str, compiler: str) -> tuple[int, int] | None:
        """The batch sizes (smallest, largest) of the whole-model records behind this backend and compiler's
        calibrated value (whole_execution), or None (no calibration, no records noting a batch size)."""
        if self.calibration is None:
            return None
        execution = whole_execution(self.calibration, backend, compiler)[0]
        if execution is None:
            return None
        return whole_batch_range(self.calibration, backend, execution)

    def value_prediction(self, config: TrialConfig) -> Prediction:
        """The figure a predicted study reports for `config`: the calibrated whole-model prediction of
        its backend and compiler (value_source "calibrated"), else the CARM bound ("CARM bound", with why)."""
        key = ("value", config.key)
        if key not in self._cache:
            self._cache[key] = self._value_prediction(config)
        return self._cache[key]

    def _value_prediction(self, config: TrialConfig) -> Prediction:
        bound = self.predict(config)
        why = self.uncalibrated_reason(config, bound)
        if why:
            return dataclasses.replace(bound, value_source=VALUE_BOUND, detail=why)
        execution, mapping = whole_execution(self.calibration, config.backend, config.compiler)
        time_s = self.calibration.whole_time_s(bound.rows, config.backend, execution, self.spec.name)
        if not time_s or time_s <= 0:
            return dataclasses.replace(bound, value_source=VALUE_BOUND,
                                       detail=f"no calibrated whole-model time for {config.backend} {execution}")
        # The bound is the fastest the roofs allow: a calibrated time is never below it.
        time_s = max(time_s, bound.time_s)
        # The whole model's power as benchmarks/power_model_validation.py validates it (the layers' duty
        # powers, predict.whole_model_power_w); the CARM operating point's where that cannot be formed.
        power_w = whole_model_power_w(bound.rows, self.profile.power_model, self.calibration, config.backend,
                                      execution, self.spec.name)
        basis = "the predicted whole-model power (layers' duty powers)"
        if power_w is None:
            power_w, basis = bound.power_w, "the power at the CARM operating point"
        energy_j = time_s * power_w if power_w else None
        fit = self.calibration.whole_describe(config.backend, execution, bound.rows, self.spec.name)
        return Prediction(time_s, energy_j, bound.flops, bound.batch_size, SOURCE_CALIBRATED, bound.rows,
                          bound.calibrated_time_s, bound.calibrated_energy_j, VALUE_CALIBRATED,
                          f"{mapping} ({fit}); energy: this time x {basis} ({power_w or 0:.0f} W)")

    def stretched_energy_j(self, config: TrialConfig, time_s: float) -> float | None:
        """The alternative energy of `config` run in `time_s`: P_const * time_s + the dynamic energy of its
        layers' analytic work (the power model's figure for the same work done more slowly)."""
        pm = self.profile.power_model
        if pm is None:
            return None
        try:
            dynamic = sum(pm.dynamic_energy_j(r.flops, r.bytes, r.path, r.level)
                          for r in self.predict(config).rows if r.known and r.predicted_time_s is not None)
        except Exception:   # a path or level the power model lacks
            return None
        return pm.constant_w * time_s + dynamic

    def uncalibrated_reason(self, config: TrialConfig, bound: Prediction | None = None) -> str | None:
        """Why `config` has no calibrated value (None: it has one)."""
        if self.calibration is None:
            return "no calibration (--no-calibration, or none recorded for this GPU)"
        execution, why = whole_execution(self.calibration, config.backend, config.compiler)
        if execution is None:
            return why
        if self.calibration.whole_fit(config.backend, execution) is None:
            return f"the calibration has no {config.backend} {execution} whole-model records"
        bound = bound or self.predict(config)
        missing = [r for r in bound.rows if r.known and r.predicted_time_s is not None
                   and getattr(r, "calibrated_time_s", None) is None]
        quantized = [r for r in missing if r.dtype in QUANTIZED_DTYPE.values()]
        if quantized:
            return (f"{len(quantized)} quantised layer(s) without {quantized[0].dtype} cells in the calibration on "
                    f"{config.backend} (e.g. {quantized[0].name}): the CARM bound on the roof they run on")
        if missing:
            return f"{len(missing)} layer(s) without a calibration on {config.backend} (e.g. {missing[0].name})"
        return None

    def calibrates(self, backend: str, compiler: str) -> bool:
        """Whether the calibration has a whole-model fit for this backend and compiler."""
        execution = whole_execution(self.calibration, backend, compiler)[0]
        return bool(self.calibration is not None and execution
                    and self.calibration.whole_fit(backend, execution) is not None)

    def calibration_note(self, backend: str) -> str | None:
        """Where `backend`'s calibrated values come from when another backend's records stand in for its own
        (calibration.store.with_borrowed), and which of its configurations keep their bound; None otherwise."""
        note = borrowed_note(self.calibration, backend)
        if note is None:
            return None
        bound = [c for b, c in NO_EXECUTION if b == backend]
        return note + "".join(f"; its {c} configurations keep their CARM bound (no calibration)" for c in bound)

    def flops(self, config: TrialConfig) -> float:
        """Analytic FLOPs of one batch (1 multiply-add = 2 FLOPs)."""
        return self.predict(config).flops


def _note_quantized_projections(costs, rows, mode: str) -> None:
    """Say on an attention layer's row (its cost has extra["projection_macs"]) that model.quantize converted its
    query/key/value/output projections (EinsumDense layers inside it), which its cost, as one layer, places at its
    compute dtype."""
    left = {"int8": "their int8 kernels left out of its bytes, which count float weights",
            "float8": "its bytes with their float kernels and float8 scale histories"}[mode]
    for c, r in zip(costs, rows):
        if "projection_macs" in c.extra:
            note = (f"its Q/K/V/output projections are {mode} EinsumDense layers after model.quantize; costed and "
                    f"placed here with the attention at {c.compute_dtype} ({left})")
            r.notes = f"{r.notes}; {note}" if r.notes else note


def profile_origin(profile) -> dict[str, Any]:
    """Where a profile given as load_profile takes it came from: {"from": "embedded", "embedded": name} (None or an
    embedded name), {"from": "file", "path": absolute path}, or {"from": "object"} (a Profile given as such)."""
    if isinstance(profile, Profile):
        return {"from": "object"}
    if profile is None or str(profile) in EMBEDDED:
        return {"from": "embedded", "embedded": DEFAULT_EMBEDDED if profile is None else str(profile)}
    return {"from": "file", "path": os.path.abspath(str(profile))}


def predicted_device(predictor) -> dict[str, Any]:
    """The `device` of a PREDICTED study: nothing was measured ("measured": False, and no "name": that key
    names a device that ran, and readers such as benchmarks/vgg16_tuning.py name result files by it); the profile
    its predictions came from (keys as analyze's report: profile the profile's GPU, source "profile",
    profile_source recorded/measured; profile_from embedded/file/object)."""
    profile = getattr(predictor, "profile", None)
    if profile is None:
        return {"measured": False, "note": "not measured; no profile named"}
    origin = getattr(predictor, "profile_origin", None) or {"from": "object"}
    where = {"embedded": f"the embedded {profile.source} profile of {profile.name} ({origin.get('embedded')})",
             "file": f"the {profile.source} profile of {profile.name} in {origin.get('path')}"}.get(
        origin["from"], f"the {profile.source} profile of {profile.name} (given as a Profile object)")
    return {"source": "profile", "measured": False, "profile": profile.name,
            "profile_source": profile.source, "profile_from": origin["from"], "profile_path": origin.get("path"),
            "profile_embedded": origin.get("embedded"), "note": f"not measured: every figure is predicted from {where}"}


def _layout_key(spec: ModelSpec, layout: str | None) -> str:
    return "own" if spec.keeps_own_layout else str(layout)


def predict_at_sm_clock(prediction: Prediction, profile, sm_clock_mhz: float) -> Prediction:
    """PREDICTED figures of the same configuration asked to run at `sm_clock_mhz`, from the profile's
    DVFS model (carm/dvfs.py: roofs scale with the clock, energy per operation with the voltage curve,
    the power limit lowers the clock it sustains). Never measured: the source says so."""
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
            # the power limit stretched the bound time beyond the roofs' (the row's notes say so)
            "power_limited_before": power_limited(o.notes), "power_limited_after": power_limited(r.notes),
            "source": SOURCE_BOUND,
        })
    changed = [c for c in out if c["bound_before"] != c["bound_after"] or c["path_before"] != c["path_after"]]
    rest = [c for c in out if c not in changed]
    rest.sort(key=lambda c: -abs(math.log(c["speedup"])) if c["speedup"] and c["speedup"] == c["speedup"] else 0)
    changed.sort(key=lambda c: -c["time_per_sample_before_s"])
    return (changed + rest)[:limit]
