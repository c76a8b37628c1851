"""map_model on keras_hub backbones built from their configs (no weights downloaded): every layer and every
keras.ops call inside keras_hub's layers costed, and FLOPs per sample against hand counts written from each
architecture's dimensions with the registry's conventions (1 multiply-add = 2 FLOPs, softmax 5 per score,
LayerNormalization 7 and RMS normalisation 4 per element, GELU 8, SiLU 5, tanh 4, a bias or an add 1 per element).

The backbones' token inputs have no fixed length; a Functional model over fixed-shape keras.Input gives it, as a
user would."""

import keras
import pytest

keras_hub = pytest.importorskip("keras_hub", reason="keras_hub is not installed: the backbones come from it")

from carm_advisor.mapping import map_model

BATCH = 2
models = keras_hub.models


def token_model(backbone, seq):
    """The backbone over int32 token inputs of ``seq`` positions (token_ids, padding_mask, segment_ids)."""
    inputs = {name: keras.Input((seq,), dtype="int32", name=name) for name in backbone.input}
    return keras.Model(inputs, backbone(inputs))


def image_model(backbone, size):
    x = keras.Input(size + (3,))
    return keras.Model(x, backbone(x))


def per_sample(model, batch=BATCH):
    costs = map_model(model, batch_size=batch)
    unknown = [f"{c.name} ({c.type})" for c in costs if not c.known]
    assert not unknown, unknown
    return sum(c.flops for c in costs) / batch, costs


# ---- every layer costed, at small configs ------------------------------------------------------------------

SMALL_TEXT = {"vocabulary_size": 1000, "num_layers": 2, "hidden_dim": 64, "intermediate_dim": 128}


def _clip():
    vision = models.CLIPVisionEncoder(patch_size=8, hidden_dim=64, num_layers=2, num_heads=2, intermediate_dim=128,
                                      intermediate_activation="quick_gelu", image_shape=(32, 32, 3))
    text = models.CLIPTextEncoder(vocabulary_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2, num_heads=2,
                                  intermediate_dim=128, intermediate_activation="quick_gelu", max_sequence_length=16)
    return models.CLIPBackbone(vision, text, projection_dim=32)


def _siglip():
    vision = models.SigLIPVisionEncoder(patch_size=8, hidden_dim=64, num_layers=2, num_heads=2, intermediate_dim=128,
                                        image_shape=(32, 32, 3))
    text = models.SigLIPTextEncoder(vocabulary_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2, num_heads=2,
                                    intermediate_dim=128, max_sequence_length=16)
    return models.SigLIPBackbone(vision, text)


def _image_and_text(backbone):
    inputs = {"images": keras.Input((32, 32, 3), name="images"),
              "token_ids": keras.Input((16,), dtype="int32", name="token_ids")}
    return keras.Model(inputs, backbone(inputs))


