"""Kernel build (nvcc), the ctypes ABI, the benchmark table and the TensorFlow op.

Compiles for real with nvcc (no GPU needed); GPU runs are @pytest.mark.gpu and skip here.
Expected FLOPs come from the instruction shapes by hand: wgmma m64nNkK = 2*64*N*K, mma m16n8kK =
2*16*8*K, FMA = 2, HFMA2 = 4.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _gpu import gpu_present

from carm_advisor.errors import GPUUnavailableError, KernelBuildError, MeasurementError
from carm_advisor.measure import build
from carm_advisor.measure.kernels import KernelLibrary, load_tf_ops

HAVE_NVCC = shutil.which("nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not on PATH")


SM90_COMPUTE_KEYS = {"fp64", "fp32", "fp16x2", "tc_tf32", "tc_fp16", "tc_fp16_f16acc", "tc_bf16",
                     "tc_fp8_e4m3", "tc_fp8_e5m2", "tc_int8"}
MEMORY_KEYS = {"shared", "l1", "l2", "hbm"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One sm_90a build (with the TF op when TensorFlow is importable) for the whole module."""
    if not HAVE_NVCC:
        pytest.skip("nvcc not on PATH")
    # compiled here every run (its ptxas report is checked), into the run's cache (tests/conftest.py), where the
    # README's `carm-advise build-kernels --arch sm_90a` (tests/test_readme.py) then finds it
    return build.build_kernels(arch="sm_90a", force=True)


@pytest.fixture(scope="module")
def lib(built):
    return KernelLibrary.load(built.lib_path)


@pytest.mark.nvcc
@needs_nvcc
def test_sm90a_build_loads_with_ctypes_and_reports_no_spills(built, lib):
    assert built.lib_path.is_file() and lib.path == built.lib_path
    assert "wgmma_kernel" in built.ptxas_report  # the wgmma kernels went through ptxas for sm_90a
    spills = [ln for ln in built.ptxas_report.splitlines() if "spill" in ln and not ln.strip().endswith("0 bytes spill loads")]
    assert spills == []


@pytest.mark.nvcc
@needs_nvcc
def test_wgmma_and_cuda_core_flops_per_item_match_instruction_shapes(lib):
    assert lib.benchmark("tc_bf16_wgmma_rand").flops_per_item == 2 * 64 * 256 * 16
    assert lib.benchmark("tc_tf32_wgmma_rand").flops_per_item == 2 * 64 * 256 * 8
    assert lib.benchmark("tc_fp8_e4m3_wgmma_zero").flops_per_item == 2 * 64 * 256 * 32
    assert lib.benchmark("tc_int8_wgmma_rand").flops_per_item == 2 * 64 * 256 * 32
    assert lib.benchmark("tc_bf16_mma_rand").flops_per_item == 2 * 16 * 8 * 16
    assert lib.benchmark("fp32_fma").flops_per_item == 2
    assert lib.benchmark("fp64_fma").flops_per_item == 2
    assert lib.benchmark("fp16x2_fma").flops_per_item == 4
    assert lib.benchmark("hbm_copy").bytes_per_item == 32  # 16 read + 16 written
    assert lib.benchmark("hbm_read").bytes_per_item == 16


