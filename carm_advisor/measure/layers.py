"""Measure each layer alone, as it really runs in the active Keras 3 backend.

Each layer call the walker lists (carm_advisor.mapping.walker.iter_layer_calls) is run alone on
synthetic inputs of its real shapes and dtypes, on the backend's device, the way the model calls it
(the recorded call arguments of its graph node). Warm-up calls first, then
carm_advisor.power.energy.measure_energy times repeated windows of back-to-back calls, with the
backend's own device sync at the window ends, and reads NVML energy, power and SM clock when a GPU is
given (measure/windows.py: the presets). The record says how each call ran ("execution", measure/execution.py):

- torch on a CUDA GPU (inference, the default): "cuda_graph". The layer call is captured once into a
  torch.cuda.CUDAGraph and the windows time its replays. Eagerly, a small layer's Python/Keras dispatch
  (150-450 us on an H200) exceeds its GPU work, which inside the whole model the GPU queue hides; the
  replay measures the GPU work alone. A layer whose capture fails runs eagerly (with a warning).
  `graphs=False` measures eagerly. The whole model is measured eagerly, as the user runs it
  (`inference`), and replayed from one graph too (`inference_graph`, with the layer windows): the GPU
  time the sum of the layers' graph times compares with (measure/model.py).
- jax: "jit", a stateless call under jax.jit, so dispatch does not dominate.
- tensorflow, and torch on a CPU or in training: "eager", as `model(x)` would run.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import keras

from carm_advisor.errors import MeasurementError
from carm_advisor.mapping.types import LayerCall
from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure import backends
from carm_advisor.measure.device import run_record
from carm_advisor.measure.execution import (
    Capture,
    jit_layer_fn,
    stateless_layer,
    trace_settings,
    try_capture,
    uses_cuda_graphs,
)
from carm_advisor.measure.inputs import layer_int_high, synthetic_tensor
from carm_advisor.measure.records import LayerMeasurement, RunMeasurement
from carm_advisor.measure.windows import (
    MeasureOptions,
    Windows,
    back_to_back_record,
    expecting,
    measure_calls,
    progress_bar,
)
from carm_advisor.power._base import GPU

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.12


# ---- how a layer is called -------------------------------------------------------------------


def _compatible(recorded_shape, concrete_shape) -> bool:
    recorded = tuple(recorded_shape)
    return len(recorded) == len(concrete_shape) and all(
        r is None or r == c for r, c in zip(recorded, concrete_shape)
    )


def _node_for(call: LayerCall):
    """The graph node that recorded this call (its args and kwargs), or None (subclassed models)."""
    nodes = getattr(call.layer, "_inbound_nodes", None) or []
    last = call.path.rsplit("/", 1)[-1]
    index = int(last.rsplit("#", 1)[1]) if "#" in last and last.rsplit("#", 1)[1].isdigit() else 0
    matches = [
        node for node in nodes
        if getattr(node, "arguments", None) is not None
        and len(node.input_tensors) == len(call.input_shapes)
        and all(_compatible(t.shape, s) for t, s in zip(node.input_tensors, call.input_shapes))
    ]
    if not matches:
        return None
    return matches[min(index, len(matches) - 1)]


def argument_builder(call: LayerCall) -> Callable[[list], tuple[tuple, dict]]:
    """tensors (one per input, in the walker's order) -> (args, kwargs) for the layer's __call__."""
    node = _node_for(call)
    if node is not None:
        refs = list(node.input_tensors)

        def from_node(tensors: list) -> tuple[tuple, dict]:
            args, kwargs = node.arguments.fill_in({id(r): t for r, t in zip(refs, tensors)})
            return tuple(args), dict(kwargs)

        return from_node

    from keras.src.layers.merging.base_merge import Merge

    if isinstance(call.layer, Merge):
        return lambda tensors: ((list(tensors),), {})
    named = _by_name(call)
    if named is not None:
        return named
    return lambda tensors: (tuple(tensors), {})


def _by_name(call: LayerCall) -> Callable[[list], tuple[tuple, dict]] | None:
    """A traced call (inside a custom layer: no graph node) whose tensors the walker named after the arguments of
    the layer's call(): those tensors and its plain options by keyword, as the custom layer passed them
    (keras_hub's attention gets its mask as attention_mask=, in no fixed place). None where the names do not all
    name a parameter of call()."""
    names = call.input_names
    call_fn = getattr(call.layer, "call", None)
    if not names or len(set(names)) != len(names) or call_fn is None or call.constant_inputs:
        return None
    try:
        parameters = inspect.signature(call_fn).parameters
    except (TypeError, ValueError):
        return None
    if not all(n in parameters for n in names):
        return None
    options = {k: v for k, v in (call.options or {}).items() if k in parameters and k not in names}
    return lambda tensors: ((), {**dict(zip(names, tensors)), **options})


@dataclass
class LayerRunner:
    """One layer call ready to run: `fn()` runs it once on the device and returns its outputs."""

    fn: Callable[[], Any]
    execution: str  # "eager" | "jit" | "cuda_graph" (fn replays the captured graph and returns None)
    tensors: list
    back_to_back: Callable[[], Any] | None = None   # jax: calls_per_dispatch calls in one jitted program
    calls_per_dispatch: int = 1


def layer_runner(
    call: LayerCall,
    *,
    training: bool = False,
    backend: str | None = None,
    seed: int = 0,
    graphs: bool = True,
    warmup: int = 3,
    capture: Capture | None = None,
    back_to_back_calls: int = 0,
) -> LayerRunner:
    """Build synthetic inputs for `call` and a zero-argument function that runs the layer on them.

    jax (Backend.jit_execution): the layer's stateless call jitted (execution "jit"); with
    back_to_back_calls > 0 also `back_to_back`, one jitted program running the layer that many times
    (back_to_back_fn), compiled here.

    torch on a CUDA GPU (see uses_cuda_graphs): the call is captured into a CUDA graph after `warmup`
    eager calls, by `capture` (default: the backend's capture_cuda_graph); if that raises, the runner is
    eager and a RuntimeWarning names the layer.
    """
    framework = backends.get(backend)
    layer = call.layer
    high = layer_int_high(layer)
    tensors = [
        synthetic_tensor(shape, dtype, int_high=high, seed=seed + i)
        for i, (shape, dtype) in enumerate(zip(call.input_shapes, call.input_dtypes))
    ]
    build = argument_builder(call)
    is_layer = isinstance(layer, keras.layers.Layer)
    # stateless_call hands kwargs straight to call(): only layers whose call() takes `training` get it.
    takes_training = is_layer and bool(getattr(layer, "_call_has_training_arg", False))

    def arguments(ts: list) -> tuple[tuple, dict]:
        args, kwargs = build(ts)
        if takes_training and "training" not in kwargs:
            kwargs["training"] = training
        return args, kwargs

    def eager() -> Any:
        args, kwargs = arguments(tensors)
        return layer(*args, **kwargs)

    if uses_cuda_graphs(framework.name, graphs=graphs, training=training):
        replay = try_capture(eager, capture, warmup, f"layer '{call.path}' ({type(layer).__name__})",
                             framework.name)
        if replay is not None:
            return LayerRunner(replay, "cuda_graph", tensors)
    elif framework.jit_execution:
        jitted = jit_layer_fn(layer, arguments, is_layer, framework.name)
        try:
            framework.sync(jitted(tensors))  # compile now, outside any timing
        except Exception as exc:  # a layer jax cannot trace statelessly (seeded RNG state...): run it eagerly
            warnings.warn(
                f"carm_advisor: layer '{call.path}' ({type(layer).__name__}) could not be jit-compiled "
                f"({type(exc).__name__}: {str(exc)[:200]}); measuring it eagerly",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            runner = LayerRunner(lambda: jitted(tensors), "jit", tensors)
            if back_to_back_calls > 0:
                try:   # its own failure (K outputs kept alive: out of memory) leaves the jitted layer as it is
                    looped = back_to_back_fn(layer, arguments, is_layer, back_to_back_calls, framework.name)
                    framework.sync(looped(tensors))
                    runner.back_to_back, runner.calls_per_dispatch = (lambda: looped(tensors)), back_to_back_calls
                except Exception as exc:
                    warnings.warn(
                        f"carm_advisor: layer '{call.path}' ({type(layer).__name__}): no back-to-back windows "
                        f"({back_to_back_calls} calls per dispatch: {type(exc).__name__}: {str(exc)[:200]})",
                        RuntimeWarning,
                        stacklevel=2,
                    )
            return runner
    return LayerRunner(eager, "eager", tensors)


def back_to_back_fn(layer, arguments, is_layer: bool, calls: int,
                    backend: str | None = None) -> Callable[[list], Any]:
    """One jitted program that runs the layer `calls` times back to back (a single host dispatch), for
    energy windows where the GPU runs the layer as it does inside the model: a layer jitted alone and
    dispatched per call spends tens of microseconds of host dispatch per call on the H200
    (benchmarks/results/nvidia-h200-records-resnet50-mobilenetv2-windows-2026-12-04/resnet50-jax-*.json), and
    the GPU idles for most of a small layer's call. Every call's output is returned (each call writes
    its output, as in the model); the backend's back_to_back keeps the calls from being merged or hoisted."""
    compiled, values = back_to_back_program(layer, arguments, is_layer, calls, backend)
    return lambda ts: compiled(values, ts)


def back_to_back_program(layer, arguments, is_layer: bool, calls: int,
                         backend: str | None = None) -> tuple[Callable[[list, list], Any], list]:
    """(the jitted program of back_to_back_fn, taking (variable values, tensors); the values)."""
    if calls < 1:
        raise MeasurementError(f"Expected calls >= 1, Received: calls={calls}")
    pure, values = stateless_layer(layer, arguments, is_layer)
    return backends.get(backend).back_to_back(pure, calls), values


def _select(calls: list[LayerCall], only: Collection[str] | None) -> list[LayerCall]:
    if only is None:
        return calls
    wanted = set(only)
    known = {c.path for c in calls}
    missing = sorted(wanted - known)
    if missing:
        raise MeasurementError(f"Expected layer names from the model, Received unknown: {missing}")
    return [c for c in calls if c.path in wanted]


def measure_layer_calls(
    calls: Iterable[LayerCall],
    *,
    gpu: GPU | None = None,
    min_window_s: float,
    repeats: int,
    warmup: int,
    training: bool = False,
    progress: bool = True,
    graphs: bool = True,
    back_to_back_calls: int = 0,
) -> list[LayerMeasurement]:
    """Measure already-walked layer calls one by one (see measure_layers). jax with back_to_back_calls > 0:
    each jitted layer also gets windows of that many calls per dispatch (LayerMeasurement.back_to_back)."""
    framework = backends.get()
    calls = list(calls)
    results: list[LayerMeasurement] = []
    with progress_bar(progress) as bar:
        task = bar.add_task("layers", total=len(calls))
        for call in calls:
            bar.update(task, description=call.path)
            with expecting(f"layer '{call.path}' ({type(call.layer).__name__}) to run on inputs "
                           f"{list(call.input_shapes)} {list(call.input_dtypes)}"):
                runner = layer_runner(call, training=training, backend=framework.name, graphs=graphs,
                                      warmup=warmup, back_to_back_calls=back_to_back_calls)
                m = measure_calls(runner.fn, gpu, framework, min_window_s=min_window_s, repeats=repeats,
                                  warmup=warmup, inference=not training)
                b2b = None
                if runner.back_to_back is not None:
                    mb = measure_calls(runner.back_to_back, gpu, framework, min_window_s=min_window_s,
                                       repeats=repeats, warmup=warmup, inference=not training)
                    b2b = back_to_back_record(mb, runner.calls_per_dispatch)
            results.append(LayerMeasurement(
                name=call.path,
                type=type(call.layer).__name__,
                time_s=m.time_per_call_s,
                time_spread=m.time_spread_rel,
                repeats=m.n_windows,
                energy_j=m.energy_per_call_j,
                power_w=m.power_w,
                sm_clock_mhz=m.sm_clock_mhz,
                execution=runner.execution,
                back_to_back=b2b,
            ))
            del runner  # frees the synthetic inputs before the next layer allocates its own
            bar.advance(task)
    return results


def measure_layers(
    model,
    *,
    batch_size: int,
    gpu: GPU | None = None,
    training: bool = False,
    progress: bool = True,
    only: Collection[str] | None = None,
    command: str | None = None,
    graphs: bool = True,
    **windows: Unpack[Windows],
) -> RunMeasurement:
    """Time (and with `gpu`, energy, power and SM clock of) every layer call of `model`, alone.

    Layer names are the walker's paths. `only` restricts the run to these names. `gpu=None` measures
    time only (energy, power and clock are None). torch on a CUDA GPU replays each layer from a CUDA
    graph unless `graphs=False` (see the module docstring). The returned record has no whole-model
    figures; see measure_run for both.
    """
    o = MeasureOptions.resolve(**windows)
    return measure_layers_with(model, batch_size, gpu, o, training=training, progress=progress, only=only,
                               command=command, graphs=graphs)


def measure_layers_with(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *, training: bool = False,
                        progress: bool = True, only: Collection[str] | None = None, command: str | None = None,
                        graphs: bool = True) -> RunMeasurement:
    """measure_layers with its windows already resolved (measure_run resolves them once for layers and model)."""
    start_s = time.perf_counter()
    calls = _select(list(iter_layer_calls(model, batch_size)), only)
    layers = measure_layer_calls(calls, gpu=gpu, min_window_s=o.layer_window_s, repeats=o.layer_repeats,
                                 warmup=o.warmup, training=training, progress=progress, graphs=graphs)
    run = run_record(model, batch_size=batch_size, gpu=gpu, command=command)
    run.layers = layers
    run.settings = {"preset": o.preset, "layer_window_s": o.layer_window_s, "layer_repeats": o.layer_repeats,
                    "warmup": o.warmup, "training": training, "graphs": bool(graphs), **trace_settings(run.backend)}
    run.wall_s = time.perf_counter() - start_s
    return run

