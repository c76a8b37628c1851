"""Measure each layer, and the whole model, as it really runs in the active Keras 3 backend.

Each layer call the walker lists (carm_advisor.mapping.walker.iter_layer_calls) is run alone on
synthetic inputs of its real shapes and dtypes, on the backend's device, the way the model calls it
(the recorded call arguments of its graph node). Warm-up calls first, then
carm_advisor.power.energy.measure_energy times repeated windows of back-to-back calls, with the
backend's own device sync at the window ends, and reads NVML energy, power and SM clock when a GPU is
given. The record says how each call ran ("execution"):

- torch on a CUDA GPU (inference, the default): "cuda_graph". The layer call is captured once into a
  torch.cuda.CUDAGraph and the windows time its replays. Eagerly, a small layer's Python/Keras dispatch
  (150-450 us on an H200) exceeds its GPU work, which inside the whole model the GPU queue hides; the
  replay measures the GPU work alone. A layer whose capture fails runs eagerly (with a warning).
  `graphs=False` measures eagerly. The whole model is measured eagerly, as the user runs it
  (`inference`), and replayed from one graph too (`inference_graph`, with the layer windows): the GPU
  time the sum of the layers' graph times compares with.
- jax: "jit", a stateless call under jax.jit, so dispatch does not dominate.
- tensorflow, and torch on a CPU or in training: "eager", as `model(x)` would run.

Windows: a preset trades time against energy accuracy. NVML's energy counter moves in ~100 ms steps,
so one window's energy is uncertain by up to about 0.1 s / window (see power/energy.py); the median of
the windows damps it. Times are good to a few percent even with short windows.

| preset     | layer windows | model windows | VGG16 b64 on an H200, ~22 layers + model      |
| ---------- | ------------- | ------------- | --------------------------------------------- |
| "fast"     | 2 x 0.1 s     | 2 x 0.5 s     | ~10 s; layer energy only indicative (+-50%)   |
| "standard" | 2 x 0.25 s    | 2 x 1.0 s     | ~20-25 s; layer energy +-20% worst case, model a few % |
| "accurate" | 3 x 1.0 s     | 3 x 2.0 s     | ~80 s; layer energy a few %                   |

Explicit `min_window_s` / `repeats` override the preset's layer windows. Windows are time-based, so a
graph replay does not shorten them; torch on a GPU adds one layer-window measurement (the whole model
replayed from a graph, ~0.6 s with "standard").
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import inspect
import shlex
import sys
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, TypedDict

import keras

from carm_advisor.errors import MappingError, MeasurementError, PowerError
from carm_advisor.mapping.given_shapes import call_arguments
from carm_advisor.mapping.types import LayerCall
from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure import backend as _backend
from carm_advisor.measure.records import LayerMeasurement, ModelMeasurement, RunMeasurement
from carm_advisor.power._base import GPU
from carm_advisor.power.energy import EnergyMeasurement, measure_energy

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.12


@dataclass(frozen=True)
class Preset:
    layer_window_s: float
    layer_repeats: int
    model_window_s: float
    model_repeats: int
    warmup: int


PRESETS: dict[str, Preset] = {
    "fast": Preset(layer_window_s=0.1, layer_repeats=2, model_window_s=0.5, model_repeats=2, warmup=2),
    "standard": Preset(layer_window_s=0.25, layer_repeats=2, model_window_s=1.0, model_repeats=2, warmup=3),
    "accurate": Preset(layer_window_s=1.0, layer_repeats=3, model_window_s=2.0, model_repeats=3, warmup=3),
}


class Windows(TypedDict, total=False):
    """The window keywords every measure_* function takes: a preset and explicit overrides of it."""

    preset: str                  # "fast" | "standard" | "accurate" (PRESETS); default "standard"
    min_window_s: float | None   # the layer windows (measure_model: the whole-model windows)
    repeats: int | None
    warmup: int | None


class RunWindows(Windows, total=False):
    model_min_window_s: float | None   # measure_run's whole-model windows
    model_repeats: int | None


@dataclass(frozen=True)
class MeasureOptions:
    """The windows of one measurement: a preset's, with any explicit override, resolved once."""

    preset: str
    layer_window_s: float
    layer_repeats: int
    model_window_s: float
    model_repeats: int
    warmup: int

    @classmethod
    def resolve(cls, preset: str = "standard", *, min_window_s: float | None = None, repeats: int | None = None,
                warmup: int | None = None, model_min_window_s: float | None = None,
                model_repeats: int | None = None, scope: str = "layer") -> "MeasureOptions":
        """scope="model": min_window_s and repeats set the whole-model windows (measure_model's meaning)."""
        if scope == "model":
            model_min_window_s, model_repeats, min_window_s, repeats = min_window_s, repeats, None, None
        try:
            p = PRESETS[preset]
        except KeyError:
            raise MeasurementError(f"Expected preset in {sorted(PRESETS)}, Received: preset={preset!r}") from None

        def given(value, default):
            return default if value is None else value

        return cls(preset, given(min_window_s, p.layer_window_s), given(repeats, p.layer_repeats),
                   given(model_min_window_s, p.model_window_s), given(model_repeats, p.model_repeats),
                   given(warmup, p.warmup))