SMALL = {
    "BertBackbone": lambda: token_model(models.BertBackbone(num_heads=2, **SMALL_TEXT), 16),
    "DistilBertBackbone": lambda: token_model(models.DistilBertBackbone(num_heads=2, **SMALL_TEXT), 16),
    "RobertaBackbone": lambda: token_model(models.RobertaBackbone(num_heads=2, **SMALL_TEXT), 16),
    "GPT2Backbone": lambda: token_model(models.GPT2Backbone(num_heads=2, max_sequence_length=64, **SMALL_TEXT), 16),
    "ViTBackbone": lambda: models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2,
                                             hidden_dim=64, mlp_dim=128),
    "GemmaBackbone": lambda: token_model(models.GemmaBackbone(num_query_heads=4, num_key_value_heads=1, head_dim=16,
                                                              **SMALL_TEXT), 16),
    "LlamaBackbone": lambda: token_model(models.LlamaBackbone(num_query_heads=4, num_key_value_heads=2,
                                                              **SMALL_TEXT), 16),
    "MistralBackbone": lambda: token_model(models.MistralBackbone(num_query_heads=4, num_key_value_heads=2,
                                                                  sliding_window=8, **SMALL_TEXT), 16),
    "ResNetBackbone": lambda: models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7], stackwise_num_filters=[64, 128],
        stackwise_num_blocks=[2, 2], stackwise_num_strides=[1, 2], block_type="bottleneck_block",
        image_shape=(32, 32, 3)),
    "EfficientNetBackbone": lambda: image_model(models.EfficientNetBackbone(
        stackwise_width_coefficients=[1.0] * 3, stackwise_depth_coefficients=[1.0] * 3,
        stackwise_kernel_sizes=[3, 3, 3], stackwise_num_repeats=[1, 2, 2], stackwise_input_filters=[24, 24, 48],
        stackwise_output_filters=[24, 48, 64], stackwise_expansion_ratios=[1, 4, 4],
        stackwise_squeeze_and_excite_ratios=[0, 0, 0.25], stackwise_strides=[1, 2, 2],
        stackwise_block_types=["fused", "fused", "unfused"], stackwise_force_input_filters=[0] * 3,
        stackwise_nores_option=[False] * 3), (32, 32)),
    "CLIPBackbone": lambda: _image_and_text(_clip()),
    "SigLIPBackbone": lambda: _image_and_text(_siglip()),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_layer_of_a_small_backbone_is_costed(name):
    flops, costs = per_sample(SMALL[name]())
    assert flops > 0
    assert all(c.flops >= 0 and c.bytes >= 0 for c in costs)


def test_a_decoder_is_traced_into_its_attention_rope_norms_and_gated_mlp():
    _, costs = per_sample(SMALL["LlamaBackbone"]())
    types = [c.type for c in costs]
    assert {"LlamaLayerNorm", "LlamaRotaryEmbedding", "EinsumDense", "Repeat", "Silu", "Multiply"} <= set(types)
    # 2 decoder layers, rotary on Q and on K; attention as QK^T and AV einsums around a masked softmax, or as one
    # ops.dot_product_attention where keras_hub fuses it (the jax and torch backends)
    assert types.count("LlamaRotaryEmbedding") == 4
    assert (types.count("Einsum"), types.count("Softmax")) == (4, 2) or types.count("DotProductAttention") == 2


# ---- keras_hub's own layers, one at a time -------------------------------------------------------------------

def hub_cost(layer, *shapes, dtypes=None, **call_kwargs):
    """The one cost of ``layer`` called on fixed-shape inputs, at BATCH."""
    dtypes = dtypes or ["float32"] * len(shapes)
    inputs = [keras.Input(shape, dtype=dtype) for shape, dtype in zip(shapes, dtypes)]
    (cost,) = map_model(keras.Model(inputs, layer(*inputs, **call_kwargs)), BATCH)
    assert cost.known
    return cost


def _rotary_embeddings():
    from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding

    return [keras_hub.layers.RotaryEmbedding, LlamaRotaryEmbedding]


@pytest.mark.parametrize("rotary", _rotary_embeddings(), ids=lambda cls: cls.__name__)
def test_rotary_embedding_hand_count(rotary):
    t, heads, width = 12, 4, 16
    cost = hub_cost(rotary(), (t, heads, width))
    n = BATCH * t * heads * width
    # x * cos + rotate_half(x) * sin: 2 multiplies, 1 add per element, half of them negated; the cos/sin table
    assert cost.flops == 7 * n // 2 + t * width // 2 + 2 * t * width
    assert cost.bytes_read == cost.bytes_written == n * 4


def test_position_embedding_reads_the_rows_of_its_positions_and_writes_them_per_sample():
    cost = hub_cost(keras_hub.layers.PositionEmbedding(sequence_length=20), (12, 8))
    assert cost.flops == 0 and cost.params == 20 * 8
    assert cost.bytes_read == 12 * 8 * 4 and cost.bytes_written == BATCH * 12 * 8 * 4


