"""Keras' int8 and float8 quantisation in the tuner: searched where the layers model.quantize converts carry a tenth
of the model's FLOPs (a transformer) and not elsewhere (VGG16, said in the result's warnings); every trial model
built quantised; a model Keras cannot quantise fails in one line; predicted trials on the placement table's roof,
bound-only where the calibration has no cells of their dtype; the winner named and written as the code that
quantises it."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import keras
import pytest
from rich.console import Console

from carm_advisor.errors import ModelLoadError
from carm_advisor.models.builder import build, model_spec, quantized_layers
from carm_advisor.trials.predicted import ConfigPredictor
from carm_advisor.trials.space import (
    PRECISIONS,
    QUANTIZE_MIN_FLOPS_SHARE,
    QUANTIZED_PRECISIONS,
    SearchSpace,
    TrialConfig,
    with_quantization,
)

SUPPORT = Path(__file__).parent / "tune_support"
sys.path.insert(0, str(SUPPORT))

TINY_BERT = "small_transformers:tiny_bert"
# The FLOPs model.quantize converts in tiny_bert at batch 1 (8 tokens, hidden 32, feed-forward 64, 2 layers), by hand:
# per layer, the feed-forward Dense layers 2x8x32x64 + 64x8 bias + 8 gelu x 512 = 37376 and 2x8x64x32 + 256 bias
# = 33024, the attention's four EinsumDense projections 4 x 2x8x32x32 = 65536; the pooler Dense 2x32x32 + 32 bias
# + 4 tanh x 32 = 2208.
TINY_BERT_QUANTIZABLE = 2 * (37376 + 33024 + 65536) + 2208
# VGG16's Dense layers (fc1 25088x4096, fc2 4096x4096, predictions 4096x1000), by hand: 2 x MACs + biases + relu
# (1 per output of fc1 and fc2) + softmax (5 per output of predictions).
VGG16_DENSE = 2 * (25088 * 4096 + 4096 * 4096 + 4096 * 1000) + (4096 + 4096 + 1000) + 8192 + 5 * 1000


@pytest.fixture(scope="module")
def tiny_bert_predictor():
    return ConfigPredictor(model_spec(TINY_BERT), None, calibration=True)


def test_a_small_transformer_searches_int8_and_float8(tiny_bert_predictor):
    shares = tiny_bert_predictor.quantizable_shares()
    assert shares["int8"][0] == shares["float8"][0] == TINY_BERT_QUANTIZABLE
    assert shares["int8"][0] / shares["int8"][1] > 0.8   # projections and feed-forward: most of its work
    space, notes = with_quantization(SearchSpace(("jax",)), shares, "tiny_bert")
    assert space.precisions == PRECISIONS and set(QUANTIZED_PRECISIONS) == {"int8", "float8"} and notes == []


def test_vgg16_searches_no_quantisation_and_says_why():
    shares = ConfigPredictor(model_spec("vgg16"), None, calibration=False).quantizable_shares()
    converted, total = shares["int8"]
    assert converted == VGG16_DENSE and converted / total < 0.01
    space, notes = with_quantization(SearchSpace(("torch",)), shares, "vgg16")
    assert not set(space.precisions) & {"int8", "float8"}
    assert space.precisions == ("float32", "float32_tf32", "float32_no_tf32", "mixed_float16", "mixed_bfloat16")
    assert notes == [f"int8/float8 not searched: the layers model.quantize converts (Dense, EinsumDense and attention "
                     f"projections) carry {converted / total:.1%} of vgg16's FLOPs; quantisation is searched from 10% "
                     "(below it the quantised layers could save at most that share of the compute, the other layers "
                     "keeping their time)"]


def test_the_threshold_keeps_a_tenth_drops_less_and_keeps_the_baselines_precision():
    assert QUANTIZE_MIN_FLOPS_SHARE == 0.10
    space, notes = with_quantization(SearchSpace(("jax",)), {"int8": (999, 10000), "float8": (1000, 10000)}, "m")
    assert "int8" not in space.precisions and "float8" in space.precisions
    assert notes[0].startswith("int8 not searched: ") and "carry 10.0% of m's FLOPs" in notes[0]
    kept, notes = with_quantization(SearchSpace(("jax",)), {"int8": (0, 1), "float8": (0, 1)}, "m", keep=("int8",))
    assert "int8" in kept.precisions and notes[0].startswith("float8 not searched")
    assert with_quantization(SearchSpace(("jax",)), None, "m") == (SearchSpace(("jax",)), [])


# ---- building ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_a_trial_model_of_a_quantised_precision_is_built_quantised(mode):
    model = build(model_spec(TINY_BERT), "mixed_bfloat16", quantize=mode)
    layers = {layer.name: layer for layer in model._flatten_layers(include_self=False)}
    found = quantized_layers(model)
    assert found and set(found.values()) == {mode}
    for layer in layers.values():
        if type(layer) in (keras.layers.Dense, keras.layers.EinsumDense):
            assert layer.dtype_policy.name == f"{mode}_from_mixed_bfloat16", layer.name
        if isinstance(layer, keras.layers.LayerNormalization):
            assert layer.dtype_policy.name == "mixed_bfloat16"   # model.quantize leaves it as it is


def test_a_model_keras_cannot_quantise_is_one_line():
    with pytest.raises(ModelLoadError) as info:
        build(model_spec(TINY_BERT), "mixed_float16", quantize="int8")
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("cannot quantise 'tiny_bert' to int8: ValueError: Quantization mode='int8' doesn't work "
                           "well with compute_dtype='float16'")


def test_a_built_model_is_quantised_in_a_copy_never_in_the_users_object():
    inputs = keras.Input((16,))
    model = keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs), name="mine")
    quantised = build(model_spec(model), "mixed_bfloat16", quantize="int8")
    assert quantised is not model and quantized_layers(quantised) == {"fc": "int8"}
    assert model.get_layer("fc").dtype_policy.name == "float32" and not quantized_layers(model)


# ---- the configuration: its code, its name -------------------------------------------------------------------

def test_a_quantised_configuration_is_written_and_named_as_quantised():
    config = TrialConfig("jax", "int8", 64, "channels_last", "xla")
    assert config.quantize == "int8" and config.keras_policy == "mixed_bfloat16" and config.compute_dtype == "bfloat16"
    lines = config.keras_code().splitlines()
    policy = lines.index('keras.mixed_precision.set_global_policy("mixed_bfloat16")')
    quantize = lines.index('model.quantize("int8")  # its Dense and EinsumDense layers to int8; the others stay '
                           'mixed_bfloat16')
    built = next(i for i, line in enumerate(lines) if line.startswith("model = build_model()"))
    assert policy < built < quantize < next(i for i, line in enumerate(lines) if line.startswith("model.compile("))
    assert config.label().startswith("jax, int8 (model.quantize on mixed_bfloat16), b64")
    assert config.to_dict()["quantize"] == "int8" and config.to_dict()["policy"] == "mixed_bfloat16"
    assert TrialConfig.from_dict(config.to_dict()) == config
    assert "quantize" not in TrialConfig("jax", "mixed_bfloat16").to_dict()


def test_a_tune_result_names_a_quantised_winner_and_writes_its_code():
    from carm_advisor.tune.objectives import OBJECTIVES
    from carm_advisor.tune.records import TrialRecord
    from carm_advisor.tune.result import TuneResult

    def record(number, config, energy_j):
        return TrialRecord(number=number, state="COMPLETE", config=config, values=[config.batch_size / energy_j],
                           measurement={"time_s": 0.01, "energy_j": energy_j, "flops": 1e9,
                                        "batch_size": config.batch_size, "source": "predicted"},
                           bound=None, feasible=True, value_source="CARM bound")

    baseline = record(0, TrialConfig("jax", "float32", 32, "channels_last", "xla"), 2.0)
    best = record(1, TrialConfig("jax", "float8", 32, "channels_last", "xla"), 1.0)
    result = TuneResult(objectives=[OBJECTIVES["samples_per_joule"]], source="predicted", trials=[baseline, best],
                        baseline=baseline, best=best, next_best=[], pareto=[best],
                        counts={"trials": 2, "predicted": 2, "measured": 0, "repeats_reused": 0, "pruned_by_carm": 0,
                                "pruned_out_of_memory": 0, "failed": 0, "infeasible": 0},
                        blind_search={"grid_size": 2, "ruled_out_by_carm_bound": 0}, layer_changes=[],
                        clock_recommendation=None, space=SearchSpace(backends=("jax",)), storage_url="sqlite:///x.db",
                        study_name="m", device={})
    doc = result.to_dict()
    assert doc["best"]["config"]["precision"] == "float8" and doc["best"]["config"]["quantize"] == "float8"
    assert 'model.quantize("float8")' in doc["best"]["code"]
    buf = io.StringIO()
    Console(file=buf, width=300).print(result)
    assert "jax, float8 (model.quantize on mixed_bfloat16), b32" in buf.getvalue()


# ---- a predicted study --------------------------------------------------------------------------------------

def test_predicted_quantised_trials_take_the_tables_roof_and_no_calibration_without_their_cells(tiny_bert_predictor):
    p = tiny_bert_predictor
    bf16 = p.predict(TrialConfig("jax", "mixed_bfloat16", 8, "channels_last", "xla"))
    jax_int8 = p.predict(TrialConfig("jax", "int8", 8, "channels_last", "xla"))
    torch_int8 = p.predict(TrialConfig("torch", "int8", 8, "channels_last", "eager"))
    dense = "transformer_layer_0/feedforward_intermediate_dense"
    row = {r.name: r for r in jax_int8.rows}[dense]
    assert (row.dtype, row.path) == ("int8", "tc_int8")
    assert {r.name: r for r in torch_int8.rows}[dense].path == "fp32"   # torch casts the int8 operands to float32
    assert {r.name: r for r in bf16.rows}[dense].path == "tc_bf16"
    attention = {r.name: r for r in jax_int8.rows}["transformer_layer_0/self_attention_layer"]
    assert "projections are int8 EinsumDense layers after model.quantize" in attention.notes
    # the shipped calibration has no int8 cells: the bound, labelled, where mixed_bfloat16 is calibrated
    value = p.value_prediction(TrialConfig("jax", "int8", 8, "channels_last", "xla"))
    assert value.value_source == "CARM bound"
    assert value.detail.startswith("7 quantised layer(s) without int8 cells in the calibration on jax")
    assert p.value_prediction(TrialConfig("jax", "mixed_bfloat16", 8, "channels_last", "xla")).value_source == \
        "calibrated"


def test_a_predicted_study_of_a_transformer_searches_quantisation_and_one_of_vgg16_says_why_not(tmp_path):
    from carm_advisor.tune.study import tune

    result = tune(TINY_BERT, n_trials=14, predict=True, progress=False, storage=str(tmp_path / "t.db"),
                  backends=("jax",), batch_sizes=(8,), calibration=False)
    assert {"int8", "float8"} <= set(result.space.precisions)
    tried = {t.config.precision for t in result.trials if t.state in ("COMPLETE", "PRUNED")}
    assert {"int8", "float8"} <= tried   # predicted, or pruned by their CARM bound
    assert not [w for w in result.warnings if "not searched" in w]
    # bound against bound: the int8 configuration's Dense and projection work on the INT8 roof, the rest as
    # mixed_bfloat16's, its int8 kernels read at 1 byte: no other configuration's bound beats it
    assert result.best.config.precision == "int8"
    assert result.to_dict()["best"]["config"]["quantize"] == "int8"

    vgg = tune("vgg16", n_trials=2, predict=True, progress=False, storage=str(tmp_path / "v.db"),
               backends=("torch",), batch_sizes=(32,), calibration=False)
    assert not set(vgg.space.precisions) & {"int8", "float8"}
    assert any(w.startswith("int8/float8 not searched: ") and "of vgg16's FLOPs" in w for w in vgg.warnings)