@contextlib.contextmanager
def _expecting(expected: str):
    """One line naming what was expected to run when a backend raises; our own errors pass unchanged."""
    try:
        yield
    except (MeasurementError, PowerError):
        raise
    except Exception as exc:  # backends raise anything
        raise MeasurementError(f"Expected {expected}; Received {type(exc).__name__}: {exc}") from exc


# ---- synthetic inputs ------------------------------------------------------------------------


def _is_integer_dtype(dtype: str) -> bool:
    return "int" in dtype or dtype == "bool"


def synthetic_tensor(shape: tuple[int, ...], dtype: str, *, int_high: int = 2, seed: int = 0,
                     whole_floats: bool = False):
    """A backend tensor on the backend's default device (the GPU when there is one).

    Floats are standard normal (no denormals, no zeros that could shortcut work); integers are drawn
    from [0, int_high) so an Embedding gets valid indices. whole_floats: floats drawn as whole numbers in
    [0, ids_high(int_high)), ids an Embedding can cast (ids_as_floats).
    """
    dtype = str(dtype)
    if dtype == "bool":
        return keras.ops.cast(keras.random.randint(shape, 0, 2, seed=seed), "bool")
    if _is_integer_dtype(dtype) or whole_floats:
        high = max(int(int_high), 1) if not whole_floats else ids_high(int_high)
        ids = keras.random.randint(shape, 0, high, dtype="int32", seed=seed)
        return keras.ops.cast(ids, dtype)
    return keras.ops.cast(keras.random.normal(shape, dtype="float32", seed=seed), dtype)


def _int_high(layer: Any) -> int:
    return int(getattr(layer, "input_dim", 0) or 2)


def _model_int_high(model) -> int:
    dims = [int(l.input_dim) for l in getattr(model, "_flatten_layers", lambda **_: [])() if hasattr(l, "input_dim")]
    return min(dims) if dims else 2


def ids_as_floats(model) -> bool:
    """Whether a subclassed model's float call() arguments carry token ids: it holds an Embedding, and Keras records
    no dtype for the arguments it was built on, so its ids may come as floats the Embedding casts to integers.
    Standard-normal floats would cast to negative ids (a CUDA index error on torch); whole numbers below the
    vocabulary (ids_high) are valid ids and ordinary data for any other argument."""
    return not list(getattr(model, "inputs", None) or []) and any(
        hasattr(l, "input_dim") for l in getattr(model, "_flatten_layers", lambda **_: [])())


def ids_high(int_high: int) -> int:
    """Whole numbers below this are exact in float16 and bfloat16 (256) and inside the vocabulary."""
    return max(1, min(int(int_high), 256))


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


def _argument_builder(call: LayerCall) -> Callable[[list], tuple[tuple, dict]]:
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
    return lambda tensors: (tuple(tensors), {})


