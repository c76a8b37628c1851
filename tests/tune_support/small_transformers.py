"""Transformers small enough for a CPU test, as `module:function` builders (tune_support and the repository root
on the path): the examples' fixed-length graph (examples/transformers.py) over a tiny keras_hub backbone."""

from __future__ import annotations

import keras
import keras_hub

from examples.transformers import _fixed_length

SEQ_LEN = 8


def tiny_bert(config=None):
    """BERT of 2 layers, 2 heads of 16, hidden 32, feed-forward 64, a 100-word vocabulary, on 8 tokens."""
    backbone = keras_hub.models.BertBackbone(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32,
                                             intermediate_dim=64, max_sequence_length=16)
    return _fixed_length(backbone, SEQ_LEN)


def quantised_mlp(config=None):
    """A model its builder quantises itself (int8): model.quantize on it raises, as on any quantised layer."""
    inputs = keras.Input((16,))
    model = keras.Model(inputs, keras.layers.Dense(8, name="out", dtype="float32")(
        keras.layers.Dense(16, name="hidden")(inputs)), name="quantised_mlp")
    model.quantize("int8")
    return model
