"""Transformer builders for carm-advise: keras_hub backbones built from their config (no preset, nothing
downloaded, random weights), as `module:function` models (run from the repository root, where `examples` is found):

    carm-advise analyze examples.transformers:bert_base --batch-size 8 --no-measure
    carm-advise analyze examples.transformers:vit_b16 --batch-size 8 --no-measure
    carm-advise tune examples.transformers:gemma_like_decoder --predict --trials 8

Each is called under the trial's dtype policy (a builder's contract: tune builds it once per precision), so
its layers follow `--precision`. `seq_len` is the number of tokens the model's inputs take: keras_hub builds
its text backbones for inputs of any length (`(None, None)` token ids), which a CARM cannot cost, so the builder
gives its graph inputs of `seq_len` tokens (the same layers, called on fixed-length `keras.Input`s); `seq_len=None`
returns the backbone as keras_hub builds it, whose input shapes `--input-shape` / `input_shapes=` then give.
"""

from __future__ import annotations

import keras
import keras_hub


def _fixed_length(backbone, seq_len: int | None):
    """The backbone's graph on inputs of `seq_len` tokens (its own layers and weights); itself for None."""
    if seq_len is None:
        return backbone
    inputs = keras.tree.map_structure(
        lambda x: keras.Input(batch_shape=(None, seq_len), dtype=x.dtype, name=x.name), backbone.input)
    return keras.models.clone_model(backbone, input_tensors=inputs, clone_function=lambda layer: layer)


def bert_base(seq_len: int | None = 128):
    """BERT-base (uncased vocabulary): 12 layers, 12 heads, hidden 768, feed-forward 3072, 512 positions
    (keras_hub's bert_base_en_uncased config), on `seq_len` tokens."""
    backbone = keras_hub.models.BertBackbone(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                                             intermediate_dim=3072, max_sequence_length=512)
    return _fixed_length(backbone, seq_len)


def vit_b16():
    """ViT-B/16 at 224x224: 12 layers, 12 heads, hidden 768, MLP 3072, 16x16 patches (keras_hub's vit_base_patch16_224
    config). Its image input is fixed, so it takes no --input-shape."""
    return keras_hub.models.ViTBackbone(image_shape=(224, 224, 3), patch_size=16, num_layers=12, num_heads=12,
                                        hidden_dim=768, mlp_dim=3072)


def gemma_like_decoder(seq_len: int | None = 128):
    """A decoder of Gemma's architecture (RMS norms, rotary positions, one shared key/value head, gated GELU
    feed-forward), a tenth of Gemma-2B's size so that it builds in seconds on a CPU: 8 layers, 8 query heads of
    128, hidden 1024, feed-forward 2 x 4096, a 32000-token vocabulary; on `seq_len` tokens."""
    backbone = keras_hub.models.GemmaBackbone(vocabulary_size=32000, num_layers=8, num_query_heads=8,
                                              num_key_value_heads=1, hidden_dim=1024, intermediate_dim=8192,
                                              head_dim=128)
    return _fixed_length(backbone, seq_len)