@dataclass
class LayerRunner:
    """One layer call ready to run: `fn()` runs it once on the device and returns its outputs."""

    fn: Callable[[], Any]
    execution: str  # "eager" | "jit" | "cuda_graph" (fn replays the captured graph and returns None)
    tensors: list
    back_to_back: Callable[[], Any] | None = None   # jax: calls_per_dispatch calls in one jitted program
    calls_per_dispatch: int = 1


# (fn, warmup=...) -> a zero-argument replay of fn's captured device work; a test injects a fake.
Capture = Callable[..., Callable[[], Any]]


def uses_cuda_graphs(backend: str, *, graphs: bool = True, training: bool = False) -> bool:
    """Whether calls are captured into CUDA graphs: torch on a CUDA GPU, at inference, unless graphs=False.

    Training calls stay eager: a graph of the forward alone under autograd is not what a step runs.
    """
    return bool(graphs) and not training and backend == "torch" and _backend.has_gpu("torch")


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

    jax with back_to_back_calls > 0: also `back_to_back`, one jitted program running the layer that many
    times (jax_back_to_back_fn), compiled here.

    torch on a CUDA GPU (see uses_cuda_graphs): the call is captured into a CUDA graph after `warmup`
    eager calls, by `capture` (default: backend.capture_cuda_graph); if that raises, the runner is
    eager and a RuntimeWarning names the layer.
    """
    backend = backend or _backend.active_backend()
    layer = call.layer
    high = _int_high(layer)
    tensors = [
        synthetic_tensor(shape, dtype, int_high=high, seed=seed + i)
        for i, (shape, dtype) in enumerate(zip(call.input_shapes, call.input_dtypes))
    ]
    build = _argument_builder(call)
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

    if uses_cuda_graphs(backend, graphs=graphs, training=training):
        replay = _try_capture(eager, capture, warmup, f"layer '{call.path}' ({type(layer).__name__})")
        if replay is not None:
            return LayerRunner(replay, "cuda_graph", tensors)
    elif backend == "jax":
        jitted = _jax_layer_fn(layer, arguments, is_layer)
        try:
            _backend.sync(jitted(tensors), "jax")  # compile now, outside any timing
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
                    looped = jax_back_to_back_fn(layer, arguments, is_layer, back_to_back_calls)
                    _backend.sync(looped(tensors), "jax")
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


def _try_capture(fn: Callable[[], Any], capture: Capture | None, warmup: int, what: str) -> Callable[[], Any] | None:
    """fn's CUDA-graph replay, or None (with a RuntimeWarning naming `what`) when the capture fails."""
    capture = capture if capture is not None else _backend.capture_cuda_graph
    try:
        return capture(fn, warmup=warmup)
    except Exception as exc:  # anything a capture forbids (host sync, pageable copy, RNG...): run eagerly
        warnings.warn(
            f"carm_advisor: {what} could not be captured into a CUDA graph "
            f"({type(exc).__name__}: {str(exc)[:200]}); measuring it eagerly",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


# What `settings["jax_layer_trace"]` says in records whose jax layers were jitted by _jax_layer_fn below.
# Records without it were traced through layer.stateless_call (no autocast): their mixed-precision
# per-layer jit times are float32 computations (RunMeasurement.jit_layers_in_policy_dtype).
JAX_LAYER_TRACE = "__call__ in a StatelessScope (policy dtype)"


def trace_settings(backend: str) -> dict[str, str]:
    """The record settings that say how layers were jitted alone (jax only)."""
    return {"jax_layer_trace": JAX_LAYER_TRACE} if backend == "jax" else {}


def _jax_layer_fn(layer, arguments, is_layer: bool) -> Callable[[list], Any]:
    import jax

    pure, values = _jax_pure(layer, arguments, is_layer)
    compiled = jax.jit(pure)
    return lambda ts: compiled(values, ts)


def jax_back_to_back_fn(layer, arguments, is_layer: bool, calls: int) -> Callable[[list], Any]:
    """One jitted program that runs the layer `calls` times back to back (a single host dispatch), for
    energy windows where the GPU runs the layer as it does inside the model: a layer jitted alone and
    dispatched per call spends tens of microseconds of host dispatch per call on the H200 (benchmarks/results/nvidia-h200-records-resnet50-mobilenetv2-windows-2026-12-04/resnet50-jax-*.json), and
    the GPU idles for most of a small layer's call. Every call's output is returned (each call writes
    its output, as in the model), and call k+1's first input is call k's with one element changed by
    isnan(one element of call k's output): 0 for finite outputs, so the data are the same, but XLA
    cannot prove it, so it can neither merge the calls nor hoist them. The extra work per call is one
    one-element update (in place after the first)."""
    compiled, values = jax_back_to_back_program(layer, arguments, is_layer, calls)
    return lambda ts: compiled(values, ts)


def jax_back_to_back_program(layer, arguments, is_layer: bool, calls: int) -> tuple[Callable[[list, list], Any], list]:
    """(the jitted program of jax_back_to_back_fn, taking (variable values, tensors); the values)."""
    import jax
    import jax.numpy as jnp

    if calls < 1:
        raise MeasurementError(f"Expected calls >= 1, Received: calls={calls}")
    pure, values = _jax_pure(layer, arguments, is_layer)

    def looped(vs, ts):
        first, rest = ts[0], list(ts[1:])
        outs = []
        for _ in range(calls):
            out = pure(vs, [first, *rest])
            outs.append(out)
            leaf = jax.tree_util.tree_leaves(out)[0]
            probe = jnp.isnan(jnp.ravel(leaf)[0].astype("float32")).astype(first.dtype)
            first = first.at[(0,) * first.ndim].add(probe)
        return outs

    return jax.jit(looped), values


def _jax_pure(layer, arguments, is_layer: bool) -> tuple[Callable[[list, list], Any], list]:
    """(pure(variable values, tensors) -> outputs, the variables' values) of a layer or keras.ops call."""
    if not is_layer:  # a keras.ops operation: no state
        return (lambda vs, ts: layer(*arguments(ts)[0], **arguments(ts)[1])), []
    variables = [*layer.trainable_variables, *layer.non_trainable_variables]
    values = [v.value for v in variables]

    # The layer's __call__ inside a StatelessScope, not layer.stateless_call: stateless_call runs call()
    # without __call__'s autocast, so under mixed_bfloat16 / mixed_float16 the float32 variables promoted
    # the layer to float32 (DepthwiseConv2D even failed to trace) and the layer was timed in the wrong
    # precision. __call__ computes in the policy's dtype, as the model does.
    def pure(vs, ts):
        args, kwargs = arguments(ts)
        with keras.StatelessScope(state_mapping=list(zip(variables, vs))):
            return layer(*args, **kwargs)

    return pure, values


# ---- measuring -------------------------------------------------------------------------------


def _measure(fn: Callable[[], Any], gpu: GPU | None, backend: str, *, min_window_s: float, repeats: int,
             warmup: int, inference: bool) -> EnergyMeasurement:
    syncer = _backend.Synchronizer(backend)
    tracked = syncer.track(fn)
    context = _backend.inference_context(backend) if inference else contextlib.nullcontext()
    with context:
        return measure_energy(tracked, gpu, min_window_s=min_window_s, repeats=repeats, sync=syncer, warmup=warmup)


def back_to_back_record(m: EnergyMeasurement, calls_per_dispatch: int) -> dict[str, Any]:
    """LayerMeasurement.back_to_back from windows of a program running the layer calls_per_dispatch times:
    time and energy per LAYER call, the window's power and clock."""
    k = calls_per_dispatch
    return {"time_s": m.time_per_call_s / k, "time_spread": m.time_spread_rel,
            "energy_j": m.energy_per_call_j / k if m.energy_per_call_j is not None else None,
            "power_w": m.power_w, "sm_clock_mhz": m.sm_clock_mhz, "calls_per_dispatch": k,
            "repeats": m.n_windows, "execution": "jit_back_to_back"}


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]measuring[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=not enabled,
    )


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
    backend = _backend.active_backend()
    calls = list(calls)
    results: list[LayerMeasurement] = []
    with _progress(progress) as bar:
        task = bar.add_task("layers", total=len(calls))
        for call in calls:
            bar.update(task, description=call.path)
            with _expecting(f"layer '{call.path}' ({type(call.layer).__name__}) to run on inputs "
                            f"{list(call.input_shapes)} {list(call.input_dtypes)}"):
                runner = layer_runner(call, training=training, backend=backend, graphs=graphs, warmup=warmup,
                                      back_to_back_calls=back_to_back_calls)
                m = _measure(runner.fn, gpu, backend, min_window_s=min_window_s, repeats=repeats,
                             warmup=warmup, inference=not training)
                b2b = None
                if runner.back_to_back is not None:
                    mb = _measure(runner.back_to_back, gpu, backend, min_window_s=min_window_s, repeats=repeats,
                                  warmup=warmup, inference=not training)
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
    return _measure_layers(model, batch_size, gpu, o, training=training, progress=progress, only=only,
                           command=command, graphs=graphs)


