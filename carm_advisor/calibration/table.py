"""The calibration table: efficiencies per (backend, layer class, compute dtype, size bucket) learned from measured
layers, the estimate for a layer no cell holds, and the whole-model fits (calibration/whole.py)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from carm_advisor.calibration.policy import (
    CELL_STATISTIC,
    CELL_STATISTICS,
    DISPATCH_OVERLAP_NORM,
    DISPATCHED_EXECUTIONS,
    EAGER_HOST,
    EAGER_HOST_FORMS,
    JIT_FLOOR_BUSY,
    JIT_FUSION,
    JIT_FUSION_FORMS,
    JIT_HOST,
    JIT_HOST_FORMS,
    JIT_OTHER_SHARE,
    JIT_PER_DTYPE,
    JIT_SPLIT_E,
    KIN_DTYPES,
    KIN_DTYPES_OF,
    LAYOUT_COPY_FORM,
    LAYOUT_COPY_FORMS,
    MIN_SAMPLES,
    NEAR_SIZES,
    REPLAYED_EXECUTIONS,
    SIMILAR_CLASS,
    copy_passes_of,
    family,
    layer_class,
    size_bucket,
)
from carm_advisor.calibration.samples import Estimate, Sample, WholeFit, WholeSample
from carm_advisor.calibration.whole import WholeModelFits
from carm_advisor.errors import ProfileError

SCHEMA = "carm-advisor/calibration/1"


@dataclass
class Calibration(WholeModelFits):
    samples: list[Sample] = field(default_factory=list)
    whole: list[WholeSample] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    jit_host: str = JIT_HOST   # JIT_HOST_FORMS: how a jit call's host time meets its GPU time
    jit_other_share: float = JIT_OTHER_SHARE   # the non-matmul layers' share of a compiled model's bound
    jit_fusion: str = JIT_FUSION   # JIT_FUSION_FORMS: which fused layers' traffic a compiled model's bound leaves out
    jit_split_e: bool = JIT_SPLIT_E  # JIT_HOST "max": an efficiency for the matmul-class bound, another for the rest
    jit_floor_busy: bool = JIT_FLOOR_BUSY  # the launch floors count as busy in a jit call's GPU share
    jit_per_dtype: bool = JIT_PER_DTYPE  # a compiled fit over the records of the compute dtype predicted only
    cell_statistic: str = CELL_STATISTIC  # CELL_STATISTICS: a cell's efficiency from its samples
    kin_dtypes: bool = KIN_DTYPES  # a kin dtype's cell of the same size (KIN_DTYPES_OF) before another size
    layout_copy_form: str = LAYOUT_COPY_FORM  # LAYOUT_COPY_FORMS: what one layout copy pass takes
    eager_host: str = EAGER_HOST  # EAGER_HOST_FORMS: a torch eager model's host time per layer call

    def __post_init__(self) -> None:
        if self.jit_host not in JIT_HOST_FORMS:
            raise ValueError(f"jit_host must be one of {JIT_HOST_FORMS}, not {self.jit_host!r}")
        if self.jit_fusion not in JIT_FUSION_FORMS:
            raise ValueError(f"jit_fusion must be one of {JIT_FUSION_FORMS}, not {self.jit_fusion!r}")
        if self.cell_statistic not in CELL_STATISTICS:
            raise ValueError(f"cell_statistic must be one of {CELL_STATISTICS}, not {self.cell_statistic!r}")
        if self.layout_copy_form not in LAYOUT_COPY_FORMS:
            raise ValueError(f"layout_copy_form must be one of {LAYOUT_COPY_FORMS}, not {self.layout_copy_form!r}")
        if self.eager_host not in EAGER_HOST_FORMS:
            raise ValueError(f"eager_host must be one of {EAGER_HOST_FORMS}, not {self.eager_host!r}")
        self._index: dict[tuple, list[Sample]] | None = None
        self._copy_base: "Calibration | None" = None
        self._whole_fits: dict[tuple, WholeFit | None] = {}
        self._floors: dict[tuple, float | None] = {}   # floor_s per (backend, class, executions): the samples do not change

    # ---- layers ------------------------------------------------------------------------------
    def _cells(self) -> dict[tuple, list[Sample]]:
        """(backend, class, dtype, size) -> samples."""
        if self._index is None:
            index: dict[tuple, list[Sample]] = {}
            for s in self.samples:
                if 0 < s.measured_time_s < math.inf and 0 < s.bound_time_s < math.inf:
                    s = self._work_sample(s)
                    index.setdefault(s.keys()[0], []).append(s)
            self._index = index
        return self._index

    # ---- layout copies (LAYOUT_COPY_FORM) ---------------------------------------------------------
    def _copy_pass_time_s(self, backend: str, dtype: str, pass_bound_s: float) -> float:
        """One layout copy pass of CARM bound `pass_bound_s`: the bound ("roof"), or the time the calibration's
        data-movement cell gives it ("data_movement": learned from the samples that carry no copies, so no sample's
        copies feed their own efficiency; the bound where no cell covers it)."""
        if self.layout_copy_form == "roof" or not pass_bound_s > 0:
            return pass_bound_s
        if self._copy_base is None:
            self._copy_base = replace(self, samples=[s for s in self.samples if not s.layout_copy_s],
                                      layout_copy_form="roof")
        found = self._copy_base.estimate(backend, "Permute", dtype, pass_bound_s)
        return found.time_s(pass_bound_s) if found and found.efficiency > 0 else pass_bound_s

    def copies_time_s(self, backend: str, layer_type: str, dtype: str, copy_bound_s: float) -> float:
        """The layout copies around a layer whose copies' CARM bound is `copy_bound_s` (LayerRow.layout_copy_s):
        its passes (layout_copy_passes) each at _copy_pass_time_s."""
        if not copy_bound_s > 0:
            return 0.0
        passes = copy_passes_of(layer_type)
        return passes * self._copy_pass_time_s(backend, dtype, copy_bound_s / passes)

    def _work_sample(self, s: Sample) -> Sample:
        """A sample as its cell learns it: under "data_movement", its measured time has its copies taken off at
        their data-movement time instead of their bound (never below its CARM bound)."""
        if self.layout_copy_form == "roof" or not s.layout_copy_s:
            return s
        extra_s = self.copies_time_s(s.backend, s.layer_class, s.dtype, s.layout_copy_s) - s.layout_copy_s
        return replace(s, measured_time_s=max(s.bound_time_s, s.measured_time_s - extra_s))

    def _buckets(self) -> dict[tuple, list[Sample]]:
        """Every key of every sample (finest to the backend alone) -> its samples (the summary)."""
        out: dict[tuple, list[Sample]] = {}
        for cell in self._cells().values():
            for s in cell:
                for key in s.keys():
                    out.setdefault(key, []).append(s)
        return out

    def _nearest(self, match, size: int, reach: int | None = None) -> tuple | None:
        """The populated cell (>= MIN_SAMPLES) matching `match` nearest in size (ties: the larger),
        at most `reach` size buckets away."""
        found = [k for k, v in self._cells().items() if len(v) >= MIN_SAMPLES and match(k)
                 and (reach is None or abs(k[3] - size) <= reach)]
        return min(found, key=lambda k: (abs(k[3] - size), -k[3])) if found else None

    def _cell_eff(self, cell: list[Sample]) -> float:
        """A cell's efficiency (cell_statistic): the median of its samples', or their summed bound over their
        summed time."""
        if self.cell_statistic == "time_weighted":
            return sum(s.bound_time_s for s in cell) / sum(s.measured_time_s for s in cell)
        return statistics.median(s.efficiency for s in cell)

    def floor_s(self, backend: str, cls: str | None = None,
                executions: Sequence[str] = DISPATCHED_EXECUTIONS) -> float | None:
        """The shortest median time of any populated cell of this backend and class (else of its
        family, matmul or memory-bound) over the samples of `executions`: below it, a layer's time no longer
        shrinks with its bound (a jitted call's dispatch); else of any class of the backend. Only layers timed
        one dispatched call at a time (DISPATCHED_EXECUTIONS) have one for their time: profiled kernel times and
        CUDA-graph replays do not (a replay's floor, replay_floor_s, only says how busy the GPU is)."""
        key = (backend, cls, tuple(executions))
        if key not in self._floors:
            self._floors[key] = self._floor_s(backend, cls, executions)
        return self._floors[key]

    def _floor_s(self, backend: str, cls: str | None, executions: Sequence[str]) -> float | None:
        matches = [lambda k: k[1] == cls, lambda k: family(k[1]) == family(cls)] if cls else []
        for match in (*matches, lambda k: True):
            times = [statistics.median(s.measured_time_s for s in timed) for k, v in self._cells().items()
                     if k[0] == backend and match(k)
                     and len(timed := [s for s in v if s.execution in executions]) >= MIN_SAMPLES]
            if times:
                return min(times)
        return None

    def replay_floor_s(self, backend: str) -> float | None:
        """The host's time per call of a layer replayed alone from a CUDA graph (REPLAYED_EXECUTIONS): the
        shortest median time of any cell of the backend's replays, whatever the class (one graph launch per
        call). A layer whose GPU time is shorter leaves the GPU idle for the rest of each replay
        (carm/power_model.replay_paced_fraction). None where the calibration has no replayed cell."""
        return self.floor_s(backend, None, REPLAYED_EXECUTIONS)

    def backend_ratio(self, backend: str, other: str) -> tuple[float, int] | None:
        """Median of efficiency(backend) / efficiency(other) over the cells both populate, and how many."""
        cells = self._cells()
        ratios = [self._cell_eff(v) / self._cell_eff(cells[(other, *k[1:])])
                  for k, v in cells.items() if k[0] == backend and len(v) >= MIN_SAMPLES
                  and len(cells.get((other, *k[1:]), [])) >= MIN_SAMPLES]
        return (statistics.median(ratios), len(ratios)) if ratios else None

    def estimate(self, backend: str, layer_type: str, dtype: str, bound_time_s: float) -> Estimate | None:
        """The calibration of one layer, from the first of (each needs a cell of >= MIN_SAMPLES):
        1. its own cell (backend, class, dtype, size);
        1b. where kin_dtypes: the same backend, class and size in a dtype of the same Tensor Core rate (KIN_DTYPES_OF);
        2. the same backend, class and dtype, nearest size;
        3. the same backend and class, another dtype, nearest size;
        3b. a similar class (SIMILAR_CLASS: LayerNormalization -> BatchNormalization, ...), this dtype then any;
        4. the same backend, family (matmul or memory-bound) and dtype, then any dtype, nearest size;
        5. another backend's cell as in 1-3, times the backend ratio learned where both have cells;
        6. every sample of the backend pooled (one is enough);
        None: no calibration, the CARM bound stands alone. The floor (floor_s) applies to 1-6."""
        cls = layer_class(layer_type)
        size = size_bucket(bound_time_s)
        cells = self._cells()
        floor = self.floor_s(backend, cls)
        own = (backend, cls, dtype, size)
        if len(cells.get(own, [])) >= MIN_SAMPLES:
            return Estimate(self._cell_eff(cells[own]), own, len(cells[own]), "cell", floor)
        for kin in KIN_DTYPES_OF.get(dtype, ()) if self.kin_dtypes else ():
            key = (backend, cls, kin, size)
            if len(cells.get(key, [])) >= MIN_SAMPLES:
                return Estimate(self._cell_eff(cells[key]), key, len(cells[key]), f"kin dtype {kin}, same size", floor)
        steps = [
            ("nearest size", lambda k: k[:3] == (backend, cls, dtype)),
            ("other dtype", lambda k: k[:2] == (backend, cls)),
            (f"similar class {SIMILAR_CLASS.get(cls)}", lambda k: k[:3] == (backend, SIMILAR_CLASS.get(cls), dtype)),
            (f"similar class {SIMILAR_CLASS.get(cls)}, other dtype", lambda k: k[:2] == (backend, SIMILAR_CLASS.get(cls))),
            ("same family", lambda k: k[0] == backend and k[2] == dtype and family(k[1]) == family(cls)),
            ("same family, other dtype", lambda k: k[0] == backend and family(k[1]) == family(cls)),
        ]
        others = [(o, self.backend_ratio(backend, o)) for o in sorted({k[0] for k in cells} - {backend})]
        for reach in (NEAR_SIZES, None):   # a cell within a decade of this size first, then any size
            for source, match in steps:
                key = self._nearest(match, size, reach)
                if key is not None:
                    return Estimate(self._cell_eff(cells[key]), key, len(cells[key]), source, floor)
            for other, ratio in others:
                for source, match in steps[:2] if ratio else ():
                    key = self._nearest(lambda k, m=match: k[0] == other and m((backend, *k[1:])), size, reach)
                    if key is not None:
                        return Estimate(self._cell_eff(cells[key]) * ratio[0], key, len(cells[key]),
                                        f"{other} {source} x {backend}/{other} ratio {ratio[0]:.2f} over {ratio[1]} cells",
                                        floor)
        pooled = [s for k, v in cells.items() if k[0] == backend for s in v]
        if pooled:
            return Estimate(self._cell_eff(pooled), (backend,), len(pooled), "backend pooled", floor)
        return None

    def _estimate_row(self, row, backend: str | None) -> Estimate | None:
        bound = getattr(row, "predicted_time_s", None)
        return self.estimate(backend or "", row.type, row.dtype, bound) if bound else None

    def efficiency(self, row, backend: str | None) -> float | None:
        """The predictor's seam (predict.Calibration): a LayerRow-like row (type, dtype, bound time in
        predicted_time_s) -> efficiency (the floor included), or None where nothing calibrates it. A layer
        the backend times one dispatched call at a time: its bound / dispatched_time_s where that is known."""
        found = self._estimate_row(row, backend)
        if not (found and found.efficiency > 0):
            return None
        wall = self.dispatched_time_s(row.type, row.predicted_time_s, backend or "", row.dtype, found.floor_s)
        return row.predicted_time_s / wall if wall else found.effective_efficiency(row.predicted_time_s)

    def dispatched_time_s(self, layer_type: str, bound_time_s: float | None, backend: str, dtype: str | None,
                          host_s: float | None, norm: float | None = None) -> float | None:
        """The wall time per call of a layer dispatched alone from the host (DISPATCHED_EXECUTIONS: jax, each
        layer jitted alone): the GPU's time as the compiled model runs it (in_model_time_s) and the host's
        time per call (`host_s`: the class's floor, floor_s), which overlap (asynchronous dispatch):
        (gpu ** p + host ** p) ** (1 / p), p = `norm` (default DISPATCH_OVERLAP_NORM; inf: the larger). None
        where either is unknown (the layer's cell efficiency then stands)."""
        if not host_s or not bound_time_s:
            return None
        gpu = self.in_model_time_s(layer_type, bound_time_s, backend, DISPATCHED_EXECUTIONS[0], dtype)
        if not gpu:
            return None
        p = DISPATCH_OVERLAP_NORM if norm is None else norm
        return max(gpu, host_s) if math.isinf(p) else (gpu ** p + host_s ** p) ** (1 / p)

    def describe(self, row, backend: str | None) -> str:
        """Which key, how many samples and which fallback calibrate this row ("none": the bound stands alone)."""
        found = self._estimate_row(row, backend)
        if not found:
            return "none"
        if self.dispatched_time_s(row.type, row.predicted_time_s, backend or "", row.dtype, found.floor_s):
            return (f"dispatched alone: in-model GPU time ({self.whole_describe(backend or '', DISPATCHED_EXECUTIONS[0])})"
                    f" with the host's {found.floor_s * 1e6:.1f} us per call (floor of {found.key[1] if len(found.key) > 1 else 'the backend'})")
        return found.label

    # ---- whole model -----------------------------------------------------------------------

    # ---- combining and saving --------------------------------------------------------------
    def extended(self, other: "Calibration") -> "Calibration":
        return replace(self, samples=self.samples + other.samples, whole=self.whole + other.whole,
                       provenance={**self.provenance, "extended_with": other.provenance})

    def without_model(self, model: str) -> "Calibration":
        """Every sample but those of `model`: leave-one-model-out evaluation."""
        return replace(self, samples=[s for s in self.samples if s.model != model],
                       whole=[w for w in self.whole if w.model != model], provenance={**self.provenance, "left_out": model})

    def with_models(self, models: Iterable[str]) -> "Calibration":
        """Only the samples of `models`: a calibration fitted on these, to predict the others (held out)."""
        keep = set(models)
        return replace(self, samples=[s for s in self.samples if s.model in keep],
                       whole=[w for w in self.whole if w.model in keep],
                       provenance={**self.provenance, "fitted_on": sorted(keep)})

    def summary(self) -> dict[str, Any]:
        """Per key: the efficiency a cell of those samples gives (cell_statistic), their median efficiency and count
        (what a reader checks; the samples are the truth)."""
        return {"/".join(str(k) for k in key): {"efficiency": self._cell_eff(v),
                                                "median_efficiency": statistics.median(s.efficiency for s in v),
                                                "n": len(v)}
                for key, v in sorted(self._buckets().items(), key=lambda kv: str(kv[0]))}

    def to_dict(self) -> dict[str, Any]:
        # cell_statistic says what the buckets' "efficiency" is; loading takes the product's (CELL_STATISTIC): a model
        # choice, not data
        return {"schema": SCHEMA, "provenance": self.provenance, "cell_statistic": self.cell_statistic,
                "sample_fields": list(SAMPLE_FIELDS), "buckets": self.summary(),
                "samples": [_sample_dict(s) for s in self.samples], "whole": [asdict(w) for w in self.whole]}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: Any, origin: str = "calibration") -> "Calibration":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ProfileError(f"Expected schema '{SCHEMA}' in {origin}, Received: "
                               f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r}")
        try:
            samples = [Sample(**s) for s in data.get("samples", [])]
            whole = [WholeSample(**w) for w in data.get("whole", [])]
        except TypeError as exc:
            raise ProfileError(f"Expected calibration samples in {origin}, Received: {exc}") from None
        return cls(samples, whole, dict(data.get("provenance") or {}))

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        return cls.from_dict(read_json(path), str(path))


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileError(f"Expected a readable calibration JSON, Received: {path} ({exc})") from None


# What a file written by this code says its samples hold (to_dict's "sample_fields"): "layout_copy_s" marks samples
# that carry the layout copies' bound they had taken off (0 where none). A file without it may come from code before
# that field (884efc0), whose torch convolution and pooling samples hold their copies in an unknown way.
SAMPLE_FIELDS = ("layout_copy_s",)


def _sample_dict(s: Sample) -> dict[str, Any]:
    """A sample as saved: layout_copy_s only where the sample had copies taken off (older files round-trip)."""
    d = asdict(s)
    if not d["layout_copy_s"]:
        del d["layout_copy_s"]
    return d