@pytest.mark.nvcc
@needs_nvcc
def test_mixed_sweep_intensity_follows_compute_iterations(lib):
    # FP32: per 16-byte float4, 4 floats x C FMAs (C-1 on the value, 1 into the accumulator) = 8C FLOPs
    # -> AI = 8C / 16 = C / 2
    assert lib.benchmark("mix_fp32_hbm_c16").flops_per_byte == 8.0
    # TMA bulk L2 reads: one 16 KiB copy per 32-thread block iteration = 512 bytes per thread-item
    for name in ("l2_read_bulk", "hbm_read_bulk"):
        assert lib.benchmark(name).bytes_per_item == 16384 / 32 and lib.benchmark(name).min_arch == 90
    # every FP32 sweep implementation (plain, 8 or 16 loads per step, TMA-fed, 4 shared loads per step) keeps AI = C/2
    for name in ("mix_fp32_l2_u8_c16", "mix_fp32_hbm_u16_c16", "mix_fp32_hbm_tma_c16", "mix_fp32_shared_s4_c16"):
        assert lib.benchmark(name).flops_per_byte == 8.0
    assert lib.benchmark("mix_fp32_shared_c4").flops_per_byte == 2.0
    # BF16 mma.sync: C instructions (4096 FLOPs) per warp per 32 16-byte loads -> AI = 8C
    assert lib.benchmark("mix_bf16_hbm_c2").flops_per_byte == 16.0
    # BF16 wgmma: 2 warpgroups x C x m64n256k16 (2*64*256*16 = 524288 FLOPs) per 256 threads x 16 loads
    # of 16 bytes (65536 bytes) -> AI = 1048576 C / 65536 = 16C
    assert lib.benchmark("mix_bf16_wgmma_hbm_c4").flops_per_byte == 64.0
    wg = lib.benchmark("mix_bf16_wgmma_hbm_c4")
    assert (wg.min_arch, wg.max_arch) == (90, 90) and lib.benchmark("mix_bf16_hbm_c2").max_arch == 89
    mixed = [b for b in lib.benchmarks() if b.kind == "mixed"]
    assert {b.memory_key for b in mixed if b.carm_key == "fp32"} == {"hbm", "l2", "shared"}
    ais = sorted(b.flops_per_byte for b in mixed if b.carm_key == "fp32" and b.memory_key == "hbm")
    assert len(ais) >= 8 and ais[0] <= 1 and ais[-1] >= 64  # the sweep straddles every FP32 ridge


@pytest.mark.nvcc
@needs_nvcc
def test_table_covers_every_carm_key_on_sm90_and_names_are_unique(lib):
    rows = [b for b in lib.benchmarks() if b.runs_on(90)]
    assert {b.carm_key for b in rows if b.kind == "compute"} == SM90_COMPUTE_KEYS
    assert {b.carm_key for b in rows if b.kind == "memory"} == MEMORY_KEYS
    tc = {b.carm_key for b in rows if b.instruction.startswith("wgmma")}
    assert tc == {k for k in SM90_COMPUTE_KEYS if k.startswith("tc_")}
    for key in tc:  # both data variants, since they draw different power
        assert {b.variant for b in rows if b.carm_key == key and b.instruction.startswith("wgmma")} == {"rand", "zero"}
    names = [b.name for b in lib.benchmarks()]
    assert len(names) == len(set(names))
    assert {b.carm_key for b in lib.benchmarks() if b.variant == "partition" or b.variant == "full"} == {"l2"}


@pytest.mark.nvcc
@needs_nvcc
def test_wgmma_rows_are_sm90_only_and_fp8_mma_needs_ada(lib):
    wg = lib.benchmark("tc_bf16_wgmma_rand")
    assert wg.runs_on(90) and not wg.runs_on(80) and not wg.runs_on(100)
    assert lib.benchmark("tc_fp8_e4m3_mma_rand").runs_on(89)
    assert not lib.benchmark("tc_fp8_e4m3_mma_rand").runs_on(86)
    assert lib.benchmark("tc_bf16_mma_rand").runs_on(80)


@pytest.mark.nvcc
@needs_nvcc
@pytest.mark.skipif(gpu_present(), reason="a GPU is present: this test is for machines without one")
def test_run_without_gpu_raises_gpu_unavailable_with_message(lib):
    with pytest.raises(GPUUnavailableError, match="no usable NVIDIA GPU"):
        lib.run("fp32_fma", iterations=10)
    with pytest.raises(GPUUnavailableError):
        lib.device_info(0)


@pytest.mark.nvcc
@needs_nvcc
def test_unknown_benchmark_name_raises_measurement_error(lib):
    with pytest.raises(MeasurementError, match="unknown benchmark"):
        lib.run("no_such_kernel")


