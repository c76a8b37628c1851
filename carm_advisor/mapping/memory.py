"""A LOWER BOUND on the GPU memory one call of a model needs: what must be resident at once, whatever the
backend, its allocator or its compiler does. It never says a configuration fits; it only says when one
cannot (bound > the GPU's memory), so pruning by it never drops a configuration that fits.

What is counted (bytes; `MemoryFootprint` keeps each term):

- weights: every variable of the model at its storage dtype (a mixed policy keeps float32 variables);
  they stay on the GPU for the whole call.
- the largest single layer call's input + output, at the batch size and the compute dtype, over the
  layers that run as a library call of their own (convolutions, dense/matmul: op class "matmul"). Their
  operand and result are distinct buffers on every backend (cuDNN and cuBLAS read one and write the other;
  a compiler fuses an activation or a bias into the result, never removes it). Elementwise, pooling and
  data-movement layers are left out: a compiler may fuse them into a neighbour, or run them in place, so
  their tensors need not exist. Only each call's first input is counted (a matmul layer has one).
  The compute dtype is a floor too: a float32 model input cast to bfloat16 is counted at 2 bytes. Each
  layer is counted at the compute dtype its cost carries, the one the call runs it at (map_model: a model
  file whose bfloat16 policy cannot be replaced is mapped at its own dtypes, 16 bits whatever precision the
  configuration names; a mixed model's float32 output layer at float32).
- training only (`training=True`): the gradients of the trainable weights (Keras' train step holds them
  all before the optimizer applies them, on every backend) and the activations kept for backward: the
  input of each matmul layer with trainable weights (its weight gradient reads it), counted ONCE PER
  DISTINCT SHAPE (two layers reading one tensor are not counted twice, so some distinct tensors of one
  shape are left out: still a floor). On jax the kept activations are left out: XLA may rematerialise
  them rather than keep them. These three need not be resident together: the kept activations are all
  alive when backward starts, before any gradient exists; backward frees each as its gradients appear, so
  when the last gradient exists the activations may all be gone; the largest layer's input + output may be
  one of the kept tensors. So the training bound is weights + the LARGEST of (gradients, kept activations,
  the largest layer's input + output), never their sum.

Not counted (all only add memory): optimizer state, the framework's workspace (cuDNN, cuBLAS), the
allocator's fragmentation and caching, the CUDA context, other layers' tensors alive at the same time,
copies a backend makes for a layout (Keras on torch transposes channels_last), the float32 copy of a
cast input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from carm_advisor.mapping.registry import dtype_bytes_of
from carm_advisor.mapping.types import OP_MATMUL, LayerCost

GB = 1e9   # the unit the messages use (decimal gigabytes, as GPU vendors state memory)


def gb(n_bytes: float) -> str:
    """Bytes as decimal GB: one decimal from 1 GB up (842.4), three significant digits below (0.00184)."""
    return f"{n_bytes / GB:,.1f}" if n_bytes >= GB else f"{n_bytes / GB:.3g}"


def gb_apart(a: float, b: float) -> tuple[str, str]:
    """gb(a), gb(b), or, where those read the same but the byte counts differ, both with as many decimals as
    tell them apart (10,002,432 and 10,000,000 bytes: "0.010002" and "0.010000"; down to single bytes)."""
    first, second = gb(a), gb(b)
    if first != second or a == b:
        return first, second
    for decimals in range(1, 10):   # 9 decimals of a GB is one byte
        first, second = f"{a / GB:,.{decimals}f}", f"{b / GB:,.{decimals}f}"
        if first != second:
            return first, second
    return first, second


@dataclass(frozen=True)
class MemoryFootprint:
    """A lower bound on the GPU memory of one call, in bytes, by term (see the module's docstring)."""

    weights_bytes: int
    largest_layer_bytes: int          # the largest matmul layer call's input + output
    largest_layer: str | None         # its name
    largest_layer_dtype: str | None
    gradient_bytes: int = 0           # training: the trainable weights' gradients
    kept_bytes: int = 0               # training: inputs kept for backward (distinct shapes)
    training: bool = False

    @property
    def total_bytes(self) -> int:
        """weights + the largest of the terms that need not be resident together (module docstring)."""
        return self.weights_bytes + max(self.gradient_bytes, self.kept_bytes, self.largest_layer_bytes)

    def describe(self) -> str:
        parts = [f"weights {gb(self.weights_bytes)} GB"]
        if self.largest_layer:
            parts.append(f"layer '{self.largest_layer}' input + output {gb(self.largest_layer_bytes)} GB "
                         f"at {self.largest_layer_dtype}")
        if self.training:
            parts.append(f"gradients {gb(self.gradient_bytes)} GB")
            parts.append(f"activations kept for backward {gb(self.kept_bytes)} GB")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"total_bytes": self.total_bytes, "weights_bytes": self.weights_bytes,
                "largest_layer_bytes": self.largest_layer_bytes, "largest_layer": self.largest_layer,
                "largest_layer_dtype": self.largest_layer_dtype, "gradient_bytes": self.gradient_bytes,
                "kept_bytes": self.kept_bytes, "training": self.training, "kind": "lower bound"}


