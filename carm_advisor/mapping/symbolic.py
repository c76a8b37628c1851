"""What the graph walk and the given call shapes share: Keras' graph containers, shapes, and KerasTensors.

Nothing here runs on a device: a KerasTensor is a shape and a dtype.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterable

import keras

from carm_advisor.errors import MappingError


def _functional_class():
    from keras.src.models.functional import Functional

    return Functional


def is_graph_model(op) -> bool:
    """Keras' own Functional / Sequential containers: walked, never costed."""
    return isinstance(op, (_functional_class(), keras.Sequential))


def is_shape(x) -> bool:
    """A flat tuple or list of dimensions (ints, or None where unknown), not a structure of shapes."""
    return isinstance(x, (tuple, list)) and all(
        d is None or (isinstance(d, numbers.Integral) and not isinstance(d, bool)) for d in x)


def checked_batch_size(batch_size) -> int:
    """``batch_size`` if it is a positive int; else MappingError."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise MappingError(f"Expected batch_size to be a positive int, received: batch_size={batch_size!r}")
    return batch_size


def tensor_spec(shape, dtype) -> keras.KerasTensor:
    return keras.KerasTensor(tuple(shape), dtype=dtype)


def flat_tensors(structure) -> list:
    """The KerasTensors of a structure (list, tuple, dict) in flattening order."""
    return [t for t in keras.tree.flatten(structure) if isinstance(t, keras.KerasTensor)]


@contextlib.contextmanager
def graph_nodes_restored(operations: Iterable):
    """Remove, at the end of the block, the graph nodes added in it to ``operations`` (layers, keras.ops
    operations): a symbolic trace leaves the user's model as it was, with no extra inbound/outbound nodes."""
    saved = [(op, len(op._inbound_nodes), len(op._outbound_nodes)) for op in operations]
    try:
        yield
    finally:
        for op, n_in, n_out in saved:
            del op._inbound_nodes[n_in:]
            del op._outbound_nodes[n_out:]
