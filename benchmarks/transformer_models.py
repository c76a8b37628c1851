"""Transformer models recorded on the GPU for the calibration, as builders (`benchmarks.transformer_models:NAME`):
keras_hub backbones built from their configurations (random weights, nothing downloaded) over fixed-shape inputs,
as a user gives a sequence length.

Fitted on: BERT-base (seq 128 and 256), ViT-B/16 (224x224), a Llama-style decoder (RMS normalisation, rotary
embeddings, gated MLP, grouped-query attention; seq 128 and 256). Held out (never fitted on): DistilBERT (seq 128),
RoBERTa-base (seq 128), a Gemma-style decoder (seq 128).
"""

from __future__ import annotations

import keras
import keras_hub

models = keras_hub.models


def _tokens(backbone, seq_len: int) -> keras.Model:
    inputs = {name: keras.Input((seq_len,), dtype="int32", name=name) for name in backbone.input}
    return keras.Model(inputs, backbone(inputs), name=backbone.name)


def _bert(seq_len: int) -> keras.Model:
    # bert_base_en: 12 layers, 12 heads, hidden 768, intermediate 3072, vocabulary 30522
    return _tokens(models.BertBackbone(vocabulary_size=30522, num_layers=12, num_heads=12, hidden_dim=768,
                                       intermediate_dim=3072, max_sequence_length=512, name=f"bert_base_s{seq_len}"),
                   seq_len)


def bert_base_s128() -> keras.Model:
    return _bert(128)


def bert_base_s256() -> keras.Model:
    return _bert(256)


def vit_b16() -> keras.Model:
    # ViT-B/16 at 224x224: 12 layers, 12 heads, hidden 768, MLP 3072
    backbone = models.ViTBackbone(image_shape=(224, 224, 3), patch_size=16, num_layers=12, num_heads=12,
                                  hidden_dim=768, mlp_dim=3072, name="vit_b16")
    x = keras.Input((224, 224, 3))
    return keras.Model(x, backbone(x), name="vit_b16")


def _llama(seq_len: int) -> keras.Model:
    # A Llama-style decoder of 16 layers, hidden 1024, 16 query heads over 4 key-value heads, gated MLP 2816
    return _tokens(models.LlamaBackbone(vocabulary_size=32000, num_layers=16, num_query_heads=16,
                                        num_key_value_heads=4, hidden_dim=1024, intermediate_dim=2816,
                                        name=f"llama_1024_s{seq_len}"), seq_len)


def llama_1024_s128() -> keras.Model:
    return _llama(128)


def llama_1024_s256() -> keras.Model:
    return _llama(256)


def distilbert_s128() -> keras.Model:
    # distil_bert_base_en: 6 layers, 12 heads, hidden 768, intermediate 3072
    return _tokens(models.DistilBertBackbone(vocabulary_size=30522, num_layers=6, num_heads=12, hidden_dim=768,
                                             intermediate_dim=3072, name="distilbert_s128"), 128)


def roberta_base_s128() -> keras.Model:
    # roberta_base_en: 12 layers, 12 heads, hidden 768, intermediate 3072, vocabulary 50265
    return _tokens(models.RobertaBackbone(vocabulary_size=50265, num_layers=12, num_heads=12, hidden_dim=768,
                                          intermediate_dim=3072, max_sequence_length=512, name="roberta_base_s128"),
                   128)


def gemma_1024_s128() -> keras.Model:
    # A Gemma-style decoder of 12 layers, hidden 1024, 8 query heads over 1 key-value head of 128, MLP 4096
    return _tokens(models.GemmaBackbone(vocabulary_size=32000, num_layers=12, num_query_heads=8,
                                        num_key_value_heads=1, hidden_dim=1024, intermediate_dim=8192, head_dim=128,
                                        name="gemma_1024_s128"), 128)


FITTED = ("bert_base_s128", "bert_base_s256", "vit_b16", "llama_1024_s128", "llama_1024_s256")
HELD_OUT = ("distilbert_s128", "roberta_base_s128", "gemma_1024_s128")