def _measure_layers(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *, training: bool = False,
                    progress: bool = True, only: Collection[str] | None = None, command: str | None = None,
                    graphs: bool = True) -> RunMeasurement:
    start_s = time.perf_counter()
    calls = _select(list(iter_layer_calls(model, batch_size)), only)
    layers = measure_layer_calls(calls, gpu=gpu, min_window_s=o.layer_window_s, repeats=o.layer_repeats,
                                 warmup=o.warmup, training=training, progress=progress, graphs=graphs)
    run = _run_record(model, batch_size=batch_size, gpu=gpu, command=command)
    run.layers = layers
    run.settings = {"preset": o.preset, "layer_window_s": o.layer_window_s, "layer_repeats": o.layer_repeats,
                    "warmup": o.warmup, "training": training, "graphs": bool(graphs), **trace_settings(run.backend)}
    run.wall_s = time.perf_counter() - start_s
    return run


@dataclass(frozen=True)
class ModelInputs:
    """Synthetic arguments of one whole-model call, ``model(*args, **kwargs, training=False)``: one input (a
    tensor, or a list of them) for a Functional or Sequential model; for a subclassed model, those its call() is
    traced on by the mapping (the shapes analyze() was given, else the ones Keras recorded at its build)."""

    args: tuple
    kwargs: dict

    def call(self, model, **extra):
        return model(*self.args, **self.kwargs, **extra)

    def single(self, model, purpose: str):
        """The one input structure ``purpose`` (Keras' ``x``) takes; MeasurementError for a call() of several."""
        if len(self.args) == 1 and not self.kwargs:
            return self.args[0]
        raise MeasurementError(
            f"Expected model '{model.name}' to take one input for {purpose}, Received: a call() of "
            f"{len(self.args) + len(self.kwargs)} tensor arguments"
        )


