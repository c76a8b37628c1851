"""Synthetic inputs: one tensor of a given shape and dtype, and the arguments of one whole-model call.

Floats are standard normal; integer ids stay inside the model's vocabulary; a Functional model gets one
tensor per model.inputs in the structure it was built on, of the input shapes given (mapping.input_shapes: those
``shaped_model`` holds it to, else those passed) where its own have unknown sizes; a subclassed model the arguments
the mapping traces its call() on.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import keras

from carm_advisor.errors import MappingError, MeasurementError
from carm_advisor.mapping.given_shapes import call_arguments
from carm_advisor.mapping.input_shapes import graph_input_specs, portable_shapes, shapes_from_json
from carm_advisor.mapping.symbolic import is_graph_model


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


def layer_int_high(layer: Any) -> int:
    """The bound of the integer ids a layer is fed: its vocabulary (input_dim), else 2."""
    return int(getattr(layer, "input_dim", 0) or 2)


def model_int_high(model) -> int:
    """The bound of the integer ids a whole model is fed: its smallest Embedding vocabulary, else 2."""
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


def functional_inputs(model, shapes=None) -> list:
    """A Functional or Sequential model's inputs as a list of KerasTensors, on the input shapes given:
    ``shapes``, else those ``shaped_model`` holds it to in this context (input_shapes.graph_input_specs); its own
    model.inputs where none are given. [] for a subclassed model (none recorded). An input with an unknown size
    besides the batch and no shape for it is a MeasurementError naming the --input-shape flags to pass."""
    if not is_graph_model(model):
        return []
    given = shapes if shapes is not None else shapes_from_json(portable_shapes(model))
    try:
        return graph_input_specs(model, given)
    except MappingError as exc:
        raise MeasurementError(str(exc)) from None


def subclassed_call_specs(model, batch_size: int) -> tuple[list, dict]:
    """What a subclassed model (no model.inputs) is called on as a whole, as KerasTensors at ``batch_size``:
    (positional, keyword) arguments, those the mapping traces its call() on (given_shapes.call_arguments); else a
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


def model_inputs(model, batch_size: int) -> ModelInputs:
    """Synthetic arguments of one call of the whole model at ``batch_size`` (see ModelInputs)."""
    inputs = functional_inputs(model)
    high = model_int_high(model)
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
        tensors.append(synthetic_tensor(shape, str(tensor.dtype), int_high=high, seed=1000 + i))
    return ModelInputs((functional_structure(model, tensors),), {})


def functional_structure(model, flat: list):
    """A Functional model's inputs, one per model.inputs, in the structure it was built on (a dict of named
    inputs is called with that dict); one input alone, several as a list where it was built on a list."""
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, (dict, list, tuple)) and len(keras.tree.flatten(struct)) == len(flat):
        return keras.tree.pack_sequence_as(struct, flat)
    return flat[0] if len(flat) == 1 else flat


def training_argument(model) -> dict:
    """{"training": False} where the model's call() takes it (a Functional model's does), else {}."""
    try:
        params = inspect.signature(model.call).parameters.values()
    except (TypeError, ValueError):
        return {}
    takes = any(p.name == "training" or p.kind == p.VAR_KEYWORD for p in params)
    return {"training": False} if takes else {}
