"""benchmarks/quantized_kernels.py's CPU side: kernel names and optimised HLO read into the CARM compute path a
quantised Dense runs on, on recorded samples (cuBLAS / CUTLASS kernel names as torch.profiler lists them, XLA GPU
HLO as jax prints it), and its summary of a result file."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("quantized_kernels", BENCH / "quantized_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mod = _load()


@pytest.mark.parametrize("name, path", [
    ("sm90_xmma_gemm_i8i8_i32_i32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "tc_int8"),
    ("sm80_xmma_gemm_s8s8_s32s32_tn_n_tilesize128x128x64_stage4_warpsize2x2x1_tensor16x8x32_kernel", "tc_int8"),
    ("ampere_int8_i16832gemm_int8_128x128_ldg16_stages_64x3_tn", "tc_int8"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "tc_bf16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
     "tc_bf16"),
    ("void cutlass::Kernel2<cutlass_90_tensorop_e4m3gemm_e4m3_128x128x128_1x1x1_0_tnn_align16>(Params)",
     "tc_fp8_e4m3"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cublas", "tc_fp8_e4m3"),
    ("ampere_sgemm_128x64_tn", "fp32"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
     "tc_tf32"),
    ("ampere_h16816gemm_128x128_ldg8_stages_64x3_tn", "tc_fp16"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", mod.UNREAD),
])
def test_a_matmul_kernel_name_gives_the_path_of_its_operand_type(name, path):
    assert mod.kernel_path(name) == path


@pytest.mark.parametrize("name", [
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float>>(int, ...)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxOps<float>>>(...)",
    "Memcpy DtoD (Device -> Device)",
])
def test_an_elementwise_reduction_or_copy_kernel_is_no_matmul(name):
    assert mod.kernel_path(name) is None


# Optimised XLA GPU HLO: an FP8 cuBLASLt call (types beside the operands), an int8 cuBLAS call, and a Triton GEMM
# fusion whose computation converts its int8 operands to bf16 (bare operand names, as newer XLA prints them).
HLO = """HloModule jit_call

%gemm_fusion_dot.2_computation (param_0.4: s8[1024,1024], param_1.5: s8[1024,4096]) -> bf16[1024,4096] {
  %param_0.4 = s8[1024,1024]{1,0} parameter(0)
  %convert.11 = bf16[1024,1024]{1,0} convert(%param_0.4)
  %param_1.5 = s8[1024,4096]{1,0} parameter(1)
  %convert.12 = bf16[1024,4096]{1,0} convert(%param_1.5)
  ROOT %dot.3 = bf16[1024,4096]{1,0} dot(%convert.11, %convert.12), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.9 (Arg_0.1: s8[1024,1024], Arg_1.2: s8[1024,4096]) -> bf16[1024,4096] {
  %Arg_0.1 = s8[1024,1024]{1,0} parameter(0)
  %Arg_1.2 = s8[1024,4096]{1,0} parameter(1)
  %cublas-lt-matmul.2.0 = (bf16[1024,4096]{1,0}, s8[33554432]{0}) custom-call(f8e4m3fn[1024,1024]{1,0} %c.5, f8e4m3fn[4096,1024]{1,0} %c.6, f32[] %p.2, f32[] %p.3), custom_call_target="__cublas$lt$matmul$f8", backend_config={"gemm_backend_config":{}}
  %cublas-gemm.1.0 = (s32[1024,4096]{1,0}, s8[4194304]{0}) custom-call(%Arg_0.1, %Arg_1.2), custom_call_target="__cublas$gemm"
  ROOT %gemm_fusion_dot.2 = bf16[1024,4096]{1,0} fusion(%Arg_0.1, %Arg_1.2), kind=kCustom, calls=%gemm_fusion_dot.2_computation, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
}
"""


def test_optimised_hlo_gemms_take_the_path_of_their_operand_types():
    gemms = mod.hlo_gemms(HLO)
    assert [(g["kind"], g["path"]) for g in gemms] == [
        ("dot", "tc_bf16"),               # the Triton fusion's dot, after its converts: a bf16 MMA
        ("cublas", "tc_fp8_e4m3"),        # f8e4m3fn operands (its f32 scales aside)
        ("cublas", "tc_int8"),            # s8 operands, named bare: their types from their definitions
        ("triton fusion", "tc_int8"),     # the fusion's own operands (converted inside it)
    ]
    # The case's path: a GEMM call or dot first, the Triton fusion's operands last.
    assert mod.case_path([], gemms) == "tc_bf16"
    assert mod.case_path([], [g for g in gemms if g["kind"] == "triton fusion"]) == "tc_int8"


def test_a_case_computes_on_its_longest_matmul_kernel():
    kernels = [{"name": "elementwise", "time_us": 900.0, "path": None},
               {"name": "ampere_sgemm_128x64_tn", "time_us": 400.0, "path": "fp32"},
               {"name": "sm90_xmma_gemm_i8i8_i32", "time_us": 40.0, "path": "tc_int8"}]
    assert mod.case_path(kernels, []) == "fp32"


def test_the_table_path_is_what_the_placement_assumes():
    # torch: int8 operands of a 3-D Dense are cast to float32 (FP32 at torch's default), a 2-D one takes _int_mm
    assert mod.table_path("torch", "int8", (8, 128, 1024)) == "fp32"
    assert mod.table_path("torch", "int8", (1024, 1024)) == "tc_int8"
    assert mod.table_path("jax", "float8", (8, 128, 1024)) == "tc_fp8_e4m3"
    assert mod.table_path("torch", None, (1024, 1024)) == "tc_bf16"


def test_the_summary_of_a_result_file_and_its_bad_input(tmp_path):
    doc = {"cases": [{"backend": "torch", "mode": "int8", "input_shape": [8, 128, 1024], "compute_path": "fp32",
                      "table_path": "fp32", "agrees": True},
                     {"backend": "jax", "mode": "int8", "input_shape": [1024, 1024], "compute_path": None,
                      "table_path": "tc_int8", "agrees": None, "error": "exit 1: no GPU"}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, str(BENCH / "quantized_kernels.py"), "--summarize", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert "8x128x1024" in lines[2] and "fp32" in lines[2] and lines[2].endswith("True")
    assert "exit 1: no GPU" in lines[3]
    bad = subprocess.run([sys.executable, str(BENCH / "quantized_kernels.py"), "--summarize", str(tmp_path / "no")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot read") and "Traceback" not in bad.stderr
