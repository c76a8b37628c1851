"""Per-layer times from ONE profiled pass of the whole model (torch), instead of one timing loop per layer.

How: every layer call the walker lists gets a named range (torch.profiler.record_function) around
its `call`; the model then runs eagerly, as the user runs it, a few times under torch.profiler.
Each GPU kernel is attributed to the innermost layer range open on the launching thread when the
op that launched it started (the profiler links kernels to their launching op by correlation id);
a layer's time is the sum of its kernels' GPU durations, the median over the profiled iterations.
Kernel durations leave out the GPU's idle gaps while Python dispatches, so the layers' sum compares
with the whole model replayed from one CUDA graph (`inference_graph`), not with the eager time.
On a CPU (no kernels) a layer's time is its range's wall duration.

jax: a jitted model is one XLA program; which fused kernel belongs to which layer is not observable
from inside it, so jax keeps measure/layers.py's jit-per-layer path (measure_run).

Energy per layer: NVML power updates ~10 times a second, far slower than a layer (us to ms), so a
layer's power cannot be resolved in one pass. Each layer gets the whole model's energy per call
(the CUDA-graph replay's, else the eager one's) in proportion to its time: energy_j = E_model *
t_layer / sum(t); power_w is then the model's mean power for every layer. Uncertainty: a layer's true
power differs from the mean by up to the spread of per-layer powers (on the H200, 450-700 W across
VGG16 layers: about +-25%); `settings["layer_energy"]` says so in every record.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from carm_advisor.errors import MeasurementError
from carm_advisor.mapping.types import LayerCall
from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure import backends
from carm_advisor.measure.backends import Launch, Range
from carm_advisor.measure.device import run_record
from carm_advisor.measure.execution import trace_settings
from carm_advisor.measure.inputs import ModelInputs, model_inputs
from carm_advisor.measure.layers import measure_layer_calls
from carm_advisor.measure.model import measure_model, measure_model_graph
from carm_advisor.measure.records import LayerMeasurement, RunMeasurement
from carm_advisor.measure.windows import expecting, progress_bar
from carm_advisor.power._base import GPU

# Range names carry this prefix so that attribution ignores every other annotation in the trace.
RANGE_PREFIX = "carm::"
LAYER_ENERGY_NOTE = (
    "time share of the whole model's measured energy per call (each layer gets the model's mean power: "
    "NVML samples ~10 Hz cannot resolve a layer; per-layer power differs from it by up to ~25%)"
)


# ---- attribution (pure: tested with hand-made event lists) -------------------------------------


def attribute_kernels(ranges: Sequence[Range], launches: Iterable[Launch]) -> tuple[list[float], float]:
    """GPU us per range (same order as `ranges`) and the GPU us launched outside every range.

    A launch belongs to the innermost range of its thread that contains its start time (the range
    that started last among those containing it).
    """
    per_range = [0.0] * len(ranges)
    by_thread: dict[int, list[int]] = {}
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i].start_us):
        by_thread.setdefault(ranges[i].thread, []).append(i)
    starts = {t: [ranges[i].start_us for i in idx] for t, idx in by_thread.items()}
    outside_us = 0.0
    for launch in launches:
        idx = by_thread.get(launch.thread, [])
        k = bisect.bisect_right(starts.get(launch.thread, []), launch.t_us)
        owner = next((idx[j] for j in range(k - 1, -1, -1) if ranges[idx[j]].end_us >= launch.t_us), None)
        if owner is None:
            outside_us += launch.gpu_us
        else:
            per_range[owner] += launch.gpu_us
    return per_range, outside_us


def layer_times_s(ranges: Sequence[Range], per_range_us: Sequence[float], iterations: int
                  ) -> dict[str, tuple[float, float | None]]:
    """name -> (median time per call in s, (max-min)/median spread) over the profiled iterations.

    Each name occurs once per iteration; a name seen fewer times than `iterations` is still the
    median of what was seen.
    """
    seen: dict[str, list[float]] = {}
    for r, us in zip(ranges, per_range_us):
        seen.setdefault(r.name, []).append(us * 1e-6)
    out = {}
    for name, values in seen.items():
        median = statistics.median(values[:iterations] if iterations else values)
        spread = (max(values) - min(values)) / median if median > 0 else None
        out[name] = (median, spread)
    return out


def share_energy(times_s: dict[str, float], model_energy_j: float | None) -> dict[str, float | None]:
    """Each layer's share of the model's energy per call, in proportion to its time."""
    total = sum(times_s.values())
    if model_energy_j is None or total <= 0:
        return {k: None for k in times_s}
    return {k: model_energy_j * t / total for k, t in times_s.items()}


# ---- instrumenting the model ----------------------------------------------------------------------


@contextlib.contextmanager
def named_layer_ranges(calls: Sequence[LayerCall], open_range: Callable[[str], Any]):
    """While inside: every walker call of the model runs inside `open_range(RANGE_PREFIX + path)`.

    The range wraps the layer instance's `call` (an instance attribute shadowing the class method,
    removed on exit): a layer called several times gets its walker paths in call order, restarting
    with each model call (`reset()` on the yielded object).
    """
    by_layer: dict[int, tuple[Any, list[str]]] = {}
    for c in calls:
        by_layer.setdefault(id(c.layer), (c.layer, []))[1].append(c.path)
    counters: dict[int, int] = {}
    patched = []
    for key, (layer, paths) in by_layer.items():
        original = layer.call

        def wrapped(*args, __original=original, __paths=paths, __key=key, **kwargs):
            n = counters.get(__key, 0)
            counters[__key] = n + 1
            with open_range(RANGE_PREFIX + __paths[min(n, len(__paths) - 1)]):
                return __original(*args, **kwargs)

        object.__setattr__(layer, "call", wrapped)
        patched.append(layer)

    class _Resetter:
        @staticmethod
        def reset() -> None:
            counters.clear()

    try:
        yield _Resetter
    finally:
        for layer in patched:
            with contextlib.suppress(KeyError):
                del layer.__dict__["call"]


# ---- the profiled pass ------------------------------------------------------------------------------


def profile_pass(model, x: ModelInputs, calls: Sequence[LayerCall], *, iterations: int = 5, warmup: int = 2
                 ) -> tuple[dict[str, tuple[float, float | None]], float, str]:
    """Run the model on `x` (measure.inputs.ModelInputs) eagerly under the backend's profiler, one range per
    layer call (Backend.profile: torch.profiler).

    Returns (name -> (time_s, spread)), the GPU s per call launched outside every layer range, and
    the source of the times ("kernels" on a CUDA GPU, "cpu-ranges" on a CPU).
    """
    framework = backends.get()
    with framework.inference_context(), named_layer_ranges(calls, framework.profiler_range) as ranges_ctl:
        for _ in range(max(int(warmup), 1)):  # cuDNN autotuning and allocations stay out of the trace
            ranges_ctl.reset()
            x.call(model, training=False)
        framework.sync()

        def profiled_iterations() -> None:
            for _ in range(iterations):
                ranges_ctl.reset()
                x.call(model, training=False)

        trace = framework.profile(profiled_iterations, RANGE_PREFIX)
    ranges, launches = trace.ranges, trace.launches
    if not ranges:
        raise MeasurementError("Expected the profiler to record one range per layer, Received: none")
    if trace.kernels:
        per_range_us, outside_us = attribute_kernels(ranges, launches)
        source = "kernels"
        if not any(per_range_us):  # CUPTI gave no kernel activity: nothing to attribute, say so
            raise MeasurementError(
                f"Expected GPU kernels inside the layer ranges, Received: none among {len(launches)} launches "
                "(is CUPTI kernel tracing available?)"
            )
    else:
        per_range_us, outside_us = [r.end_us - r.start_us for r in ranges], 0.0
        source = "cpu-ranges"
    return layer_times_s(ranges, per_range_us, iterations), outside_us * 1e-6 / iterations, source


def profile_run(
    model,
    *,
    batch_size: int,
    gpu: GPU | None = None,
    iterations: int = 5,
    warmup: int = 2,
    model_window_s: float = 0.3,
    model_repeats: int = 2,
    graph: bool = True,
    progress: bool = True,
    command: str | None = None,
) -> RunMeasurement:
    """One profiled pass for every layer's time, then the whole model eager (and replayed from a CUDA
    graph on a GPU), in one record. torch only; layer energy by time share (see the module docstring).
    """
    framework = backends.get()
    if not framework.layer_profiler:
        raise MeasurementError(
            f"Expected the torch backend for a one-pass profile, Received: {framework.name} "
            "(jax measures each layer jitted alone: measure.run.measure_run)"
        )
    start_s = time.perf_counter()
    calls = list(iter_layer_calls(model, batch_size))
    with progress_bar(progress) as bar:
        task = bar.add_task("profiled pass", total=3 if graph else 2)
        with expecting(f"model '{model.name}' to run under the profiler on batch {batch_size}"):
            x = model_inputs(model, batch_size)
            times, outside_s, source = profile_pass(model, x, calls, iterations=iterations, warmup=warmup)
        bar.update(task, advance=1, description="whole model (eager)")
        inference, _ = measure_model(model, batch_size=batch_size, gpu=gpu, training_step=False,
                                     min_window_s=model_window_s, repeats=model_repeats, warmup=warmup)
        graph_m = None
        if graph:
            bar.update(task, advance=1, description="whole model (CUDA graph)")
            graph_m = measure_model_graph(model, batch_size=batch_size, gpu=gpu, min_window_s=model_window_s,
                                          repeats=model_repeats, warmup=warmup)
        bar.advance(task)
    reference = graph_m if graph_m is not None and graph_m.energy_j is not None else inference
    energy = share_energy({k: t for k, (t, _) in times.items()}, reference.energy_j)
    layers = []
    for c in calls:
        if c.path not in times:
            continue
        t, spread = times[c.path]
        if t <= 0:  # a view with no kernel: nothing to place
            continue
        e = energy.get(c.path)
        layers.append(LayerMeasurement(
            name=c.path, type=type(c.layer).__name__, time_s=t, time_spread=spread, repeats=iterations,
            energy_j=e, power_w=(e / t) if e is not None else None, sm_clock_mhz=reference.sm_clock_mhz,
            execution="profiled",
        ))
    run = run_record(model, batch_size=batch_size, gpu=gpu, command=command)
    run.layers, run.inference, run.inference_graph = layers, inference, graph_m
    run.settings = {
        "method": "profiled", "layer_time_source": source, "iterations": iterations, "warmup": warmup,
        "model_window_s": model_window_s, "model_repeats": model_repeats,
        "unattributed_gpu_s": outside_s, "layer_energy": LAYER_ENERGY_NOTE,
        "layer_energy_reference": "inference_graph" if reference is graph_m else "inference",
    }
    run.wall_s = time.perf_counter() - start_s
    return run


# ---- identical calls measured once (jax's jit-per-layer path) ----------------------------------


def call_signature(call: LayerCall) -> str:
    """What decides a layer call's work: its class, configuration (without the name) and input shapes/dtypes."""
    try:
        config = dict(call.layer.get_config())
    except Exception:  # an operation without a config: only itself is identical to itself
        return f"id:{id(call.layer)}:{call.path}"
    config.pop("name", None)
    return json.dumps([type(call.layer).__name__, config, call.input_shapes, call.input_dtypes],
                      sort_keys=True, default=str)


