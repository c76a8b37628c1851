"""``map_model``: the analytic cost of every layer call of a Keras model, in graph order.

Importing this module imports every layer family, whose ``@register_cost`` decorators fill the registry.
"""

from __future__ import annotations

from collections.abc import Mapping

from carm_advisor.errors import UnknownLayerError
from carm_advisor.mapping import layers_conv, layers_dense, layers_elementwise, layers_pooling  # noqa: F401
from carm_advisor.mapping.input_shapes import shaped_model
from carm_advisor.mapping.registry import (
    cost_of_call,
    dtype_bytes_of,
    layer_compute_dtype,
    policy_compute_dtype,
    policy_name_of,
    unknown_cost,
)
from carm_advisor.mapping.types import LayerCost
from carm_advisor.mapping.walker import iter_layer_calls


def map_model(model, batch_size: int = 1, strict: bool = False,
              compute_dtype: str | Mapping[str, str] | None = None, input_shapes=None) -> list[LayerCost]:
    """Analytic cost of every layer call of ``model``, in graph order, for a batch of ``batch_size``.

    ``compute_dtype``: a dtype overrides every layer's ``dtype_policy.compute_dtype``; a mapping of dtype
    policy names to dtypes overrides it for the layers under those policies only (the others, such as a mixed
    model's float32 output layer, keep their own); None: each layer's own. A layer without a cost model is
    returned with ``known=False`` (and its class named in ``notes``); ``strict=True`` raises
    :class:`UnknownLayerError` instead. ``input_shapes``: the model's input shapes (``input_shapes.shaped_model``:
    batch-first shapes in order or {name: shape}): a Functional model's inputs of unknown size (keras_hub's
    ``token_ids``), a subclassed model's call() arguments where Keras recorded fewer. A Functional model with an
    unknown dimension besides the batch and none given is a one-line MappingError saying which inputs to give.
    """
    with shaped_model(model, input_shapes) as shaped:
        return _map_model(shaped, batch_size, strict, compute_dtype)


def _map_model(model, batch_size: int, strict: bool, compute_dtype) -> list[LayerCost]:
    by_policy = dict(compute_dtype) if isinstance(compute_dtype, Mapping) else None
    for dtype in by_policy.values() if by_policy is not None else [compute_dtype] if compute_dtype else []:
        dtype_bytes_of(dtype)  # validate early
    # An operation with no policy (a keras.ops node: a residual add) computes at its inputs' dtype: it moves with
    # the policy whose compute dtype its traced inputs have (they come from layers under that policy).
    by_traced = {policy_compute_dtype(name): dtype for name, dtype in (by_policy or {}).items()}
    costs: list[LayerCost] = []
    for call in iter_layer_calls(model, batch_size):
        if by_policy is not None:
            name = policy_name_of(call.layer)
            own = layer_compute_dtype(call)
            dtype = (by_policy.get(name) if name is not None else by_traced.get(own)) or own
        else:
            dtype = compute_dtype or layer_compute_dtype(call)
        mapped = cost_of_call(call, dtype)
        if mapped is None or any(not c.known for c in mapped):
            if strict:
                raise UnknownLayerError(
                    f"layer '{call.path}' ({type(call.layer).__name__}) has no cost model; expected one of "
                    f"the registered classes (carm_advisor.mapping.registered_names()) or a subclass; "
                    f"register one with @register_cost(\"{type(call.layer).__name__}\")"
                )
            costs.extend(mapped or [unknown_cost(call, dtype)])
        else:
            costs.extend(mapped)
    return costs
