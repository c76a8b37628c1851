"""Keras' quantised layers on the CARM: what the mapping counts for them (bytes by hand), where the placement table
puts their matmuls on each backend and what their rows say, and the calibration they take (their dtype's cells
only)."""

from __future__ import annotations

import keras
import pytest

from carm_advisor.carm.placement import ASSUMED, DEFAULT_MATH_MODE, QUANTIZED_PATHS, quantized_placement
from carm_advisor.mapping import map_model
from carm_advisor.mapping.layers_dense import quantizable_flops
from carm_advisor.mapping.types import OP_MATMUL, LayerCost
from carm_advisor.models.loader import dtype_policy
from carm_advisor.predict import Predictor, compute_path

TORCH, JAX = DEFAULT_MATH_MODE["torch"], DEFAULT_MATH_MODE["jax"]


def _quantised(layer, input_shape, mode, policy="mixed_bfloat16", **input_kwargs):
    with dtype_policy(policy):
        inputs = keras.Input(input_shape, **input_kwargs)
        model = keras.Model(inputs, layer()(inputs))
    if mode:
        model.quantize(mode)
    return model


def _cost(model, batch):
    (cost,) = [c for c in map_model(model, batch_size=batch) if c.type != "InputLayer" and c.known and c.bytes]
    return cost


# ---- the mapping: bytes by hand -------------------------------------------------------------------------------

def test_an_int8_dense_reads_its_kernel_at_one_byte_per_element_and_its_scales_at_the_compute_dtype():
    model = _quantised(lambda: keras.layers.Dense(16, name="fc"), (8,), "int8")
    assert model.get_layer("fc").dtype_policy.name == "int8_from_mixed_bfloat16"
    c = _cost(model, 4)
    # inputs 4x8 bf16 = 64 B; int8 kernel 8x16 = 128 B; 16 scales + 16 biases in bf16 = 64 B
    assert c.bytes_read == 64 + 128 + 64
    assert c.bytes_written == 4 * 16 * 2
    assert c.params == 128 + 16 + 16 and c.compute_dtype == "bfloat16"
    # the float layer's FLOPs: 2 x 4x8x16 MACs + 64 biases; the quantisation's own work apart:
    # 6 per input element (32) + 2 per output element (64)
    assert c.flops == 2 * 4 * 8 * 16 + 64
    assert c.extra["quantization_mode"] == "int8" and c.extra["quantize_flops"] == 6 * 32 + 2 * 64
    assert c.extra["weight_bytes"] == 128 + 64


def test_the_same_dense_unquantised_reads_its_kernel_at_the_compute_dtype():
    c = _cost(_quantised(lambda: keras.layers.Dense(16, name="fc"), (8,), None), 4)
    assert c.bytes_read == 64 + (128 + 16) * 2 and "quantization_mode" not in c.extra


def test_a_float8_dense_keeps_its_float_kernel_and_reads_two_scalar_scales():
    model = _quantised(lambda: keras.layers.Dense(16, name="fc"), (8,), "float8")
    assert model.get_layer("fc").dtype_policy.name == "float8_from_mixed_bfloat16"
    c = _cost(model, 4)
    # inputs 64 B; the float kernel 128 elements, 16 biases and 2 scales, all at bf16 (Keras keeps the kernel float)
    assert c.bytes_read == 64 + (128 + 16 + 2) * 2
    assert c.extra["quantize_flops"] == 4 * (32 + 128) and "float kernel is kept" in c.notes


def test_an_int8_einsum_dense_reads_its_int8_kernel_and_per_output_scales():
    model = _quantised(lambda: keras.layers.EinsumDense("ab,bc->ac", output_shape=16, bias_axes="c", name="e"),
                       (8,), "int8")
    c = _cost(model, 4)
    assert c.bytes_read == 64 + 128 + (16 + 16) * 2 and c.extra["quantization_mode"] == "int8"


def test_an_int8_embedding_reads_its_rows_at_one_byte_and_a_scale_per_index():
    model = _quantised(lambda: keras.layers.Embedding(10, 4, name="emb"), (5,), "int8", dtype="int32")
    c = _cost(model, 3)
    # 15 int32 indices = 60 B, 15 rows of 4 int8 = 60 B, 15 scales in bf16 = 30 B; written 60 bf16 = 120 B
    assert c.bytes_read == 60 + 60 + 30 and c.bytes_written == 120


def test_the_flops_model_quantize_converts_include_attention_projections():
    def cost(type_, flops, **extra):
        return LayerCost(name=type_, type=type_, flops=flops, bytes_read=1, bytes_written=1, compute_dtype="float32",
                         op_class=OP_MATMUL, tensor_core=True, extra=extra)

    costs = [cost("Conv2D", 900), cost("Dense", 100), cost("MyDense", 50),   # a subclass: Keras converts none
             cost("MultiHeadAttention", 60, projection_macs=20), cost("ReversibleEmbedding", 40)]
    assert quantizable_flops(costs, "int8") == (100 + 40 + 40, 1150)
    assert quantizable_flops(costs, "float8") == (100 + 40, 1150)   # no float8 embedding in Keras


# ---- the placement table -------------------------------------------------------------------------------------

