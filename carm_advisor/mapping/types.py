"""What the mapping works on and hands on: one call of a layer with concrete shapes (LayerCall), and its cost
from shapes alone (LayerCost), which the CARM places."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

Shape = tuple[int, ...]

# What kind of work dominates a layer; decides which compute roof applies.
OP_MATMUL = "matmul"            # convolutions, dense, attention and recurrent matmuls: Tensor Core eligible
OP_ELEMENTWISE = "elementwise"  # activations, add, multiply, normalisation arithmetic
OP_REDUCTION = "reduction"      # pooling, global pooling, softmax
OP_DATA = "data_movement"       # reshape, concatenate, padding, embedding lookups: bytes, (almost) no FLOPs
OP_NONE = "none"                # no work on the GPU at all (InputLayer, Dropout at inference, Flatten view)


@dataclass(frozen=True)
class LayerCost:
    """Analytic cost of one call of one layer for a whole batch.

    FLOPs count 1 multiply-add as 2 FLOPs. Bytes are the compulsory traffic of the call at the dtype
    policy's compute precision: every input, weight and output element read or written once.
    """

    name: str                  # path in the model, nested models joined with "/"
    type: str                  # Keras class name: "Conv2D", "Dense", ...
    flops: int                 # per batch
    bytes_read: int            # inputs + weights, per batch
    bytes_written: int         # outputs, per batch
    compute_dtype: str         # "float32", "bfloat16", "float16", ...
    op_class: str              # one of the OP_* constants
    tensor_core: bool          # the dominant work can run on Tensor Cores at compute_dtype
    params: int = 0
    input_shapes: tuple = ()   # with the batch dimension filled in
    output_shapes: tuple = ()
    known: bool = True         # False: no cost model for this class; flops/bytes are unknown, not zero
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def ai(self) -> float | None:
        """Arithmetic intensity in FLOP per byte; None where it is undefined."""
        if not self.known or self.bytes == 0:
            return None
        return self.flops / self.bytes


@dataclass(frozen=True)
class LayerCall:
    """One call of one layer (or ``keras.ops`` operation) with concrete, batch-filled shapes.

    Its inputs are the KerasTensors it was called on, the tensors a measurement makes up. A traced call() may also
    read constants (a layer's variable used in ``keras.ops`` directly, a tensor computed from weights alone: ViT's
    class token, SigLIP's pooling probe), which its recorded arguments hold: ``constant_inputs``. Its cost reads
    both (``with_constants``)."""

    path: str                             # "layer", "outer/inner", "shared#1"
    layer: Any                            # keras.layers.Layer, or keras.Operation for keras.ops nodes
    input_shapes: tuple[Shape, ...]       # one per input tensor, flattened in call order
    output_shapes: tuple[Shape, ...]
    input_dtypes: tuple[str, ...]
    # The call argument each input tensor was passed as ("query", "value", "key", "attention_mask");
    # () where unknown (a cost function must then go by position).
    input_names: tuple[str, ...] = ()
    # For each input, the index of the first input that is the same tensor: mha(x, x) gives (0, 0).
    # A tensor passed twice is one tensor in memory, read from DRAM once. () where unknown.
    input_same_as: tuple[int, ...] = ()
    # The call's arguments that are plain Python values, by name: use_causal_mask=True (MultiHeadAttention),
    # reverse=True (keras_hub's ReversibleEmbedding: the logits matmul instead of the lookup). {} where none.
    options: dict = field(default_factory=dict, compare=False)
    # (place among all the tensors the call reads in call order, shape, dtype, argument name) of each constant
    constant_inputs: tuple[tuple[int, Shape, str, str], ...] = ()

    def with_constants(self) -> LayerCall:
        """This call with its constants among its inputs, in call order: what its cost reads."""
        if not self.constant_inputs:
            return self
        constants = {place: (shape, dtype, name) for place, shape, dtype, name in self.constant_inputs}
        shapes, dtypes, names, same_as, place_of = [], [], [], [], {}
        k = 0
        for place in range(len(self.input_shapes) + len(constants)):
            if place in constants:
                shape, dtype, name = constants[place]
                same_as.append(place)
            else:
                shape, place_of[k] = self.input_shapes[k], place
                dtype = self.input_dtypes[k] if k < len(self.input_dtypes) else ""
                name = self.input_names[k] if self.input_names else ""
                same_as.append(place_of[self.input_same_as[k]] if self.input_same_as else place)
                k += 1
            shapes.append(shape)
            dtypes.append(dtype)
            names.append(name)
        return replace(self, input_shapes=tuple(shapes), input_dtypes=tuple(dtypes),
                       input_names=tuple(names) if self.input_names else (), input_same_as=tuple(same_as),
                       constant_inputs=())

    def distinct_inputs(self) -> list[int]:
        """Indices of the inputs that are distinct tensors (the first of each repeated one)."""
        if len(self.input_same_as) != len(self.input_shapes):
            return list(range(len(self.input_shapes)))
        return [i for i, j in enumerate(self.input_same_as) if i == j]
