"""How a call measured alone runs: eagerly, jitted as a stateless call, or replayed from a CUDA graph.

- torch on a CUDA GPU, at inference: "cuda_graph" (the backend's capture_cuda_graph), unless graphs=False.
- jax (Backend.jit_execution): "jit", a stateless call under the backend's jit, so dispatch does not dominate.
- everything else: "eager", as `model(x)` would run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import keras

from carm_advisor.measure import backends
from carm_advisor.measure.inputs import ModelInputs, training_argument

# (fn, warmup=...) -> a zero-argument replay of fn's captured device work; a test injects a fake.
Capture = Callable[..., Callable[[], Any]]

# What `settings["jax_layer_trace"]` says in records whose jax layers were jitted by jit_layer_fn below.
# Records without it were traced through layer.stateless_call (no autocast): their mixed-precision
# per-layer jit times are float32 computations (RunMeasurement.jit_layers_in_policy_dtype).
JAX_LAYER_TRACE = "__call__ in a StatelessScope (policy dtype)"


def uses_cuda_graphs(backend: str, *, graphs: bool = True, training: bool = False) -> bool:
    """Whether calls are captured into CUDA graphs: torch on a CUDA GPU, at inference, unless graphs=False.

    Training calls stay eager: a graph of the forward alone under autograd is not what a step runs.
    """
    return bool(graphs) and not training and backends.get(backend).can_capture_cuda_graphs()


def try_capture(fn: Callable[[], Any], capture: Capture | None, warmup: int, what: str,
                backend: str | None = None) -> Callable[[], Any] | None:
    """fn's CUDA-graph replay (by `capture`, default the backend's capture_cuda_graph), or None (with a
    RuntimeWarning naming `what`) when the capture fails."""
    capture = capture if capture is not None else backends.get(backend).capture_cuda_graph
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


def trace_settings(backend: str) -> dict[str, str]:
    """The record settings that say how layers were jitted alone (jax only)."""
    return {"jax_layer_trace": JAX_LAYER_TRACE} if backends.get(backend).jit_execution else {}


def stateless_layer(layer, arguments, is_layer: bool) -> tuple[Callable[[list, list], Any], list]:
    """(pure(variable values, tensors) -> outputs, the variables' values) of a layer or keras.ops call;
    arguments(tensors) -> (args, kwargs) of the call."""
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


def jit_layer_fn(layer, arguments, is_layer: bool, backend: str | None = None) -> Callable[[list], Any]:
    """tensors -> the layer's outputs, its stateless call compiled by the backend's jit (on the first call)."""
    pure, values = stateless_layer(layer, arguments, is_layer)
    compiled = backends.get(backend).jit(pure)
    return lambda ts: compiled(values, ts)


def inference_fn(model, x: ModelInputs, backend: str | None = None) -> tuple[Callable[[], Any], str]:
    """A zero-argument whole-model inference call on x and its execution: jitted stateless (jit_execution
    backends: "jit"), else the model called eagerly as the user calls it ("eager")."""
    framework = backends.get(backend)
    if framework.jit_execution:
        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        training = training_argument(model)   # stateless_call hands it to call(), which may take none
        compiled = framework.jit(lambda tv, ntv, args, kwargs: model.stateless_call(tv, ntv, *args, **training,
                                                                                   **kwargs)[0])
        return (lambda: compiled(trainable, non_trainable, x.args, x.kwargs)), "jit"
    return (lambda: x.call(model, training=False)), "eager"
