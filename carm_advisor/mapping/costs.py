"""The cost of one layer call, from shapes alone: what the mapping hands to the CARM."""

from __future__ import annotations

from dataclasses import dataclass, field

# What kind of work dominates a layer; decides which compute roof applies.
OP_MATMUL = "matmul"            # convolutions, dense, attention and recurrent matmuls: Tensor Core eligible
OP_ELEMENTWISE = "elementwise"  # activations, add, multiply, normalisation arithmetic
OP_REDUCTION = "reduction"      # pooling, global pooling, softmax
OP_DATA = "data_movement"       # reshape, concatenate, padding, embedding lookups: bytes, (almost) no FLOPs
OP_NONE = "none"                # no device work at all (InputLayer, Dropout at inference, Flatten view)


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