def test_every_entry_of_the_table_says_where_its_path_comes_from():
    assert {b for b, _ in QUANTIZED_PATHS} == {"torch", "jax", "tensorflow"}
    assert {m for _, m in QUANTIZED_PATHS} == {"int8", "float8"}
    for entry in QUANTIZED_PATHS.values():
        assert entry.provenance.startswith((ASSUMED, "read from the profiler's kernel names on "))


@pytest.mark.parametrize("backend, mode, shape, math, path", [
    ("torch", "int8", (64, 128, 768), TORCH, "fp32"),         # 3-D: cast to float32, torch's default FP32 matmul
    ("torch", "int8", (64, 128, 768), {"conv": "tf32", "matmul": "tf32"}, "tc_tf32"),   # TF32 on
    ("torch", "int8", (64, 768), TORCH, "tc_int8"),           # 2-D, rows > 16, K and N multiples of 8: _int_mm
    ("torch", "int8", (8, 768), TORCH, "fp32"),               # 8 rows: no _int_mm
    ("torch", "float8", (64, 128, 768), TORCH, "tc_bf16"),    # dequantised, multiplied in bfloat16
    ("jax", "int8", (64, 128, 768), JAX, "tc_int8"),
    ("jax", "float8", (64, 128, 768), JAX, "tc_fp8_e4m3"),
    ("tensorflow", "float8", (64, 128, 768), DEFAULT_MATH_MODE["tensorflow"], "tc_bf16"),
])
def test_a_quantised_dense_is_placed_on_the_path_its_backend_runs(backend, mode, shape, math, path):
    assert quantized_placement(backend, mode, "Dense", "bfloat16", math, shape, 3072)[0] == path


def test_an_einsum_dense_on_torch_takes_no_int_mm_whatever_its_shape():
    assert quantized_placement("torch", "int8", "EinsumDense", "bfloat16", TORCH, (64, 768), 3072)[0] == "fp32"


def test_a_fallback_says_what_the_layer_computes_in_and_why():
    _, note = quantized_placement("torch", "int8", "Dense", "bfloat16", TORCH, (64, 128, 768), 3072)
    assert note.startswith("int8 weights and inputs, computed in float32 on the FP32 (CUDA cores): Keras' int8 Dense")
    assert ASSUMED in note
    _, note = quantized_placement("torch", "float8", "Dense", "bfloat16", TORCH, (64, 128, 768), 3072)
    assert note.startswith("float8 (e4m3) inputs and kernel, computed in bfloat16 on the BF16 Tensor Core")
    path, note = quantized_placement("jax", "int8", "Dense", "bfloat16", JAX, (64, 128, 768), 3072)
    assert note.startswith("int8 on the INT8 Tensor Core (assumed: not yet read on a GPU")
    path, note = quantized_placement("numpy", "int8", "Dense", "bfloat16", DEFAULT_MATH_MODE["numpy"], None, 16)
    assert path == "tc_bf16" and "no quantised placement is known for the numpy backend" in note


def _int8_dense_cost():
    return LayerCost(name="fc", type="Dense", flops=2 * 64 * 128 * 768 * 3072, bytes_read=10**8, bytes_written=10**7,
                     compute_dtype="bfloat16", op_class=OP_MATMUL, tensor_core=True, params=768 * 3072,
                     input_shapes=((64, 128, 768),), output_shapes=((64, 128, 3072),),
                     extra={"quantization_mode": "int8", "weight_bytes": 768 * 3072 + 2 * 3072 * 2})


def test_the_predictor_places_and_labels_a_quantised_row_by_its_backend():
    cost = _int8_dense_cost()
    assert compute_path(cost, TORCH, backend="torch") == "fp32"
    assert compute_path(cost, JAX, backend="jax") == "tc_int8"
    (torch_row,) = Predictor.for_backend(None, "torch").rows_for_costs([cost])
    (jax_row,) = Predictor.for_backend(None, "jax").rows_for_costs([cost])
    assert torch_row.path == "fp32" and jax_row.path == "tc_int8"
    assert torch_row.dtype == jax_row.dtype == "int8"
    assert "computed in float32 on the FP32 (CUDA cores)" in torch_row.notes
    # the same work on the INT8 Tensor Cores is no slower than on the CUDA cores' FP32
    assert jax_row.predicted_time_s < torch_row.predicted_time_s
    # the activations read: bytes read less the weights' own bytes
    assert torch_row.input_bytes == 10**8 - (768 * 3072 + 2 * 3072 * 2)


class _Cells:
    """A calibration stub whose cells are keyed as Calibration.estimate's: (backend, class, dtype, size)."""

    def __init__(self, dtype):
        self.dtype = dtype

    def estimate(self, backend, layer_type, dtype, bound_time_s):
        from types import SimpleNamespace

        return SimpleNamespace(key=(backend, "matmul", self.dtype, -4))

    def efficiency(self, row, backend):
        return 0.5


@pytest.mark.parametrize("cells, calibrated", [("bfloat16", False), ("int8", True)])
def test_a_quantised_row_is_calibrated_by_its_own_dtypes_cells_only(cells, calibrated):
    (row,) = Predictor.for_backend(None, "jax", calibration=_Cells(cells)).rows_for_costs([_int8_dense_cost()])
    if calibrated:
        assert row.calibrated_time_s == pytest.approx(row.predicted_time_s / 0.5)
    else:
        assert row.calibrated_time_s is None and row.calibration.startswith("none: no int8 cells on jax")
