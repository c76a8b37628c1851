"""The whole-model fits of a calibration: how a model's time relates to its layers' (cuda_graph, eager) or to its
CARM bound (jit, torch.compile), learned from whole-model records (WholeSample). A mixin of Calibration."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from carm_advisor.calibration.policy import BOUND_EXECUTIONS, KERNEL_FLOOR_EXECUTIONS, MATMUL_CLASSES, is_kernel
from carm_advisor.calibration.samples import (
    WholeFit,
    WholeSample,
    bound_sums,
    bounded_rows,
    kernel_calls,
    less_floor,
    rows_dtype,
)


class WholeModelFits:
    """Whole-model fits over `self.whole` (WholeSample records), cached per key in `self._whole_fits`."""

    def _gpu_fit(self, found: list[WholeSample], floor: float) -> tuple[float, float]:
        """a, b >= 0 (least squares) of time = a * matmul + b * other, the sums less `floor` per call;
        one record, or a negative share: one common factor."""
        import numpy as np

        x = np.array([less_floor(w.matmul_sum_s, w.other_sum_s, w.matmul_calls, w.layer_calls, floor) for w in found])
        y = np.array([w.time_s for w in found])
        coef = np.linalg.lstsq(x, y, rcond=None)[0] if len(found) >= 2 else None
        if coef is None or (coef < 0).any():
            ratios = [w.time_s / sum(xi) for w, xi in zip(found, x) if sum(xi) > 0]
            coef = (statistics.median(ratios),) * 2 if ratios else (1.0, 1.0)
        return float(coef[0]), float(coef[1])

    @staticmethod
    def _bound_of(w: WholeSample) -> float:
        """A record's CARM bound as a compiled fit counts it: every layer's at its full weight. Against half the
        non-matmul layers' bound or none, jit whole-model time 8.7% against 22.0% and 29.1% (n=49), and one
        efficiency for every layer against one for the matmul-class layers and one for the rest, 10.2% against
        10.6% (n=88) (nvidia-h200-power-model-jit-host-2026-12-04.json.xz, validation.jit_other_share_choice;
        nvidia-h200-power-model-jit-gpu-time-2026-12-04.json.xz, validation.jit_gpu_choice)."""
        return w.matmul_bound_s + w.other_bound_s

    def _log_error(self, fit: WholeFit, records: list[WholeSample]) -> float:
        """Sum over `records` of |log(the compiled fit's time / the measured time)|, from their CARM bounds."""
        total = 0.0
        for w in records:
            t = fit.compiled_time_s(w.matmul_bound_s, w.other_bound_s, w.kernel_calls, w.compiled_calls)[1]
            total += abs(math.log(t / w.time_s)) if t > 0 and w.time_s > 0 else math.inf
        return total

    def _efficiencies(self, records: list[WholeSample], t0: float, kernel_s: float) -> list[float]:
        """bound / (whole - t0 - kernels x kernel_s) of each record whose time exceeds its fixed costs."""
        spans = [(w, w.time_s - t0 - w.kernel_calls * kernel_s) for w in records]
        return [self._bound_of(w) / span for w, span in spans if span > 0]

    def kernel_floor(self, execution: str) -> float:
        """The GPU-side launch floor per kernel (seconds) a compiled execution pays (KERNEL_FLOOR_EXECUTIONS),
        from provenance["kernel_floor"]["value_s"] (fit_calibration.py: the measured launch floor); else 0."""
        found = (self.provenance or {}).get("kernel_floor") or {}
        return float(found.get("value_s") or 0.0) if execution in KERNEL_FLOOR_EXECUTIONS else 0.0

    def _fixed_cost(self, found: list[WholeSample], kernel_s: float = 0.0) -> tuple[float, int]:
        """The fixed cost per call of a compiled model (t0 of whole = t0 + bound / e): the median of the
        intercepts of whole time against bound, one straight line (numpy.polyfit) per model, dtype and layout
        measured at >= 2 batch sizes (the bound grows with the batch, t0 does not), never below 0; and how
        many such groups there were (0: no batch series, t0 = 0)."""
        import numpy as np

        groups: dict[tuple, dict[int, list[WholeSample]]] = {}
        for w in found:
            if w.batch_size > 0:
                groups.setdefault((w.model, w.dtype, w.layout), {}).setdefault(w.batch_size, []).append(w)
        intercepts = []
        for by_batch in groups.values():
            if len(by_batch) < 2:
                continue
            x = [statistics.median(self._bound_of(w) for w in ws) for _, ws in sorted(by_batch.items())]
            y = [statistics.median(w.time_s - w.kernel_calls * kernel_s for w in ws) for _, ws in sorted(by_batch.items())]
            intercepts.append(float(np.polyfit(x, y, 1)[1]))
        return (max(statistics.median(intercepts), 0.0), len(intercepts)) if intercepts else (0.0, 0)

    def _bound_fit(self, found: list[WholeSample], dtype: str | None, execution: str,
                   model: str | None = None, kernels: int | None = None) -> WholeFit | None:
        """Compiled execution (jit, torch.compile) from the records' CARM bounds, one fit over every compute dtype.
        jit: max(layer calls x h, bound / e + kernels x the launch floor) (_host_max_fit): the host dispatches the
        next call while the GPU runs this one, so a small batch is host-paced and a large one GPU-paced. Against one
        fixed cost per call added (t0 + bound / e + kernels x floor, _additive_fit), leave one model out over the jit
        records, time 8.7% against 20.8% (n=49), later records 15.3% against 21.7% (n=39)
        (nvidia-h200-power-model-jit-host-2026-12-04.json.xz, validation.jit_host_choice). The additive form stays
        for torch.compile (the tuner's synchronous trials), for a model whose own batch series it fits better, and
        where the host max has no fit. One e over every dtype, against one per dtype: 10.2% against 16.9% (n=88;
        nvidia-h200-power-model-jit-gpu-time-2026-12-04.json.xz, validation.jit_dtype_choice)."""
        usable = [w for w in found if w.matmul_bound_s is not None and w.other_bound_s is not None]
        if not usable:
            return None
        k = self.kernel_floor(execution)
        if execution not in KERNEL_FLOOR_EXECUTIONS:
            return self._additive_fit(usable, dtype, execution, model, kernels)
        fit, own, series = self._host_max_fit(usable, execution, k, model, kernels, dtype)
        if fit is not None and not series:
            return fit
        # a model's own batch series decide its form too: a synchronous call (the tuner's trials) pays a fixed
        # cost per call on top of the GPU's time, which the additive form fits and the host max does not.
        # No host max fit (no record counts its layer calls; no record the GPU paced: e unknown): additive.
        additive = self._additive_fit(usable, dtype, execution, model, kernels)
        if fit is None or (additive is not None and self._log_error(additive, own) < self._log_error(fit, own)):
            return additive if additive is None or fit is None else replace(
                additive, source=f"{additive.source}; additive: it fits {model}'s own records better than the host max")
        return fit

    def _additive_fit(self, chosen: list[WholeSample], dtype: str | None, execution: str,
                      model: str | None = None, kernels: int | None = None) -> WholeFit | None:
        """whole = t0 + CARM bound / e + kernels x the launch floor. t0 is the fixed cost per call (_fixed_cost,
        from batch series); e is one efficiency shared by every model: the median over the models of each model's
        median bound / (whole - t0), so that a model measured many times (the tuning trials are VGG16's) counts as
        one. A measurement outranks a model: for a `model` that has records of its own here (of this dtype where
        it has any), e is the median of its own, and t0 its own batch series' intercept where it has one (the
        other models' median otherwise); where every own record lies at or below that t0, the other models' fit.
        Own records are those of this name and, where both are known, of `kernels` kernels (kernel_calls): a
        name is no identity ("functional", "model" from model.keras), and a model of another architecture
        under it must not take its t0 and e."""
        k = self.kernel_floor(execution)
        t0, series = self._fixed_cost(chosen, k)
        by_model: dict[str, list[float]] = {}
        for w in chosen:
            by_model.setdefault(w.model, []).extend(self._efficiencies([w], t0, k))
        by_model = {m: v for m, v in by_model.items() if v}
        if not by_model:
            return None
        e = statistics.median(statistics.median(v) for v in by_model.values())
        over = f"median over {len(by_model)} models of"
        own_records = self._own_records(chosen, model, kernels)
        own_dtype = [w for w in own_records if dtype and w.dtype == dtype]
        if own_records:   # of this compute dtype where it has any (tensor cores or not: e differs by dtype)
            own_records = own_dtype or own_records
            own_t0, own_series = self._fixed_cost(own_records, k)
            own_t0, own_series = (own_t0, own_series) if own_series else (t0, series)
            own = self._efficiencies(own_records, own_t0, k)
            if own:   # else (every own record at or below t0) the other models' fit, its t0 with its e
                e, t0, series, chosen = statistics.median(own), own_t0, own_series, own_records
                over = f"{model}'s own {dtype + ' ' if own_dtype else ''}measurements: median of"
        which = f"{len(chosen)} {execution} records"
        studies = sum(1 for w in chosen if w.source.startswith("study"))
        which += f" ({studies} of them tuning trials)" if studies else ""
        fixed = (f"{t0 * 1e3:.2f} ms + " if t0 else "")
        t0_src = (f"; fixed cost: median intercept of {series} batch series" if series else "; no batch series: no fixed cost")
        floor = f" + kernels x {k * 1e6:.1f} us (measured launch floor, GPU side)" if k else ""
        return WholeFit(1.0 / e, 1.0 / e, None, len(chosen), 0.0,
                        f"{execution}: {fixed}CARM bound / {e:.2f}{floor} ({over} {which}{t0_src})", e, t0, k)

    # The grids _host_max_fit searches: host time per layer call (s) and the efficiency e (log-spaced).
    HOST_GRID_S = tuple(i * 0.25e-6 for i in range(201))          # 0 .. 50 us
    EFFICIENCY_GRID = tuple(math.exp(math.log(0.05) + i * (math.log(5.0) - math.log(0.05)) / 399) for i in range(400))

    def _grid_fit(self, records: list[WholeSample], k: float, prior: tuple[float, float] | None = None,
                  host_s: float | None = None) -> tuple[float, float]:
        """(h, e) minimising the sum over `records` of |log(predicted / measured time)|, each model's records
        weighing one model, predicted = max(layer calls x h, bound / e + kernels x k). `prior` (h, e): where
        the records leave a parameter free (all host-paced: e; all GPU-paced: h), the grid point nearest it
        (a penalty of a thousandth of a record's error per e-fold of e away, and per h0 of h away). `host_s`: h
        held there, e fitted alone."""
        import numpy as np

        n, mm, other, fixed, t, weight = self._grid_arrays(records, k)
        h = np.array(self.HOST_GRID_S if host_s is None else (host_s,))
        e = np.array(self.EFFICIENCY_GRID)
        gpu = (mm + other)[None, :] / e[:, None] + fixed[None, :]              # (e, record)
        loss = np.array([(np.abs(np.log(np.maximum(hi * n, gpu) / t)) * weight).sum(-1) for hi in h])   # (h, e)
        if prior is not None:
            h0, e0 = prior
            loss = loss + 1e-3 * (np.abs(np.log(e / e0))[None, :] + np.abs(h - h0)[:, None] / max(h0, 1e-6))
        i, j = np.unravel_index(int(loss.argmin()), loss.shape)
        return float(h[i]), float(e[j])

    def _grid_arrays(self, records: list[WholeSample], k: float) -> tuple:
        """The grid fits' per-record arrays: layer calls, matmul bound, the rest's bound, kernels x k, measured time,
        and the weight that makes each model's records weigh one model."""
        import numpy as np

        counts: dict[str, int] = {}
        for w in records:
            counts[w.model] = counts.get(w.model, 0) + 1
        return (np.array([w.compiled_calls for w in records], float), np.array([w.matmul_bound_s for w in records]),
                np.array([w.other_bound_s for w in records]),
                np.array([w.kernel_calls * k for w in records]), np.array([w.time_s for w in records]),
                np.array([1.0 / counts[w.model] for w in records]))

    def _host_max_fit(self, chosen: list[WholeSample], execution: str, k: float, model: str | None,
                      kernels: int | None, dtype: str | None = None) -> tuple[WholeFit | None, list[WholeSample], bool]:
        """jit: whole = max(layer calls x h, bound / e + kernels x k), h and e fitted
        together over every model's records (_grid_fit). A measurement outranks a model: a `model` with records
        of its own (by name and, where both are known, kernel count, as _bound_fit; of `dtype` where it has any:
        e differs by dtype) refits on those: both where they span two batch sizes or more (a host-paced small
        batch and a GPU-paced large one tell h from e), else e alone at the shared h (records at one batch size
        cannot: ResNet50's at batch 64 made h 17 us a call and its batch 16 1.4x too slow, measured by --verify);
        the shared fit stands for what they leave free.
        Returns (the fit, the own records it used, whether they span batch sizes); the fit is None where no
        record counts its layer calls or none was paced by the GPU under the shared fit (e unknown)."""
        records = [w for w in chosen if w.compiled_calls > 0]
        own = self._own_records(records, model, kernels)
        own = [w for w in own if dtype and w.dtype == dtype] or own
        series = len({w.batch_size for w in own if w.batch_size > 0}) >= 2
        if not records:
            return None, own, series
        h, e = self._grid_fit(records, k)
        shared = WholeFit(1.0 / e, 1.0 / e, None, len(records), kernel_floor_s=k, host_per_layer_s=h)
        if not any(shared.compiled_time_s(w.matmul_bound_s, w.other_bound_s, w.kernel_calls, 0)[0]
                   > h * w.compiled_calls for w in records):
            return None, own, series
        over = f"{len(records)} {execution} records of {len({w.model for w in records})} models"
        if own:
            h, e = self._grid_fit(own, k, prior=(h, e), host_s=None if series else h)
            over = (f"{model}'s own {len(own)} {execution} records, the shared fit where they leave a parameter free"
                    if series else f"{model}'s own {len(own)} {execution} records at one batch size for e, the "
                    "shared fit for h")
        floor = f" + kernels x {k * 1e6:.1f} us (measured launch floor, GPU side)" if k else ""
        return WholeFit(1.0 / e, 1.0 / e, None, len(own or records), 0.0,
                        f"{execution}: max(layer calls x {h * 1e6:.2f} us (host), CARM bound / {e:.2f}{floor}) "
                        f"(fitted on {over})", e, 0.0, k, h), own, series

    @staticmethod
    def _own_records(records: list[WholeSample], model: str | None, kernels: int | None) -> list[WholeSample]:
        """The records of `model` (by name and, where both are known, kernel count: a name is no identity)."""
        return [w for w in records if model and w.model == model
                and (not kernels or not w.kernel_calls or w.kernel_calls == kernels)]

    def whole_fit(self, backend: str, execution: str, dtype: str | None = None, model: str | None = None,
                  kernels: int | None = None) -> WholeFit | None:
        # the samples are not to be changed in place once fitted (as _cells' index); what may change is keyed
        key = (backend, execution, dtype, model, kernels, len(self.whole), self.kernel_floor(execution))
        if key not in self._whole_fits:
            self._whole_fits[key] = self._whole_fit(backend, execution, dtype, model, kernels)
        return self._whole_fits[key]

    def _whole_fit(self, backend: str, execution: str, dtype: str | None = None, model: str | None = None,
                   kernels: int | None = None) -> WholeFit | None:
        """How the whole model relates to its layers on this backend and execution, from the records:
        cuda_graph: a * matmul + b * other (the layers' GPU times, sequenced by the graph);
        jit, torch.compile: from the CARM bound (_bound_fit), not from the layers jitted alone: each of those
          pays a dispatch the compiled model pays once;
        eager: max(the GPU's time, calls * host time per call). The GPU's time is the cuda_graph fit
          where there is one; the host time per call is the FASTEST whole / calls over the records
          where the host set the pace (eager > 1.3x the same record's CUDA-graph time, else its layer sum).
        `model` (its name) and `kernels` (its kernel_calls): the model predicted; a compiled fit prefers its
        own records (_bound_fit)."""
        found = [w for w in self.whole if w.backend == backend and w.execution == execution and w.time_s > 0]
        if execution not in BOUND_EXECUTIONS:   # the layer-based fits need the layers measured too
            found = [w for w in found if w.has_layer_sums]
        if not found:
            return None
        if execution in BOUND_EXECUTIONS:
            return self._bound_fit(found, dtype, execution, model, kernels)
        floor = 0.0
        if execution != "eager":
            a, b = self._gpu_fit(found, floor)
        if execution != "eager":
            source = f"{execution}: {a:.2f} x matmul + {b:.2f} x other" + (f" (less {floor * 1e6:.1f} us per call)" if floor else "")
            return WholeFit(a, b, None, len(found), floor, f"{source}, {len(found)} records")

        def gpu_of(w: WholeSample) -> float:
            return w.graph_time_s or (w.matmul_sum_s + w.other_sum_s)

        host_bound = [w for w in found if w.layer_calls and w.time_s > 1.3 * gpu_of(w)]
        dispatch, how = self.host_per_call_s(host_bound)
        graph = [w for w in self.whole if w.backend == backend and w.execution == "cuda_graph" and w.time_s > 0]
        if graph:
            a, b = self._gpu_fit(graph, 0.0)
            gpu_source = f"GPU as cuda_graph ({len(graph)} records)"
        else:   # no graph records: the GPU's share from the records the GPU paced
            a, b = self._gpu_fit([w for w in found if w not in host_bound] or found, 0.0)
            gpu_source = "GPU from eager records paced by the GPU"
        host = f"host {dispatch * 1e6:.0f} us per call ({how})" if dispatch else "no host-paced record"
        return WholeFit(a, b, dispatch, len(found), 0.0, f"eager: max({gpu_source}, {host})")

    @staticmethod
    def host_per_call_s(host_paced: Sequence[WholeSample]) -> tuple[float | None, str]:
        """(the host's time per layer call of a torch eager model, how it was taken) from the records the host paced:
        the least time per call of any of them. The host's pace varies from machine to machine and run to run more
        than a median follows: on fourteen H100 eager records of seven models no fit had seen, the least gives 13.8%
        and the median over models 41.6% (nvidia-h100-80gb-hbm3-prediction-accuracy-eager-host-2026-12-06.json); on
        the H200 records it was compared on first, 31.9% against 17.3%
        (nvidia-h200-prediction-accuracy-eager-host-2026-12-06.json.xz)."""
        per_call = [w.time_s / w.layer_calls for w in host_paced if w.layer_calls]
        if not per_call:
            return None, "no host-paced record"
        return min(per_call), f"fastest of {len(per_call)} host-paced records"

    def whole_time_s(self, rows: Sequence, backend: str, execution: str, model: str | None = None) -> float | None:
        """The calibrated whole-model time from the rows' calibrated times (jit: their CARM bounds), or None
        without a fit; `model` names the model the rows are of (its own records first, whole_fit)."""
        kernels = kernel_calls(rows)
        fit = self.whole_fit(backend, execution, rows_dtype(rows), model, kernels)
        if fit is not None and fit.bound_efficiency is not None:
            mm, other = bound_sums(rows)
            return fit.compiled_time_s(mm, other, kernels, len(bounded_rows(rows)))[1] if mm + other > 0 else None
        times = [(r.type, r.calibrated_time_s) for r in rows if getattr(r, "calibrated_time_s", None)]
        if fit is None or not times:
            return None
        mm = sum(t for k, t in times if k in MATMUL_CLASSES)
        other = sum(t for k, t in times if k not in MATMUL_CLASSES)
        n_mm = sum(1 for k, _ in times if k in MATMUL_CLASSES)
        mm, other = less_floor(mm, other, n_mm, len(times), fit.layer_floor_s)
        t = fit.matmul_factor * mm + fit.other_factor * other
        if fit.dispatch_per_call_s is not None:
            # The host pays every row's Keras layer call, a Dropout, Reshape or Cast with no CARM bound and no
            # calibrated time too (49 of a keras_hub BERT's 140 rows; cpu-eager-op-counts-mixed_bfloat16-2026-12-07.json).
            # Over every H200 torch eager record, leave one model out: 19.9% median error against 21.1% counting the
            # calibrated rows alone (n=58; nvidia-h200-prediction-accuracy-eager-every-row-2026-12-07.json,
            # eager_host_forms).
            t = max(t, len(rows) * fit.dispatch_per_call_s)
        return t

    def compiled_gpu_share(self, rows: Sequence, backend: str, execution: str, model: str | None = None) -> float:
        """The share of a compiled call (jit) the GPU is busy: its GPU time over the whole time where the fit
        has a host term (a host-paced small batch), else 1. The kernels' launch floors count as busy: jit whole-model
        power 8.7% against 10.8% with them at the constant power (n=88;
        nvidia-h200-power-model-jit-gpu-time-2026-12-04.json.xz, validation.jit_floor_choice)."""
        kernels = kernel_calls(rows)
        fit = self.whole_fit(backend, execution, rows_dtype(rows), model, kernels)
        mm, other = bound_sums(rows)
        if fit is None or not fit.host_per_layer_s or not mm + other > 0:
            return 1.0
        gpu, whole = fit.compiled_time_s(mm, other, kernels, len(bounded_rows(rows)))
        return min(1.0, gpu / whole)

    def in_model_time_s(self, layer_type: str, bound_time_s: float | None, backend: str, execution: str,
                        dtype: str | None = None, model: str | None = None,
                        kernels: int | None = None) -> float | None:
        """A layer's GPU time as a compiled model (jit, torch.compile: BOUND_EXECUTIONS) runs it: its share
        of the whole-model fit, factor x its CARM bound plus the GPU-side launch floor if it is a kernel of
        its own (is_kernel); the fixed cost per model call is not shared out. None without such a fit. What
        the GPU works per call of the layer jitted alone too: the rest of that call is host dispatch.
        `model` and `kernels` (its name and kernel_calls, as whole_fit): the fit of the model the layer is in,
        its own records first, so that a whole model's layers share the fit of its whole time
        (compiled_gpu_share); without them, the fit over every model."""
        if execution not in BOUND_EXECUTIONS or not bound_time_s or bound_time_s <= 0:
            return None
        fit = self.whole_fit(backend, execution, dtype, model, kernels)
        if fit is None or fit.bound_efficiency is None:
            return None
        factor = fit.matmul_factor if layer_type in MATMUL_CLASSES else fit.other_factor
        return factor * bound_time_s + (fit.kernel_floor_s if is_kernel(layer_type) else 0.0)

    def whole_describe(self, backend: str, execution: str, rows: Sequence | None = None, model: str | None = None) -> str:
        """How the whole-model calibrated prediction is made ("none": no record of this backend and execution);
        `rows` (the model's) pick the compute dtype where the fit depends on it (jit)."""
        fit = self.whole_fit(backend, execution, rows_dtype(rows) if rows else None, model,
                             kernel_calls(rows) if rows else None)
        return fit.source if fit else "none"