def _elems(shape) -> int | None:
    if not shape or any(d is None for d in shape):
        return None
    return int(math.prod(int(d) for d in shape))


def _variable_bytes(variables: Iterable[Any]) -> int:
    total = 0
    for v in variables:
        shape = tuple(getattr(v, "shape", ()) or ())
        n = _elems(shape) if shape else 1   # a scalar variable: one element
        try:
            total += (n or 0) * dtype_bytes_of(str(getattr(v, "dtype", "float32")))
        except Exception:   # a dtype with no byte size (a string variable): not counted
            continue
    return total


def weight_bytes(model) -> int:
    """Every variable of the model (trainable or not) at its storage dtype."""
    return _variable_bytes(getattr(model, "weights", []) or [])


def trainable_weight_bytes(model) -> int:
    return _variable_bytes(getattr(model, "trainable_weights", []) or [])


def _io_bytes(c: LayerCost) -> tuple[int, int, str] | None:
    """(first input bytes, output bytes, the dtype counted) of a matmul layer call at its cost's compute dtype
    (map_model's: the dtype the call runs the layer at); None for other calls."""
    if not c.known or c.op_class != OP_MATMUL or not c.input_shapes or not c.output_shapes:
        return None
    n_in, n_out = _elems(c.input_shapes[0]), _elems(c.output_shapes[0])
    if n_in is None or n_out is None:
        return None
    dtype = c.compute_dtype or "float32"
    size = dtype_bytes_of(dtype)
    return n_in * size, n_out * size, dtype


def _base_name(path: str) -> str:
    """The Keras layer name of a cost's name ("outer/inner#1:pointwise" -> "inner")."""
    return path.split("/")[-1].split(":")[0].split("#")[0]


def _trainable_layer_names(model) -> set[str]:
    """Names of the layers with trainable weights; a name that a frozen layer shares is left out (a floor)."""
    layers = list(model._flatten_layers(include_self=False)) if hasattr(model, "_flatten_layers") else []
    mine = {layer.name for layer in layers if getattr(layer, "trainable_weights", None)}
    frozen = {layer.name for layer in layers if not getattr(layer, "trainable_weights", None)}
    return mine - frozen


def footprint_lower_bound(model, costs: list[LayerCost], training: bool = False,
                          backend: str | None = None) -> MemoryFootprint:
    """The lower bound of one call of `model` whose layer costs (map_model, at the batch size and compute dtypes
    of the call: a model whose policies cannot be replaced mapped at its own) are `costs`; training: one train
    step on `backend` (module docstring)."""
    largest, name, dtype = 0, None, None
    kept: dict[tuple, int] = {}
    trainable = _trainable_layer_names(model) if training else set()
    for c in costs:
        io = _io_bytes(c)
        if io is None:
            continue
        if io[0] + io[1] > largest:
            largest, name, dtype = io[0] + io[1], c.name, io[2]
        if training and _base_name(c.name) in trainable:
            kept.setdefault(tuple(c.input_shapes[0]), io[0])
    if not training:
        return MemoryFootprint(weight_bytes(model), largest, name, dtype)
    return MemoryFootprint(weight_bytes(model), largest, name, dtype, trainable_weight_bytes(model),
                           0 if backend == "jax" else sum(kept.values()), True)


def memory_bytes_of(profile) -> int | None:
    """The GPU memory a profile records (device.memory_bytes), or None."""
    device = getattr(profile, "device", None) or {}
    value = device.get("memory_bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def does_not_fit(footprint: MemoryFootprint, profile) -> str | None:
    """Why `footprint` cannot fit on the profile's GPU ("needs at least X GB, the GPU has Y GB"), else None
    (it may fit: a lower bound never says it does)."""
    capacity = memory_bytes_of(profile)
    if capacity is None or footprint.total_bytes <= capacity:
        return None
    needs, has = gb_apart(footprint.total_bytes, capacity)
    return f"needs at least {needs} GB, the GPU has {has} GB ({footprint.describe()})"
