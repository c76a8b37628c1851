import pytest

from carm_advisor.carm.placement import DEFAULT_MATH_MODE, compute_path_for, missing_roof, missing_roof_note
from carm_advisor.mapping.types import OP_ELEMENTWISE, OP_MATMUL, LayerCost
from carm_advisor.predict import compute_path, memory_level


def cost(type_="Conv2D", dtype="float32", op=OP_MATMUL, tc=True, bytes_read=100, bytes_written=100):
    return LayerCost(name="x", type=type_, flops=1000, bytes_read=bytes_read, bytes_written=bytes_written,
                     compute_dtype=dtype, op_class=op, tensor_core=tc)


@pytest.mark.parametrize(
    "type_, dtype, backend, expected",
    [
        ("Conv2D", "float32", "torch", "tc_tf32"),   # cudnn.allow_tf32 defaults to True
        ("Dense", "float32", "torch", "fp32"),       # matmul.allow_tf32 defaults to False
        ("Dense", "float32", "tensorflow", "tc_tf32"),
        ("Dense", "float32", "jax", "tc_tf32"),
        ("Dense", "float32", "numpy", "fp32"),
        ("Conv2D", "bfloat16", "torch", "tc_bf16"),
        ("Dense", "float16", "torch", "tc_fp16"),
        ("Dense", "float8_e4m3fn", "torch", "tc_fp8_e4m3"),
    ],
)
def test_matmul_layers_pick_the_tensor_core_path_of_their_dtype_and_backend(type_, dtype, backend, expected):
    assert compute_path(cost(type_, dtype), DEFAULT_MATH_MODE[backend]) == expected


def test_elementwise_layers_run_on_cuda_cores():
    assert compute_path(cost("ReLU", "float32", OP_ELEMENTWISE, False), DEFAULT_MATH_MODE["torch"]) == "fp32"
    assert compute_path(cost("ReLU", "bfloat16", OP_ELEMENTWISE, False), DEFAULT_MATH_MODE["torch"]) == "fp16x2"


def test_depthwise_marked_not_tensor_core_stays_on_cuda_cores():
    assert compute_path(cost("DepthwiseConv2D", "bfloat16", OP_MATMUL, False), DEFAULT_MATH_MODE["torch"]) == "fp16x2"


def test_missing_path_falls_back_to_one_the_profile_has():
    assert compute_path(cost("Dense", "float16"), DEFAULT_MATH_MODE["torch"], {"fp32", "tc_bf16"}) == "tc_bf16"
    assert compute_path(cost("ReLU", "bfloat16", OP_ELEMENTWISE, False), DEFAULT_MATH_MODE["torch"], {"fp32"}) == "fp32"


def test_fallback_ends_on_fp32_when_the_profile_has_neither_half_precision_tensor_core_roof():
    # tc_fp16 and tc_bf16 fall back to each other: a profile with neither must not loop forever.
    assert compute_path(cost("Dense", "float16"), DEFAULT_MATH_MODE["torch"], {"fp32"}) == "fp32"
    assert compute_path(cost("Dense", "int8"), DEFAULT_MATH_MODE["torch"], {"fp32"}) == "fp32"


def test_working_sets_that_fit_the_l2_are_served_from_it():
    assert memory_level(cost(bytes_read=400, bytes_written=100), l2_usable_bytes=500) == "l2"
    assert memory_level(cost(bytes_read=400, bytes_written=101), l2_usable_bytes=500) == "hbm"


def test_int8_and_fp8_fall_back_to_a_tensor_core_roof_the_profile_has():
    assert compute_path(cost("Dense", "int8"), DEFAULT_MATH_MODE["torch"], {"fp32", "tc_bf16"}) == "tc_bf16"


def test_a_roof_the_profile_lacks_is_named_with_the_one_used_instead():
    # float32 convolutions under TF32 math on a profile without the TF32 roof land on the FP32 CUDA-core roof
    placed = compute_path_for("float32", True, "Conv2D", {"conv": "tf32"}, {"fp32", "tc_bf16"})
    assert placed == "fp32"
    note = missing_roof_note("tc_tf32", placed)
    assert note == "placed on FP32 (CUDA cores): the profile has no TF32 Tensor Core roof"
    assert missing_roof(f"depthwise; {note}") == ("FP32 (CUDA cores)", "TF32 Tensor Core")
    assert missing_roof("depthwise") is None
