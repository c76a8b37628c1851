"""The predictor: a Keras model's layer costs placed on a profile's CARM, with predicted time and energy.

    predictor = Predictor.for_backend(load_profile(), "torch")   # or Predictor(profile, math_mode, ...)
    rows = predictor.rows(model, batch_size=64, dtype="bfloat16")

Every time it predicts is the CARM bound (the roofs, stretched where the power limit forbids running
that fast). A calibration (measured efficiency factors) may be laid over it: rows then carry the bound
and the calibrated figure side by side, never one in place of the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from carm_advisor.calibration import DISPATCHED_EXECUTIONS, kernel_calls, rows_dtype
from carm_advisor.calibration import policy as calibration_policy
from carm_advisor.carm.dvfs import predicted_time_energy
from carm_advisor.carm.placement import (
    DEFAULT_MATH_MODE,
    QUANTIZED_DTYPE,
    available_path,
    compute_path_for,
    memory_level_for,
    missing_roof_note,
    quantized_placement,
)
from carm_advisor.carm.power_model import host_paced_fraction
from carm_advisor.mapping import map_model
from carm_advisor.mapping.registry import dtype_bytes_of, elems
from carm_advisor.mapping.types import OP_MATMUL, LayerCost
from carm_advisor.profiles.profile import Profile, load_profile
from carm_advisor.results import LayerRow


class Calibration(Protocol):
    """Measured efficiency factors over the CARM bound (calibration.Calibration is one)."""

    def efficiency(self, row: LayerRow, backend: str | None) -> float | None:
        """Bound / achieved time for this layer on this backend, in (0, 1]; None where nothing calibrates it."""


def compute_path(cost: LayerCost, math_mode: dict[str, str], available: set[str] | None = None,
                 backend: str | None = None) -> str:
    """The compute roof a layer's dominant work runs on: a quantised layer's (its cost's extra["quantization_mode"])
    where `backend` runs it (quantized_path), any other's at its compute dtype."""
    if cost.extra.get("quantization_mode") and cost.op_class == OP_MATMUL:
        return available_path(quantized_path(cost, math_mode, backend)[0], available)
    on_tensor_cores = cost.tensor_core and cost.op_class == OP_MATMUL
    return compute_path_for(cost.compute_dtype, on_tensor_cores, cost.type, math_mode, available)


def quantized_path(cost: LayerCost, math_mode: dict[str, str], backend: str | None) -> tuple[str, str]:
    """(compute path, note) of a quantised matmul layer on `backend`: carm.placement.QUANTIZED_PATHS, one table
    with the provenance of each entry; the note says where the layer falls back to a float path."""
    units = cost.output_shapes[0][-1] if cost.output_shapes and cost.output_shapes[0] else None
    return quantized_placement(backend, cost.extra["quantization_mode"], cost.type, cost.compute_dtype, math_mode,
                               cost.input_shapes[0] if cost.input_shapes else None, units)


def memory_level(cost: LayerCost, l2_usable_bytes: int) -> str:
    """HBM unless the layer's whole working set fits in the usable L2 (its inputs were just written there)."""
    return memory_level_for(cost.bytes, l2_usable_bytes)


def resolve_math_mode(backend: str, measured: dict | None = None) -> dict[str, str]:
    """What float32 convolutions and matmuls run as: what a run measured, else the backend's default."""
    if measured:
        return dict(measured)
    return dict(DEFAULT_MATH_MODE.get(backend, DEFAULT_MATH_MODE["numpy"]))


class Predictor:
    """Layer rows with CARM-predicted bound, time and energy for one profile and one float32 math mode.

    profile: a Profile, or a name/path for load_profile (None: the embedded default). math_mode: what
    float32 convolutions and matmuls run as ({"conv": "tf32"|"fp32", "matmul": ...}; resolve_math_mode
    gives a backend's default). backend: the Keras backend the prediction is for (handed to the
    calibration). calibration: measured efficiency factors; None predicts the pure CARM bound.
    strict: an unmapped layer raises instead of becoming an unknown row.
    """

    def __init__(
        self,
        profile: Profile | str | None,
        math_mode: dict[str, str],
        *,
        backend: str | None = None,
        calibration: Calibration | None = None,
        strict: bool = False,
    ) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.math_mode = dict(math_mode)
        self.backend = backend
        self.calibration = calibration
        self.strict = strict

    @classmethod
    def for_backend(
        cls, profile: Profile | str | None, backend: str, *, calibration: Calibration | None = None, strict: bool = False
    ) -> Predictor:
        """A predictor with the backend's default float32 math mode (its flags as shipped)."""
        return cls(profile, resolve_math_mode(backend), backend=backend, calibration=calibration, strict=strict)

    def rows(self, model: Any, batch_size: int = 1, dtype: str | Mapping[str, str] | None = None) -> list[LayerRow]:
        """Map a built Keras model at `batch_size` (compute dtype `dtype`: map_model's compute_dtype, None: each
        layer's policy) and place it."""
        return self.rows_for_costs(map_model(model, batch_size=batch_size, strict=self.strict, compute_dtype=dtype))

    def for_model(self, model: Any, batch_size: int = 1,
                  dtype: str | Mapping[str, str] | None = None) -> ModelPredictor:
        """This predictor held to one model and configuration, for what-if predictions around it."""
        return ModelPredictor(self, model, batch_size, dtype)

    def rows_for_costs(self, costs: list[LayerCost]) -> list[LayerRow]:
        """Place each layer's analytic cost on the profile's CARM and predict its time and energy."""
        carm = self.profile.carm()
        paths = set(carm.peak_flops_per_s)
        pm = self.profile.power_model
        l2 = self.profile.l2_usable_bytes
        levels = set(carm.bandwidth_bytes_per_s)
        rows = []
        for c in costs:
            path = compute_path(c, self.math_mode, paths, self.backend)
            # the roof the work runs on, whether the profile has it or not
            wanted = compute_path(c, self.math_mode, None, self.backend)
            level = memory_level(c, l2)
            if level not in levels:   # the slowest slope the profile has: the safe upper bound
                level = min(levels, key=lambda m: carm.bandwidth_bytes_per_s[m])
            mode = c.extra.get("quantization_mode")
            placed = quantized_path(c, self.math_mode, self.backend)[1] if mode and c.op_class == OP_MATMUL else ""
            weight_bytes = c.extra.get("weight_bytes", c.params * dtype_bytes_of(c.compute_dtype))
            row = LayerRow(
                name=c.name, type=c.type, dtype=QUANTIZED_DTYPE.get(mode, c.compute_dtype), flops=c.flops,
                bytes=c.bytes, ai=c.ai, ai_source="analytic", path=path, level=level, bound="unknown",
                attainable_flops_per_s=None, predicted_time_s=None, predicted_energy_j=None,
                tensor_core=c.tensor_core, known=c.known,
                notes="; ".join(n for n in (c.notes, placed, missing_roof_note(wanted, path) if path != wanted else "")
                                if n),
                channels=_channels(c), analytic_ai=c.ai,
                input_bytes=max(0, c.bytes_read - weight_bytes) if c.known else 0,
                output_elements=sum(elems(s) for s in c.output_shapes if s and all(d for d in s)),
            )
            copy_bytes = calibration_policy.layout_copy_bytes(self.backend, c.type, c.extra.get("data_format"),
                                                             row.input_bytes)
            if copy_bytes and level in carm.bandwidth_bytes_per_s:
                row.layout_copy_s = copy_bytes / carm.bandwidth_bytes_per_s[level]
            if c.known and (c.flops or c.bytes):
                roof_time = carm.time_s(c.flops, c.bytes, path, level)
                time_s = roof_time
                if pm is not None and path in pm.joules_per_flop and level in pm.joules_per_byte:
                    time_s, row.predicted_energy_j = predicted_time_energy(carm, pm, c.flops, c.bytes, path, level)
                    row.predicted_power_w = row.predicted_energy_j / time_s if time_s > 0 else None
                # The CARM bound: the roofs' time alone. The profile's launch floor (host launch + sync of one
                # call) is no floor for a layer inside a model, whose kernels queue behind each other: on the
                # H100 it was 35.6 us where 62% of the profiled in-model layers took less, and a calibration
                # only slows a bound down. What small layers take is the calibration's (measured) business.
                row.predicted_time_s = time_s
                if c.flops and c.bytes:
                    placement = carm.place(c.ai, path, level)
                    row.bound = placement.bound
                    row.attainable_flops_per_s = placement.attainable_flops_per_s
                elif c.flops:        # no memory traffic at all: only the compute roof limits it
                    row.bound, row.attainable_flops_per_s = f"compute:{path}", carm.peak_flops_per_s[path]
                else:                # pure data movement
                    row.bound, row.attainable_flops_per_s = f"memory:{level}", 0.0
                if time_s > roof_time * 1.0001:
                    row.notes = (row.notes + "; " if row.notes else "") + "slowed by the power limit (predicted)"
            elif c.known:
                row.bound = "none"
            row.predicted_bound = row.bound
            if self.calibration is not None:
                self.calibrate(row)
            rows.append(row)
        return rows

    def calibrate(self, row: LayerRow) -> None:
        """Lay the calibration over one row with a bound (its calibrated time, energy and, where the
        calibration can say which samples it used, `row.calibration`)."""
        row.calibrated_time_s = row.calibrated_energy_j = None
        if row.predicted_time_s is None or self.calibration is None:
            return
        if row.dtype in QUANTIZED_DTYPE.values() and not self._has_own_cells(row):
            # a quantised layer runs other kernels than any float layer: no other dtype's cells stand in for it
            row.calibration = f"none: no {row.dtype} cells on {self.backend} (a quantised layer keeps its bound)"
            return
        describe = getattr(self.calibration, "describe", None)
        row.calibration = describe(row, self.backend) if describe else ""
        efficiency = self.calibration.efficiency(row, self.backend)
        if efficiency is None:
            return
        if not efficiency > 0:
            raise ValueError(f"Expected a calibration efficiency > 0, Received: {efficiency!r} for layer '{row.name}'")
        # The bound is the fastest the roofs allow: a calibration may slow a layer down, never speed it up.
        row.calibrated_time_s = row.predicted_time_s / min(efficiency, 1.0)
        if getattr(row, "layout_copy_s", 0.0):   # the backend's layout copies, as the calibration counts them
            row.layout_copy_calibrated_s = layout_copies_time_s(row, self.calibration, self.backend)
            row.calibrated_time_s += row.layout_copy_calibrated_s
        pm = self.profile.power_model
        busy_w, bound_s = busy_and_bound(row)
        if busy_w is not None and pm is not None:
            # The power at the layer's CARM operating point (its busy power), scaled above the constant
            # power by the profile's duty curve (PowerModel.duty_power_w; the busy power itself without a
            # curve) at the calibrated time and the layer's CARM bound time (bound_s, before the launch
            # floor: the efficiency form), over the calibrated time. The GPU-paced form for every backend:
            # a user's jitted or CUDA-graph model leaves no host gap between its layers (the host-paced form
            # is only the validation's, for jax layers measured jitted alone). Validated per layer and whole
            # model by carm_advisor/validation (whole models: whole_model_power_w below, jit ones at the
            # layers' in-model GPU times); the power at the work's rates over the calibrated time misses real
            # layers (carm/power_model.py).
            power_w = pm.duty_power_w(busy_w, row.calibrated_time_s, bound_time_s=bound_s,
                                      output_elements=row.output_elements, path=row.path)
            row.calibrated_energy_j = power_w * row.calibrated_time_s


    def _has_own_cells(self, row: LayerRow) -> bool:
        """Whether the calibration calibrates `row` from cells of its own dtype (Calibration.estimate's key: backend,
        class, dtype, size), not from another dtype's or a pooled fallback."""
        estimate = getattr(self.calibration, "estimate", None)
        if estimate is None:
            return False
        found = estimate(self.backend or "", row.type, row.dtype, row.predicted_time_s)
        return found is not None and len(found.key) > 2 and found.key[2] == row.dtype


def layout_copies_time_s(row, calibration, backend: str | None) -> float:
    """The time of the layout copies around a row (LayerRow.layout_copy_s, their CARM bound): as its calibration
    counts them (Calibration.copies_time_s: at its data-movement efficiency), the bound for a calibration without
    that seam."""
    copy_s = getattr(row, "layout_copy_s", 0.0)
    if not copy_s:
        return 0.0
    copies = getattr(calibration, "copies_time_s", None)
    return copies(backend or "", row.type, row.dtype, copy_s) if copies is not None else copy_s


def busy_and_bound(row) -> tuple[float | None, float | None]:
    """A row's busy power, the power at its CARM operating point (predicted_power_w, else its predicted
    energy / predicted time), and its CARM bound time before the launch floor (predicted energy / busy
    power, what the duty curve's efficiency form divides by); None for what the row cannot give."""
    busy_w = getattr(row, "predicted_power_w", None)
    if busy_w is None and row.predicted_energy_j is not None and row.predicted_time_s:
        busy_w = row.predicted_energy_j / row.predicted_time_s
    bound_s = row.predicted_energy_j / busy_w if busy_w and busy_w > 0 and row.predicted_energy_j else None
    return busy_w, bound_s


def whole_model_layer_times(rows, calibration, backend: str, execution: str, model: str | None = None):
    """Which time each layer of a whole model runs for, as the validated whole-model power takes it
    (benchmarks/power_model_validation.py): ([(row, time_s)], gpu_share). Compiled jit models (calibration.
    DISPATCHED_EXECUTIONS): the layers' in-model GPU times (Calibration.in_model_time_s; every layer at its
    calibrated time, each jitted alone, where the calibration has none, and a layer without one left out);
    else their calibrated times. Host-paced executions (torch
    eager): gpu_share = the calibrated CUDA-graph time / the calibrated eager time (host_paced_fraction);
    compiled ones whose fit has a host term (jit): Calibration.compiled_gpu_share;
    else 1. Rows with no work or no calibrated time are left out."""
    working = [r for r in rows if r.known and (r.flops or r.bytes) and getattr(r, "calibrated_time_s", None)]
    times = [(r, r.calibrated_time_s) for r in working]
    in_model_time_s = getattr(calibration, "in_model_time_s", None)   # a calibration without in-model times
    if execution in DISPATCHED_EXECUTIONS and in_model_time_s is not None:
        # the fit of this model's whole time (its own records first), as compiled_gpu_share takes it
        dtype, kernels = rows_dtype(rows), kernel_calls(rows)
        in_model = [(r, in_model_time_s(r.type, r.predicted_time_s, backend, execution, dtype, model, kernels))
                    for r in working]
        in_model = [(r, t) for r, t in in_model if t]
        times = in_model or times
    share = 1.0
    if execution in HOST_PACED_WHOLE:
        share = host_paced_fraction(calibration.whole_time_s(rows, backend, "cuda_graph"),
                                    calibration.whole_time_s(rows, backend, execution, model))
    elif getattr(calibration, "compiled_gpu_share", None) is not None:
        share = calibration.compiled_gpu_share(rows, backend, execution, model)
    return times, share


def whole_batch_range(calibration, backend: str, execution: str) -> tuple[int, int] | None:
    """(smallest, largest) batch size of the calibration's whole-model records of this backend and execution
    (what its whole-model fit was made from; records that did not note their batch size are left out), or
    None where it has no such record."""
    sizes = [int(w.batch_size) for w in getattr(calibration, "whole", None) or []
             if getattr(w, "backend", None) == backend and getattr(w, "execution", None) == execution
             and getattr(w, "time_s", 0) > 0 and (getattr(w, "batch_size", 0) or 0) > 0]
    return (min(sizes), max(sizes)) if sizes else None


# Whole-model executions the host can pace (a Python dispatch per layer call): torch eager.
HOST_PACED_WHOLE = ("eager",)


def whole_model_power_w(rows, power_model, calibration, backend: str, execution: str,
                        model: str | None = None) -> float | None:
    """The whole model's predicted board power (the validated headline of benchmarks/power_model_validation.py):
    the layers' busy powers scaled by the power model's duty curve at the times whole_model_layer_times gives,
    time-weighted, the GPU's share of a host-paced call applied. None without a power model, a calibration
    or layers with a busy power."""
    if power_model is None or calibration is None:
        return None
    times, share = whole_model_layer_times(rows, calibration, backend, execution, model)
    layers = [(busy_w, bound_s, t, getattr(r, "output_elements", None), getattr(r, "path", None))
              for r, t in times for busy_w, bound_s in [busy_and_bound(r)] if bound_s]
    return power_model.mean_duty_power_w(layers, share) if layers else None


class ModelPredictor:
    """A Predictor held to one model at one batch size and dtype; `rows` re-predicts with one of them changed."""

    def __init__(self, predictor: Predictor, model: Any, batch_size: int = 1,
                 dtype: str | Mapping[str, str] | None = None) -> None:
        self.predictor, self.model, self.batch_size, self.dtype = predictor, model, batch_size, dtype

    def rows(self, batch_size: int | None = None, dtype: str | None = None) -> list[LayerRow]:
        """Rows at `batch_size` and `dtype`; None keeps the configuration this was made for. A what-if `dtype` is
        the compute dtype of the layers under the model's own policy, as a rebuild under another policy runs:
        layers pinned to another policy (a float32 output layer) keep theirs."""
        if dtype is not None:
            from carm_advisor.models.builder import model_policy

            dtype = {model_policy(self.model): dtype}
        return self.predictor.rows(
            self.model, self.batch_size if batch_size is None else batch_size, self.dtype if dtype is None else dtype
        )


def _channels(c: LayerCost) -> tuple[int, ...]:
    """(input, output) channels of a matmul-class layer, for Tensor Core tile alignment."""
    if c.op_class != OP_MATMUL or not c.input_shapes or not c.output_shapes:
        return ()
    if "in_channels" in c.extra and "out_channels" in c.extra:
        return (int(c.extra["in_channels"]), int(c.extra["out_channels"]))
    first = c.extra.get("data_format") == "channels_first" and len(c.input_shapes[0]) > 2
    axis = 1 if first else -1
    try:
        return (int(c.input_shapes[0][axis]), int(c.output_shapes[0][axis]))
    except (IndexError, TypeError):
        return ()


def apply_calibration(rows: Iterable, calibration: Calibration | None, backend: str, profile=None) -> None:
    """Lay `calibration` over rows already predicted (and perhaps measured), as predict.Predictor does
    when it predicts them: re-calibrating the same rows with another calibration (leave one model out)."""
    predictor = Predictor(profile, {}, backend=backend, calibration=calibration)
    for row in rows:
        predictor.calibrate(row)