def _functional_inputs(model) -> list:
    inputs = getattr(model, "inputs", None)
    try:
        return list(inputs) if inputs else []
    except (AttributeError, TypeError):
        return []


def subclassed_call_specs(model, batch_size: int) -> tuple[list, dict]:
    """What a subclassed model (no model.inputs) is called on as a whole, as KerasTensors at ``batch_size``:
    (positional, keyword) arguments, those the mapping traces its call() on (walker.call_arguments); else a
    MeasurementError. Whole-model measurement and the tuner's worker both feed these."""
    try:
        specs = call_arguments(model, batch_size)
    except MappingError as exc:
        raise MeasurementError(f"{exc} (whole-model measurement calls it on them)") from None
    if specs is None:
        raise MeasurementError(
            f"Expected model '{model.name}' to have known inputs (a Functional or Sequential model, or a "
            "subclassed one called once), Received: none; whole-model measurement needs them"
        )
    return specs


def _model_inputs(model, batch_size: int) -> ModelInputs:
    inputs = _functional_inputs(model)
    high = _model_int_high(model)
    if not inputs:   # a subclassed model: what the mapping traces its call() on
        specs = subclassed_call_specs(model, batch_size)
        seeds = iter(range(1000, 10**6))
        whole = ids_as_floats(model)
        args, kwargs = keras.tree.map_structure(
            lambda s: synthetic_tensor(tuple(s.shape), str(s.dtype), int_high=high, seed=next(seeds),
                                       whole_floats=whole), specs)
        return ModelInputs(tuple(args), dict(kwargs))
    tensors = []
    for i, tensor in enumerate(inputs):
        shape = tuple(tensor.shape)
        # The batch asked for, also where the model fixes one: the mapping costs that batch (walker), and a
        # measured time must be of the same batch for per-sample figures to mean anything.
        shape = ((batch_size,) + shape[1:]) if shape else shape
        if any(d is None for d in shape):
            raise MeasurementError(
                f"Expected model inputs with known dimensions besides the batch, Received: {tuple(tensor.shape)}"
            )
        tensors.append(synthetic_tensor(shape, str(tensor.dtype), int_high=high, seed=1000 + i))
    return ModelInputs((functional_structure(model, tensors),), {})