@pytest.mark.nvcc
@needs_nvcc
def test_tf_op_library_registers_carm_bench_run(built):
    pytest.importorskip("tensorflow")
    assert built.tf_op_path is not None and built.tf_op_path.is_file()
    ops = load_tf_ops(built.tf_op_path)
    assert hasattr(ops, "carm_bench_run") and hasattr(ops, "carm_bench_count")
    import tensorflow as tf

    assert int(ops.carm_bench_count()) == len(KernelLibrary.load(built.lib_path).benchmarks())
    if not gpu_present():
        with pytest.raises(tf.errors.UnavailableError):
            ops.carm_bench_run(index=0, size_bytes=0.0, iterations=1, launches=1)


@pytest.mark.nvcc
@needs_nvcc
def test_cached_build_is_reused_and_key_changes_with_source(built, tmp_path):
    again = build.build_kernels(arch="sm_90a", cache_root=built.cache_dir.parent)
    assert again.cached and again.lib_path == built.lib_path
    src = tmp_path / "k"
    shutil.copytree(build.kernels_dir(), src)
    key1 = build.cache_key(src, ("sm_90a",), "nvcc 13", False)
    (src / "k_cudacore.cu").write_text((src / "k_cudacore.cu").read_text() + "\n// changed\n")
    assert build.cache_key(src, ("sm_90a",), "nvcc 13", False) != key1
    assert build.cache_key(src, ("sm_80",), "nvcc 13", False) != build.cache_key(src, ("sm_90a",), "nvcc 13", False)


@pytest.mark.nvcc
@needs_nvcc
def test_broken_source_raises_one_line_error_naming_file_and_log(tmp_path, monkeypatch):
    src = tmp_path / "k"
    shutil.copytree(build.kernels_dir(), src)
    (src / "k_cudacore.cu").write_text("this is not CUDA;\n")
    monkeypatch.setenv("CARM_KERNELS_DIR", str(src))
    with pytest.raises(KernelBuildError) as exc:
        build.build_kernels(arch="sm_80", with_tf=False, cache_root=tmp_path / "cache")
    msg = str(exc.value)
    assert "\n" not in msg and "k_cudacore.cu" in msg and "error" in msg and "build.log" in msg
    assert Path(msg.split("full log: ")[1].rstrip(")")).is_file()


def test_missing_nvcc_raises_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(build.sys, "path", [str(tmp_path)])
    monkeypatch.setattr(build.sysconfig, "get_paths", lambda: {"purelib": str(tmp_path), "platlib": str(tmp_path)})
    with pytest.raises(KernelBuildError, match="nvcc not found") as exc:
        build.build_kernels(with_tf=False, cache_root=tmp_path)
    assert "\n" not in str(exc.value)


def test_unknown_arch_is_rejected(tmp_path):
    if not HAVE_NVCC:
        pytest.skip("nvcc not on PATH")
    with pytest.raises(KernelBuildError, match="unknown arch"):
        build.build_kernels(arch="volta", with_tf=False, cache_root=tmp_path)


@pytest.mark.nvcc
@needs_nvcc
def test_sm80_build_compiles_the_mma_sync_path(tmp_path_factory):
    res = build.build_kernels(arch="sm_80", with_tf=False, cache_root=tmp_path_factory.mktemp("k80"))
    assert "mma_sync_kernel" in res.ptxas_report and "sm_80" in res.ptxas_report
    assert len(KernelLibrary.load(res.lib_path).benchmarks()) > 0


@pytest.mark.gpu
def test_every_benchmark_runs_and_totals_match_the_table(lib):
    dev = lib.device_info(0)
    for b in lib.benchmarks():
        if not b.runs_on(dev.arch):
            continue
        r = lib.run(b.name, iterations=2 if b.size_is_bytes else 20, launches=2)
        assert r.seconds > 0, b.name
        assert r.flops == pytest.approx(r.work_items * b.flops_per_item), b.name
        assert r.bytes == pytest.approx(r.work_items * b.bytes_per_item), b.name
        if b.name.endswith("_wgmma_zero"):
            assert r.checksum == 0.0, b.name  # zero operands give zero accumulators
