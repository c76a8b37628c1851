"""Keras layer -> analytic cost (FLOPs, bytes, Tensor Core eligibility) from shapes alone.

``map_model(model, batch_size)`` walks the model's graph (no execution) and returns one LayerCost per
layer call; the counting conventions are in :mod:`carm_advisor.mapping.registry`. Importing the package
registers every layer family's cost model.
"""

from carm_advisor.mapping import layers_attention  # noqa: F401 - registers its costs; model.py imports the others
from carm_advisor.mapping.model import map_model
from carm_advisor.mapping.registry import (
    ACTIVATION_FLOPS,
    TENSOR_CORE_DTYPES,
    dtype_bytes_of,
    register_cost,
    registered_names,
)
from carm_advisor.mapping.types import LayerCall, LayerCost
from carm_advisor.mapping.walker import iter_layer_calls

__all__ = [
    "ACTIVATION_FLOPS", "LayerCall", "LayerCost", "TENSOR_CORE_DTYPES", "dtype_bytes_of",
    "iter_layer_calls", "map_model", "register_cost", "registered_names",
]
