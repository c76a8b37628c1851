"""keras_hub backbones as keras_hub builds them (inputs of any sequence length) and a subclassed model of two
call() arguments, small enough for a CPU test: builders for carm-advise's `module:function` MODEL."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np


def bert_tiny(config=None):
    """BERT of 2 layers, 2 heads, hidden 32, feed-forward 64, 64 positions: token_ids, segment_ids and padding_mask
    of shape (None, None) int32."""
    return keras_hub.models.BertBackbone(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32,
                                         intermediate_dim=64, max_sequence_length=64)


def gemma_tiny(config=None):
    """A Gemma decoder of 2 layers, 2 query heads and 1 key/value head of 16, hidden 32, feed-forward 2 x 32:
    token_ids and padding_mask of shape (None, None) int32."""
    return keras_hub.models.GemmaBackbone(vocabulary_size=100, num_layers=2, num_query_heads=2,
                                          num_key_value_heads=1, hidden_dim=32, intermediate_dim=64, head_dim=16)


class TwoArguments(keras.Model):
    """call(image, tokens): Keras records image's shape only."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.proj = keras.layers.Dense(5, name="proj")
        self.embed = keras.layers.Embedding(30, 5, name="embed")

    def call(self, image, tokens):
        return self.proj(image) + keras.ops.mean(self.embed(tokens), axis=1)


def two_arguments(config=None):
    model = TwoArguments()
    model(np.zeros((1, 3), "float32"), np.zeros((1, 7), "int32"))
    return model
