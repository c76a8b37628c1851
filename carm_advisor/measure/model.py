"""Measure the whole model: inference as the user runs it (eagerly, or jitted on jax), one training step,
and on torch with a CUDA GPU, inference replayed from one CUDA graph (its GPU time without dispatch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras

from carm_advisor.measure import backends
from carm_advisor.measure.backends import Backend
from carm_advisor.measure.execution import Capture, inference_fn, try_capture, uses_cuda_graphs
from carm_advisor.measure.inputs import ModelInputs, model_inputs
from carm_advisor.measure.records import ModelMeasurement
from carm_advisor.measure.windows import MeasureOptions, Windows, expecting, measure_calls, to_model_measurement
from carm_advisor.power._base import GPU

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.12


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
    return measure_model_with(model, batch_size, gpu, o, training_step=training_step)


def measure_model_with(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *,
                       training_step: bool) -> tuple[ModelMeasurement, ModelMeasurement | None]:
    """measure_model with its windows already resolved (the model windows of `o`)."""
    window_s, n, w = o.model_window_s, o.model_repeats, o.warmup
    framework = backends.get()
    x = model_inputs(model, batch_size)
    with expecting(f"model '{model.name}' to run on batch {batch_size}"):
        fn, execution = inference_fn(model, x, framework.name)
        inference = to_model_measurement(
            measure_calls(fn, gpu, framework, min_window_s=window_s, repeats=n, warmup=w, inference=True), execution
        )
        if not training_step:
            return inference, None
        with framework.inference_context():
            outputs = fn()
        return inference, _measure_training_step(model, x, outputs, gpu, framework, window_s, n, w)


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
    return measure_model_graph_with(model, batch_size, gpu, o, capture=capture)


def measure_model_graph_with(model, batch_size: int, gpu: GPU | None, o: MeasureOptions, *,
                             capture: Capture | None = None) -> ModelMeasurement | None:
    """measure_model_graph with its windows already resolved (the layer windows of `o`)."""
    framework = backends.get()
    if not uses_cuda_graphs(framework.name):
        return None
    x = model_inputs(model, batch_size)
    replay = try_capture(lambda: x.call(model, training=False), capture, o.warmup, f"model '{model.name}'",
                         framework.name)
    if replay is None:
        return None
    with expecting(f"model '{model.name}' to replay its CUDA graph on batch {batch_size}"):
        m = measure_calls(replay, gpu, framework, min_window_s=o.layer_window_s, repeats=o.layer_repeats,
                          warmup=o.warmup, inference=True)
    return to_model_measurement(m, "cuda_graph")


def _measure_training_step(model, inputs: ModelInputs, outputs, gpu: GPU | None, framework: Backend,
                           window_s: float, repeats: int, warmup: int) -> ModelMeasurement:
    x = inputs.single(model, "a training step (train_on_batch)")
    y = keras.tree.map_structure(
        lambda o: keras.random.normal(tuple(o.shape), dtype="float32", seed=7), outputs
    )
    user_config = model.get_compile_config() if getattr(model, "compiled", False) else None
    weights = model.get_weights()
    model.compile(optimizer="sgd", loss="mse")
    try:
        # train_on_batch returns host numbers, so each call already ends synchronised.
        m = measure_calls(lambda: model.train_on_batch(x, y), gpu, framework, min_window_s=window_s,
                          repeats=repeats, warmup=warmup, inference=False)
    finally:
        model.set_weights(weights)
        if user_config is not None:
            model.compile_from_config(user_config)
    compiled = framework.compiles_train_step or bool(getattr(model, "jit_compile", False))
    return to_model_measurement(m, "jit" if compiled else "eager")