def _rms_norms():
    from keras_hub.src.models.gemma.rms_normalization import RMSNormalization as GemmaRMSNormalization
    from keras_hub.src.models.llama.llama_layernorm import LlamaLayerNorm
    from keras_hub.src.models.mistral.mistral_layer_norm import MistralLayerNormalization

    return [keras_hub.layers.RMSNormalization(input_dim=16), GemmaRMSNormalization(), LlamaLayerNorm(),
            MistralLayerNormalization()]


@pytest.mark.parametrize("norm", _rms_norms(), ids=lambda n: type(n).__module__.split(".")[-1])
def test_rms_norms_count_four_flops_per_element_and_read_their_scale(norm):
    cost = hub_cost(norm, (5, 16))
    assert cost.flops == 4 * BATCH * 5 * 16
    assert cost.bytes_read == (BATCH * 5 * 16 + 16) * 4


def test_clip_and_siglip_heads_hand_count():
    from keras_hub.src.models.clip.clip_layers import CLIPHead
    from keras_hub.src.models.siglip.siglip_layers import SigLIPHead

    d = 32
    clip = hub_cost(CLIPHead(), (d,), (d,))
    siglip = hub_cost(SigLIPHead(), (d,), (d,))
    logits = BATCH * BATCH
    normalise = 3 * 2 * BATCH * d + 2 * BATCH   # square, sum, divide per element; a square root per row
    assert clip.flops == normalise + 2 * logits * d + logits        # similarity matmul, logit scale
    assert siglip.flops == clip.flops + logits                      # + the logit bias
    assert clip.bytes_written == 2 * logits * 4 and clip.tensor_core


def test_clip_poolers_copy_one_token_per_sequence():
    from keras_hub.src.models.clip.clip_layers import CLIPTextPooler, CLIPVisionPooler

    t, d = 10, 8
    vision = hub_cost(CLIPVisionPooler(), (t, d))
    assert vision.flops == 0 and vision.bytes_read == vision.bytes_written == BATCH * d * 4
    text = hub_cost(CLIPTextPooler(), (t, d), (t,), dtypes=["float32", "int32"])
    assert text.flops == BATCH * t                  # argmax over the token ids
    assert text.bytes_read == BATCH * t * 4 + BATCH * d * 4 and text.bytes_written == BATCH * d * 4


# ---- FLOPs per sample against hand counts ------------------------------------------------------------------

def mha_flops(s, d, heads, masked):
    """Keras MultiHeadAttention, self-attention over s positions of width d, key_dim = d / heads, with biases."""
    return (4 * 2 * s * d * d          # Q, K, V and output projections
            + 4 * s * d                # their biases
            + s * d                    # Q * 1/sqrt(key_dim)
            + 2 * 2 * s * s * d        # QK^T and AV, all heads: s*s*(d/heads) MACs per head each
            + 5 * heads * s * s        # softmax per score
            + (2 * heads * s * s if masked else 0))   # masked softmax: a select before and one after


def test_bert_base_at_128_tokens_matches_its_hand_count():
    s, d, heads, f, layers = 128, 768, 12, 3072, 12
    flops, _ = per_sample(token_model(models.BertBackbone(
        vocabulary_size=30522, num_layers=layers, num_heads=heads, hidden_dim=d, intermediate_dim=f), s))
    embeddings = 2 * s * d + 7 * s * d   # token, position and segment lookups (0), their 3-way add, LayerNorm
    layer = (mha_flops(s, d, heads, masked=True)   # the padding mask reaches the attention
             + 2 * s * d + 2 * 7 * s * d           # two residual adds, two LayerNorms (post-norm)
             + 2 * s * d * f + s * f + 8 * s * f   # FFN in: matmul, bias, GELU
             + 2 * s * f * d + s * d)              # FFN out: matmul, bias
    pooler = 2 * d * d + d + 4 * d                 # the [CLS] token's dense layer with tanh
    expected = embeddings + layers * layer + pooler
    assert flops == pytest.approx(expected, rel=1e-3)