def functional_structure(model, flat: list):
    """A Functional model's inputs, one per model.inputs, in the structure it was built on (a dict of named
    inputs is called with that dict); one input alone, several as a list where it was built on a list."""
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, (dict, list, tuple)) and len(keras.tree.flatten(struct)) == len(flat):
        return keras.tree.pack_sequence_as(struct, flat)
    return flat[0] if len(flat) == 1 else flat


def _training_argument(model) -> dict:
    """{"training": False} where the model's call() takes it (a Functional model's does), else {}."""
    try:
        params = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return {}
    takes = any(p.name == "training" or p.kind == p.VAR_KEYWORD for p in params)
    return {"training": False} if takes else {}


def _inference_fn(model, x: ModelInputs, backend: str) -> tuple[Callable[[], Any], str]:
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        training = _training_argument(model)   # stateless_call hands it to call(), which may take none
        compiled = jax.jit(lambda tv, ntv, args, kwargs: model.stateless_call(tv, ntv, *args, **training,
                                                                              **kwargs)[0])
        return (lambda: compiled(trainable, non_trainable, x.args, x.kwargs)), "jit"
    return (lambda: x.call(model, training=False)), "eager"


def _to_model_measurement(m: EnergyMeasurement, execution: str) -> ModelMeasurement:
    return ModelMeasurement(
        time_s=m.time_per_call_s,
        time_spread=m.time_spread_rel,
        energy_j=m.energy_per_call_j,
        power_w=m.power_w,
        sm_clock_mhz=m.sm_clock_mhz,
        repeats=m.n_windows,
        execution=execution,
    )


def measure_model(
    model,
    *,
    batch_size: int,
    gpu: GPU | None = None,
    training_step: bool = True,
    **windows: Unpack[Windows],
) -> tuple[ModelMeasurement, ModelMeasurement | None]:
    """The whole model: inference `model(x, training=False)` and, optionally, one training step.

    The training step is `train_on_batch` with SGD and mean squared error against random targets: a
    portable forward + backward + update in every backend. The model is compiled for it (a user's
    compile configuration is restored afterwards) and its weights are restored afterwards.
    """
    o = MeasureOptions.resolve(**windows, scope="model")
    return _measure_model(model, batch_size, gpu, o, training_step=training_step)


def _measure_model(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *,
                   training_step: bool) -> tuple[ModelMeasurement, ModelMeasurement | None]:
    window_s, n, w = o.model_window_s, o.model_repeats, o.warmup
    backend = _backend.active_backend()
    x = _model_inputs(model, batch_size)
    with _expecting(f"model '{model.name}' to run on batch {batch_size}"):
        fn, execution = _inference_fn(model, x, backend)
        inference = _to_model_measurement(
            _measure(fn, gpu, backend, min_window_s=window_s, repeats=n, warmup=w, inference=True), execution
        )
        if not training_step:
            return inference, None
        with _backend.inference_context(backend):
            outputs = fn()
        return inference, _measure_training_step(model, x, outputs, gpu, backend, window_s, n, w)


