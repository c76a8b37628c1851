"""What a calibration learns from: one measured layer (Sample) or whole model (WholeSample) against its CARM
bound, taken from a measured run's rows; and what it gives back (Estimate, WholeFit)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from carm_advisor.calibration.policy import MATMUL_CLASSES, is_kernel, layer_class, size_bucket


@dataclass(frozen=True)
class Sample:
    """One measured layer against its CARM bound."""

    backend: str
    layer_class: str
    dtype: str
    bound_time_s: float
    measured_time_s: float
    model: str = ""
    layer: str = ""
    execution: str = ""
    layout_copy_s: float = 0.0   # the layout copies' CARM bound already taken off measured_time_s

    @property
    def efficiency(self) -> float:
        return self.bound_time_s / self.measured_time_s

    def keys(self) -> list[tuple]:
        """Finest first."""
        return [(self.backend, self.layer_class, self.dtype, size_bucket(self.bound_time_s)),
                (self.backend, self.layer_class, self.dtype), (self.backend, self.layer_class), (self.backend,)]


@dataclass(frozen=True)
class WholeSample:
    """One whole-model measurement against the layers' measured sums (matmul-class and the rest)."""

    backend: str
    execution: str            # "cuda_graph" | "jit" | "eager"
    time_s: float
    matmul_sum_s: float
    other_sum_s: float
    layer_calls: int
    model: str = ""
    matmul_calls: int = 0                 # how many of layer_calls are matmul-class
    graph_time_s: float | None = None     # eager: the same record's CUDA-graph time (the GPU's work alone)
    dtype: str = ""                       # the layers' compute dtype (the most common)
    matmul_bound_s: float | None = None   # CARM bounds summed over every known layer (measured or not)
    other_bound_s: float | None = None
    batch_size: int = 0                   # (0: not recorded, older files)
    layout: str = ""
    source: str = ""                      # "": a RunMeasurement record; "study FILE#TRIAL": a measured tuning trial
    kernel_calls: int = 0                 # known layers that are kernels of their own when compiled (is_kernel)
    bounded_calls: int = 0                # known layers with a CARM bound: the calls a compiled prediction counts
                                          # (whole_time_s); 0 in samples written before it (layer_calls stands)

    @property
    def compiled_calls(self) -> int:
        """The layer calls of a compiled (jit) call, as whole_time_s counts them for a prediction."""
        return self.bounded_calls or self.layer_calls

    @property
    def has_layer_sums(self) -> bool:
        """Whether the layers were measured too (tuning trials measure the whole model only)."""
        return self.matmul_sum_s + self.other_sum_s > 0


@dataclass(frozen=True)
class Estimate:
    """Where a layer's calibration comes from: the cell's efficiency (its calibration's cell_statistic), its key and sample count,
    how it was found (`source`), and the per-call floor (the shortest time layers of this class were
    measured to take, whatever their bound) under which no calibrated time goes."""

    efficiency: float
    key: tuple
    n: int
    source: str = "cell"
    floor_s: float | None = None

    def time_s(self, bound_time_s: float) -> float:
        """Calibrated time: bound / efficiency (never below the bound), and never below the floor."""
        t = bound_time_s / min(self.efficiency, 1.0)
        return max(t, self.floor_s) if self.floor_s else t

    def effective_efficiency(self, bound_time_s: float) -> float:
        return bound_time_s / self.time_s(bound_time_s)

    @property
    def label(self) -> str:
        floor = f", floor {self.floor_s * 1e6:.1f} us" if self.floor_s else ""
        return f"{'/'.join(str(k) for k in self.key)} (n={self.n}; {self.source}{floor})"


@dataclass(frozen=True)
class WholeFit:
    """whole = max(matmul_factor * matmul + other_factor * other, host_per_call_s * calls), where the
    sums are of calibrated layer times less `layer_floor_s` per call and the host term only exists for
    eager execution. jit: the sums are of the layers' CARM bounds (bound_efficiency set)."""

    matmul_factor: float
    other_factor: float
    dispatch_per_call_s: float | None     # host (Python dispatch) time per layer call; eager only
    n: int
    layer_floor_s: float = 0.0
    source: str = ""
    bound_efficiency: float | None = None   # compiled: whole = CARM bound / this
    fixed_s: float = 0.0                    # compiled, a batch series' fixed cost per call added to the above
    kernel_floor_s: float = 0.0             # jit: a cost per kernel (is_kernel) added to the above
    host_per_layer_s: float | None = None   # jit: whole = max(layer calls x this, the above)

    def compiled_time_s(self, matmul_bound_s: float, other_bound_s: float, kernels: int, calls: int) -> tuple[float, float]:
        """A compiled fit's (GPU time, whole time) of a call from its CARM bounds: fixed cost + factors x bounds +
        kernels x floor; the whole the larger of that and calls x the host time per layer call where the fit has
        one."""
        gpu = (self.fixed_s + self.matmul_factor * matmul_bound_s + self.other_factor * other_bound_s
               + self.kernel_floor_s * kernels)
        return gpu, (max(gpu, self.host_per_layer_s * calls) if self.host_per_layer_s else gpu)