def test_vit_b16_at_224_matches_its_hand_count_and_torchvisions_multiply_adds():
    size, patch, d, heads, mlp, layers = 224, 16, 768, 12, 3072, 12
    n = (size // patch) ** 2 + 1   # 196 patches + the class token
    backbone = models.ViTBackbone(image_shape=(size, size, 3), patch_size=patch, num_layers=layers,
                                  num_heads=heads, hidden_dim=d, mlp_dim=mlp)
    flops, costs = per_sample(backbone)
    patches = 2 * (n - 1) * d * patch * patch * 3 + (n - 1) * d   # the 16x16/16 conv and its bias
    embed = n * d                                                  # + position embeddings (the class token: a copy)
    block = (2 * 7 * n * d                                         # two LayerNorms (pre-norm)
             + mha_flops(n, d, heads, masked=False)
             + 2 * n * d                                           # two residual adds
             + 2 * n * d * mlp + n * mlp + 8 * n * mlp             # MLP in: matmul, bias, GELU
             + 2 * n * mlp * d + n * d)                            # MLP out: matmul, bias
    expected = patches + embed + layers * block + 7 * n * d        # + the final LayerNorm
    assert flops == pytest.approx(expected, rel=1e-3)
    # torchvision's model table gives vit_b_16 17.56 GFLOPS, counted as multiply-adds (its 768 x 1000 head, 0.8 M,
    # is no part of the backbone)
    assert sum(c.extra.get("macs", 0) for c in costs) / BATCH == pytest.approx(17.56e9, rel=0.005)


def rope_flops(s, heads, head_dim, batch=BATCH):
    """keras_hub's RotaryEmbedding on (batch, s, heads, head_dim), per sample: 2 multiplies, 1 add and half a
    negation per element; its cos/sin table (s*head_dim/2 products, s*head_dim cosines and as many sines) is made
    once per call, for the whole batch."""
    return 7 * s * heads * head_dim // 2 + (s * head_dim // 2 + 2 * s * head_dim) / batch


def test_llama_style_decoder_at_128_tokens_matches_its_hand_count():
    # grouped-query attention: 16 query heads share 4 key/value heads of width 64; gated SiLU MLP; RMSNorm
    s, d, hq, hkv, f, layers = 128, 1024, 16, 4, 2816, 2
    hd = d // hq
    flops, _ = per_sample(token_model(models.LlamaBackbone(
        vocabulary_size=1000, num_layers=layers, num_query_heads=hq, num_key_value_heads=hkv, hidden_dim=d,
        intermediate_dim=f), s))
    layer = (s * s                                      # the padding mask met with the causal one (a minimum)
             + 4 * s * d                                # RMSNorm before attention
             + 2 * s * d * hq * hd                      # Q projection (no bias)
             + 2 * 2 * s * d * hkv * hd                 # K and V projections, 4 heads each
             + rope_flops(s, hq, hd) + rope_flops(s, hkv, hd)   # rotary on Q and K (K/V heads repeated: copies)
             + 2 * hq * s * s * hd                      # QK^T
             + hq * s * s                               # scores * 1/sqrt(head_dim)
             + (5 + 2) * hq * s * s                     # masked softmax
             + 2 * hq * s * s * hd                      # AV
             + 2 * s * hq * hd * d                      # output projection
             + s * d                                    # residual add
             + 4 * s * d                                # RMSNorm before the MLP
             + 2 * 2 * s * d * f                        # gate and up projections
             + 5 * s * f + s * f                        # SiLU of the gate, gate * up
             + 2 * s * f * d                            # down projection
             + s * d)                                   # residual add
    expected = layers * layer + 4 * s * d               # token lookup (0), the final RMSNorm
    assert flops == pytest.approx(expected, rel=1e-3)


def test_gemma_style_decoder_at_128_tokens_matches_its_hand_count():
    # Gemma-2B's widths (hidden 2048, 8 query heads of 256 sharing 1 key/value head) at 2 layers, a small vocabulary
    # and a narrower MLP: the same formula per layer as the 18 of Gemma-2B, built in seconds
    s, d, hq, hkv, hd, inter, layers = 128, 2048, 8, 1, 256, 4096, 2
    f = inter // 2   # GemmaBackbone's gate and up projections are intermediate_dim / 2 wide
    flops, _ = per_sample(token_model(models.GemmaBackbone(
        vocabulary_size=1000, num_layers=layers, num_query_heads=hq, num_key_value_heads=hkv, hidden_dim=d,
        intermediate_dim=inter, head_dim=hd), s))
    attention = (2 * s * d * hq * hd + 2 * 2 * s * d * hkv * hd     # Q, K, V projections
                 + rope_flops(s, hq, hd) + rope_flops(s, hkv, hd)   # rotary (its re-interleave: copies)
                 + s * hq * hd                                      # Q * 1/sqrt(head_dim)
                 + 2 * hq * s * s * hd + (5 + 2) * hq * s * s + 2 * hq * s * s * hd   # QK^T, masked softmax, AV
                 + 2 * s * s                                        # mask == 0, all(): rows with no key
                 + s * hq * hd                                      # where(): such rows zeroed
                 + 2 * s * hq * hd * d)                             # output projection
    layer = (s * s + 4 * s * d + attention + s * d                  # mask minimum, RMSNorm, residual add
             + 4 * s * d + 2 * 2 * s * d * f + 8 * s * f + s * f    # RMSNorm, gate and up, GELU(tanh), gate * up
             + 2 * s * f * d + s * d)                               # down projection, residual add
    expected = s * d + layers * layer + 4 * s * d   # embeddings * sqrt(hidden), the layers, the final RMSNorm
    assert flops == pytest.approx(expected, rel=1e-3)


def test_resnet50_backbone_at_224_matches_its_hand_count_and_torchvisions_multiply_adds():
    backbone = models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7], stackwise_num_filters=[64, 128, 256, 512],
        stackwise_num_blocks=[3, 4, 6, 3], stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
        image_shape=(224, 224, 3))
    flops, costs = per_sample(backbone)
    # stem: 7x7/2 conv 3 -> 64 to 112x112, BN (2) + ReLU (1), 3x3/2 max pool (9 per output) to 56x56
    expected = 2 * 112 * 112 * 64 * 7 * 7 * 3 + 3 * 112 * 112 * 64 + 9 * 56 * 56 * 64
    size, channels = 56, 64
    for filters, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            out = size // stride if block == 0 else size
            if block == 0:   # 1x1 shortcut conv with the stride, + BN
                expected += 2 * out * out * 4 * filters * channels + 2 * out * out * 4 * filters
            expected += 2 * size * size * filters * channels + 3 * size * size * filters    # 1x1 in, BN, ReLU
            expected += 2 * out * out * filters * 9 * filters + 3 * out * out * filters     # 3x3 (strided), BN, ReLU
            expected += 2 * out * out * 4 * filters * filters + 2 * out * out * 4 * filters  # 1x1 out, BN
            expected += 2 * out * out * 4 * filters                                          # residual add, ReLU
            size, channels, stride = out, 4 * filters, 1
    assert flops == pytest.approx(expected, rel=1e-3)
    # torchvision's model table gives resnet50 (the same v1.5 network: stride in the 3x3 conv) 4.09 GFLOPS, counted
    # as multiply-adds, its 2048 x 1000 head (2 M) included
    assert sum(c.extra.get("macs", 0) for c in costs) / BATCH == pytest.approx(4.09e9, rel=0.005)
