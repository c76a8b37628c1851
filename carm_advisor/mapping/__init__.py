"""Keras layer -> analytic cost (FLOPs, bytes, Tensor Core eligibility) from shapes alone."""

from carm_advisor.mapping.costs import LayerCost
from carm_advisor.mapping.walker import LayerCall, iter_layer_calls

__all__ = ["LayerCall", "LayerCost", "iter_layer_calls"]