def measure_model_graph(
    model,
    *,
    batch_size: int,
    gpu: GPU | None = None,
    capture: Capture | None = None,
    **windows: Unpack[Windows],
) -> ModelMeasurement | None:
    """Inference `model(x, training=False)` replayed from one CUDA graph: the model's GPU time, no dispatch.

    torch on a CUDA GPU only: None elsewhere, and None with a RuntimeWarning when the capture fails.
    The windows default to the preset's *layer* windows: this is the reference the sum of the layers'
    graph times is compared with, measured the same way (times are good to a few percent even so).
    """
    o = MeasureOptions.resolve(**windows)
    return _measure_model_graph(model, batch_size, gpu, o, capture=capture)


def _measure_model_graph(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *,
                         capture: Capture | None = None) -> ModelMeasurement | None:
    backend = _backend.active_backend()
    if not uses_cuda_graphs(backend):
        return None
    x = _model_inputs(model, batch_size)
    replay = _try_capture(lambda: x.call(model, training=False), capture, o.warmup, f"model '{model.name}'")
    if replay is None:
        return None
    with _expecting(f"model '{model.name}' to replay its CUDA graph on batch {batch_size}"):
        m = _measure(replay, gpu, backend, min_window_s=o.layer_window_s, repeats=o.layer_repeats, warmup=o.warmup,
                     inference=True)
    return _to_model_measurement(m, "cuda_graph")


def _measure_training_step(model, inputs: ModelInputs, outputs, gpu, backend, window_s, repeats,
                           warmup) -> ModelMeasurement:
    x = inputs.single(model, "a training step (train_on_batch)")
    y = keras.tree.map_structure(
        lambda o: keras.random.normal(tuple(o.shape), dtype="float32", seed=7), outputs
    )
    user_config = model.get_compile_config() if getattr(model, "compiled", False) else None
    weights = model.get_weights()
    model.compile(optimizer="sgd", loss="mse")
    try:
        # train_on_batch returns host numbers, so each call already ends synchronised.
        m = _measure(lambda: model.train_on_batch(x, y), gpu, backend, min_window_s=window_s,
                     repeats=repeats, warmup=warmup, inference=False)
    finally:
        model.set_weights(weights)
        if user_config is not None:
            model.compile_from_config(user_config)
    compiled = backend in ("jax", "tensorflow") or bool(getattr(model, "jit_compile", False))
    return _to_model_measurement(m, "jit" if compiled else "eager")


# ---- a whole run -----------------------------------------------------------------------------


def _device_info(gpu: GPU | None, backend: str) -> dict:
    info: dict[str, Any] = {"backend_device": _backend.device_name(backend)}
    if gpu is None:
        info["name"] = info["backend_device"]
        return info
    queries = {"name": gpu.name, "uuid": gpu.uuid, "driver": gpu.driver_version,
               "power_limit_w": gpu.power_limit_w, "max_sm_clock_mhz": gpu.max_sm_clock_mhz}
    for key, query in queries.items():
        try:
            info[key] = query()
        except PowerError:  # a query the driver does not support leaves its key out
            pass
    info.setdefault("name", info["backend_device"])
    return info


def _run_record(model, *, batch_size: int, gpu: GPU | None, command: str | None) -> RunMeasurement:
    backend = _backend.active_backend()
    policy = getattr(model, "dtype_policy", None) or keras.config.dtype_policy()
    return RunMeasurement(
        device=_device_info(gpu, backend),
        backend=backend,
        backend_version=_backend.backend_version(backend),
        keras_version=keras.__version__,
        batch_size=batch_size,
        precision=str(getattr(policy, "name", policy)),
        layout=keras.config.image_data_format(),
        math_mode=_backend.math_mode(backend),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command if command is not None else shlex.join(sys.argv),
        model_name=str(getattr(model, "name", "")),
    )
