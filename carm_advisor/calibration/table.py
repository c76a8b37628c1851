"""The calibration table: efficiencies per (backend, layer class, compute dtype, size bucket) learned from measured
layers, the estimate for a layer no cell holds, and the whole-model fits (calibration/whole.py)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from carm_advisor.calibration.policy import (
    DISPATCH_OVERLAP_NORM,
    DISPATCHED_EXECUTIONS,
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
CELL_EFFICIENCY = "time_weighted"   # what to_dict's buckets call "efficiency": summed bound / summed time
# Whole-model fields the shipped files hold and no fit reads (what XLA's fusion of the non-matmul layers would take
# off their bound): left out on loading. Taking it off predicted jit whole-model time at 11.0-34.5% against 10.2%
# with every layer's bound (n=88; nvidia-h200-power-model-jit-gpu-time-2026-12-04.json.xz, validation.jit_gpu_choice).
UNREAD_WHOLE_FIELDS = frozenset({"fused_other_bound_s", "chained_other_bound_s"})


@dataclass
class Calibration(WholeModelFits):
    samples: list[Sample] = field(default_factory=list)
    whole: list[WholeSample] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index: dict[tuple, list[Sample]] | None = None
        self._copy_base: Calibration | None = None
        self._whole_fits: dict[tuple, WholeFit | None] = {}
        self._floors: dict[tuple, float | None] = {}   # floor_s per (backend, class, executions): the samples do not change

    # ---- layers ------------------------------------------------------------------------------
    def _cells(self) -> dict[tuple, list[Sample]]:
        """(backend, class, dtype, size) -> samples."""
        if self._index is None:
            index: dict[tuple, list[Sample]] = {}
            for s in self.samples:
                if 0 < s.measured_time_s < math.inf and 0 < s.bound_time_s < math.inf:
                    # a sample keeps the class it was learned under; a class pooled since (LayerNormalization is a
                    # "normalization") is read as it is pooled now
                    s = self._work_sample(replace(s, layer_class=layer_class(s.layer_class)))
                    index.setdefault(s.keys()[0], []).append(s)
            self._index = index
        return self._index

    # ---- layout copies ------------------------------------------------------------------------
    # One copy pass takes its CARM bound over the efficiency the calibration learned for the backend's pure data
    # movement (ZeroPadding2D, Concatenate, Reshape) at the pass's size and dtype, floor included. The VGG16 tuning
    # trials on torch eager channels_last, time: 32.8% with no copies, 24.6% with them at the roof, 4.2% at the
    # data-movement efficiency (nvidia-h200-tuning-prediction-check-*-2026-12-05.json); H100 channels_last whole
    # models no fit had seen 20.2% -> 7.0% (nvidia-h100-80gb-hbm3-power-model-layout-copies-*-2026-12-06.json.xz).
    def _copy_pass_time_s(self, backend: str, dtype: str, pass_bound_s: float) -> float:
        """One layout copy pass of CARM bound `pass_bound_s`: the time the calibration's data-movement cell gives it
        (learned from the samples that carry no copies, so no sample's copies feed their own efficiency; the bound
        where no cell covers it)."""
        if not pass_bound_s > 0:
            return pass_bound_s
        if self._copy_base is None:
            self._copy_base = replace(self, samples=[s for s in self.samples if not s.layout_copy_s])
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
        """A sample as its cell learns it: its measured time has its copies taken off at their data-movement time
        instead of their bound (never below its CARM bound)."""
        if not s.layout_copy_s:
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

    @staticmethod
    def _cell_eff(cell: list[Sample]) -> float:
        """A cell's efficiency: its samples' summed bound over their summed time, the efficiency at which its layers
        take their summed time (a whole model's time is a sum of layers; bound / the median efficiency misses that
        sum where efficiencies spread). Whole models the cells predict, leave one model out (n=88): time 10.6%
        against 11.1% for the median, energy per sample 10.8% against 15.5%
        (nvidia-h200-power-model-cell-statistic-2026-12-04.json.xz, validation.cell_statistic_choice)."""
        return sum(s.bound_time_s for s in cell) / sum(s.measured_time_s for s in cell)

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
        2. the same backend, class and dtype, nearest size;
        3. the same backend and class, another dtype, nearest size;
        3b. a similar class (SIMILAR_CLASS: LayerNormalization -> BatchNormalization, ...), this dtype then any;
        4. the same backend, family (matmul or memory-bound) and dtype, then any dtype, nearest size;
        5. another backend's cell as in 1-3, times the backend ratio learned where both have cells;
        6. every sample of the backend pooled (one is enough);
        None: no calibration, the CARM bound stands alone. The floor (floor_s) applies to 1-6.
        The other 16-bit dtype (float16 and bfloat16 run at one Tensor Core rate) is not taken before another size of
        the layer's own dtype: it lowered whole-model time 11.0% -> 9.5% (n=96) but raised per-layer power to 11.2%
        (nvidia-h200-power-model-duty-per-unit-2026-12-05.json.xz, validation.kin_dtype_choice)."""
        cls = layer_class(layer_type)
        size = size_bucket(bound_time_s)
        cells = self._cells()
        floor = self.floor_s(backend, cls)
        own = (backend, cls, dtype, size)
        if len(cells.get(own, [])) >= MIN_SAMPLES:
            return Estimate(self._cell_eff(cells[own]), own, len(cells[own]), "cell", floor)
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
                          host_s: float | None) -> float | None:
        """The wall time per call of a layer dispatched alone from the host (DISPATCHED_EXECUTIONS: jax, each
        layer jitted alone): the GPU's time as the compiled model runs it (in_model_time_s) and the host's
        time per call (`host_s`: the class's floor, floor_s), which overlap (asynchronous dispatch):
        (gpu ** p + host ** p) ** (1 / p), p = DISPATCH_OVERLAP_NORM. None where either is unknown (the layer's
        cell efficiency then stands)."""
        if not host_s or not bound_time_s:
            return None
        gpu = self.in_model_time_s(layer_type, bound_time_s, backend, DISPATCHED_EXECUTIONS[0], dtype)
        if not gpu:
            return None
        p = DISPATCH_OVERLAP_NORM
        return (gpu ** p + host_s ** p) ** (1 / p)

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
    def extended(self, other: Calibration) -> Calibration:
        return replace(self, samples=self.samples + other.samples, whole=self.whole + other.whole,
                       provenance={**self.provenance, "extended_with": other.provenance})

    def without_model(self, model: str) -> Calibration:
        """Every sample but those of `model`: leave-one-model-out evaluation."""
        return replace(self, samples=[s for s in self.samples if s.model != model],
                       whole=[w for w in self.whole if w.model != model], provenance={**self.provenance, "left_out": model})

    def with_models(self, models: Iterable[str]) -> Calibration:
        """Only the samples of `models`: a calibration fitted on these, to predict the others (held out)."""
        keep = set(models)
        return replace(self, samples=[s for s in self.samples if s.model in keep],
                       whole=[w for w in self.whole if w.model in keep],
                       provenance={**self.provenance, "fitted_on": sorted(keep)})

    def summary(self) -> dict[str, Any]:
        """Per key: the efficiency a cell of those samples gives (_cell_eff), their median efficiency and count
        (what a reader checks; the samples are the truth)."""
        return {"/".join(str(k) for k in key): {"efficiency": self._cell_eff(v),
                                                "median_efficiency": statistics.median(s.efficiency for s in v),
                                                "n": len(v)}
                for key, v in sorted(self._buckets().items(), key=lambda kv: str(kv[0]))}

    def to_dict(self) -> dict[str, Any]:
        # "cell_statistic" says what the buckets' "efficiency" is (_cell_eff): a description, not read back
        return {"schema": SCHEMA, "provenance": self.provenance, "cell_statistic": CELL_EFFICIENCY,
                "sample_fields": list(SAMPLE_FIELDS), "buckets": self.summary(),
                "samples": [_sample_dict(s) for s in self.samples], "whole": [asdict(w) for w in self.whole]}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: Any, origin: str = "calibration") -> Calibration:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ProfileError(f"Expected schema '{SCHEMA}' in {origin}, Received: "
                               f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r}")
        try:
            samples = [Sample(**s) for s in data.get("samples", [])]
            whole = [WholeSample(**{k: v for k, v in w.items() if k not in UNREAD_WHOLE_FIELDS})
                     for w in data.get("whole", [])]
        except TypeError as exc:
            raise ProfileError(f"Expected calibration samples in {origin}, Received: {exc}") from None
        return cls(samples, whole, dict(data.get("provenance") or {}))

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
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