def measure_distinct_layers(model, *, batch_size: int, gpu: GPU | None = None, window_s: float = 0.05,
                            repeats: int = 2, warmup: int = 1, whole_model: bool = True, model_window_s: float = 0.3,
                            progress: bool = True, command: str | None = None, layers: bool = True,
                            back_to_back_calls: int = 0) -> RunMeasurement:
    """Each distinct layer call alone in short windows (jit on jax, a CUDA graph on torch), its figures
    copied to its identical twins; with whole_model, the model as the user calls it (jitted on jax).
    layers=False records the whole model only (a held-out model's whole-model time, in seconds where
    jitting every distinct layer alone takes a minute).

    The per-layer path where one pass cannot attribute time to layers (jax); also a real per-layer
    power (windows of `window_s` let NVML see each layer's own power) where one is wanted on torch.
    """
    start = time.perf_counter()
    calls = list(iter_layer_calls(model, batch_size)) if layers else []
    reps, mapping = unique_calls(calls)
    measured = {m.name: m for m in measure_layer_calls(reps, gpu=gpu, min_window_s=window_s, repeats=repeats,
                                                      warmup=warmup, progress=progress,
                                                      back_to_back_calls=back_to_back_calls)} if reps else {}
    run = run_record(model, batch_size=batch_size, gpu=gpu, command=command)
    run.layers = [dataclasses.replace(measured[mapping[c.path]], name=c.path) for c in calls]
    if whole_model:
        run.inference, _ = measure_model(model, batch_size=batch_size, gpu=gpu, training_step=False,
                                         min_window_s=model_window_s, repeats=2, warmup=warmup)
    run.settings = {"method": "layer-windows" if layers else "whole-model-only", "layer_window_s": window_s, "layer_repeats": repeats,
                    "model_window_s": model_window_s,
                    "warmup": warmup, "distinct_layer_calls": len(reps), "layer_calls": len(calls),
                    "deduplicated": "identical calls (class, config, input shapes and dtypes) measured once",
                    **trace_settings(run.backend)}
    if back_to_back_calls > 0 and backends.get(run.backend).jit_execution:
        run.settings["back_to_back_calls"] = back_to_back_calls
    run.wall_s = time.perf_counter() - start
    return run


def unique_calls(calls: Sequence[LayerCall]) -> tuple[list[LayerCall], dict[str, str]]:
    """The first call of each signature, and every path -> the path of its measured representative.

    ResNet50's 177 layer calls have far fewer distinct shapes; measuring each once saves most of a
    jit-per-layer run.
    """
    first: dict[str, LayerCall] = {}
    mapping = {}
    for c in calls:
        rep = first.setdefault(call_signature(c), c)
        mapping[c.path] = rep.path
    return list(first.values()), mapping