def samples_from_rows(rows: Iterable, backend: str, model: str, execution: str = "") -> list[Sample]:
    """Measured rows (bound in predicted_time_s, measurement in time_s less its layout copies, timed as
    `execution`) -> samples."""
    return [
        Sample(backend, layer_class(r.type), r.dtype, r.predicted_time_s, _work_time_s(r), model, r.name, execution,
               _copy_bound_taken_off_s(r))
        for r in rows
        if r.known and r.measured and r.time_s and r.predicted_time_s
    ]


def _copy_bound_taken_off_s(row) -> float:
    """The part of a measured layer's layout copies' bound that _work_time_s takes off its time (0: none)."""
    copy_s = getattr(row, "layout_copy_s", 0.0)
    return min(copy_s, row.time_s - row.predicted_time_s) if copy_s and row.time_s > row.predicted_time_s else 0.0


def _work_time_s(row) -> float:
    """A measured layer's time without its layout copies' bound (never below its CARM bound): what its efficiency is
    learned from (the calibration takes the copies off at its own data-movement time, Calibration._work_sample)."""
    copy_s = getattr(row, "layout_copy_s", 0.0)
    return max(row.time_s - copy_s, row.predicted_time_s) if copy_s else row.time_s


def rows_dtype(rows: Sequence) -> str:
    """The most common compute dtype of the known rows ("" without any)."""
    kinds = [r.dtype for r in rows if getattr(r, "known", True) and getattr(r, "dtype", None)]
    return max(set(kinds), key=kinds.count) if kinds else ""


def bounded_rows(rows: Sequence) -> list:
    """The known rows that have a CARM bound (predicted_time_s)."""
    return [r for r in rows if getattr(r, "known", True) and getattr(r, "predicted_time_s", None)]


def bound_sums(rows: Sequence) -> tuple[float, float]:
    """CARM bounds summed over the known rows: matmul-class, the rest."""
    known = bounded_rows(rows)
    return (sum(r.predicted_time_s for r in known if r.type in MATMUL_CLASSES),
            sum(r.predicted_time_s for r in known if r.type not in MATMUL_CLASSES))


def kernel_calls(rows: Sequence) -> int:
    """How many known rows run as kernels of their own when compiled (is_kernel)."""
    return sum(1 for r in bounded_rows(rows) if is_kernel(r.type))


def whole_from_run(run, rows: Sequence, model: str) -> list[WholeSample]:
    """The record's whole-model figures against its measured layer sums. A whole-model-only record (no
    layer measured) gives samples with zero layer sums over every known row, as a tuning trial does
    (whole_from_studies): the jit and torch.compile fits use them, the eager and cuda_graph fits skip them."""
    measured = [r for r in rows if r.known and r.measured and r.time_s]
    if measured:
        mm = sum(r.time_s for r in measured if r.type in MATMUL_CLASSES)
        other = sum(r.time_s for r in measured if r.type not in MATMUL_CLASSES)
    else:
        measured = bounded_rows(rows)
        mm = other = 0.0
    n_mm = sum(1 for r in measured if r.type in MATMUL_CLASSES)
    graph = run.inference_graph.time_s if run.inference_graph is not None and run.inference_graph.time_s else None
    out = []
    for m in (run.inference, run.inference_graph):
        if m is not None and m.time_s:
            out.append(WholeSample(run.backend, m.execution, m.time_s, mm, other, len(measured), model, n_mm,
                                   graph if m.execution == "eager" else None, rows_dtype(rows), *bound_sums(rows),
                                   run.batch_size, run.layout, "", kernel_calls(rows), len(bounded_rows(rows))))
    return out


def layer_execution(run) -> str:
    """How the run's layers were timed (the most common execution among them; "" without layers)."""
    kinds = [m.execution for m in run.layers]
    return max(set(kinds), key=kinds.count) if kinds else ""


def layers_valid(run) -> bool:
    """Whether the run's per-layer times are the layers' at the model's precision (RunMeasurement.
    jit_layers_in_policy_dtype: jax mixed-precision records traced before the autocast fix timed float32
    layers); its whole-model figures count either way."""
    return bool(getattr(run, "jit_layers_in_policy_dtype", True))


def less_floor(matmul_s: float, other_s: float, matmul_calls: int, calls: int, floor_s: float) -> tuple[float, float]:
    """Layer-time sums less `floor_s` per call (never below zero)."""
    return max(matmul_s - matmul_calls * floor_s, 0.0), max(other_s - (calls - matmul_calls) * floor_s, 0.0)
