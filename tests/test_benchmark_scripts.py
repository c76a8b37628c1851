"""The functions of the benchmark scripts that run on the GPU machine, checked here on recorded text."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The shape of `cuobjdump -sass` output (two kernels; one with a predicated load and a local spill)
SASS = """
        Function : _Z22mix_fp32_global_kernelILi4ELi4ELi8EEvPK5uint4xxffPff
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
        /*0010*/                   LDG.E.128.STRONG.GPU R4, desc[UR4][R2.64] ;   /* 0x000000040204798 */
        /*0020*/                   FFMA R4, R4, UR6, R5 ;                 /* 0x0000000604047c23 */
        /*0030*/                   FFMA R5, R5, UR6, R6 ;                 /* 0x0000000605057c23 */
        /*0040*/               @!P0 BRA 0x10 ;                            /* 0x0000000000008947 */
        Function : _Z13other_kernelv
        /*0000*/                   FFMA R1, R1, R1, R1 ;                  /* 0x0000000101017223 */
        Function : _Z14l2_bulk_kernelPKhxxPff
        /*0000*/               @P0 LDG.E R4, desc[UR4][R2.64] ;          /* 0x000000040204098 */
        /*0010*/                   STL [R1], R4 ;                         /* 0x0000000401007387 */
"""


def test_sass_summary_counts_opcodes_of_the_matching_kernels_only():
    mod = _load("sass_summary")
    out = mod.summarize(SASS, ["mix_", "l2_bulk"])
    assert set(out) == {"_Z22mix_fp32_global_kernelILi4ELi4ELi8EEvPK5uint4xxffPff", "_Z14l2_bulk_kernelPKhxxPff"}
    mix = out["_Z22mix_fp32_global_kernelILi4ELi4ELi8EEvPK5uint4xxffPff"]
    assert mix == {"FFMA": 2, "LDC": 1, "LDG": 1, "BRA": 1}      # predicates and modifiers stripped
    assert out["_Z14l2_bulk_kernelPKhxxPff"] == {"LDG": 1, "STL": 1}


def test_size_sweep_sizes_double_from_min_to_max():
    mod = _load("size_sweep")
    assert [s / 2**20 for s in mod.sizes_bytes(1, 8)] == [1, 2, 4, 8]


def test_size_sweep_cell_names_the_set_that_ran_when_it_is_not_the_one_asked():
    mod = _load("size_sweep")
    assert mod._cell({"bytes_per_s": 8.79e12, "size_bytes": 2**20}, 2**20) == "8.79"
    assert mod._cell({"bytes_per_s": 8.79e12, "size_bytes": 16.5 * 2**20}, 2**20) == "8.79 (16.5 MiB)"


def test_summarize_counter_detail_handles_rows_without_ratios_and_splits_over_from_under():
    mod = _load("summarize")
    worst = [{"name": "a", "flops_ratio": None, "bytes_ratio": 1.2, "ok": False},
             {"name": "b", "flops_ratio": 1.08, "bytes_ratio": None, "ok": False},
             {"name": "c", "flops_ratio": None, "bytes_ratio": 0.5, "ok": False},
             {"name": "d", "flops_ratio": None, "bytes_ratio": None, "ok": False}]
    text = mod._counter_detail(worst)
    assert "2 see 1.08-1.20x" in text and "1 see less than declared" in text and ": c" in text
    assert "1 not profiled: d" in text


def test_summarize_form_choice_rows_print_a_dash_where_a_side_has_no_records():
    mod = _load("summarize")
    # validation.whole_model_jit_choice as the result files hold it: one choosing row, no test record
    side = {"dispatch_times_power_median_abs_err": 0.10, "in_model_power_median_abs_err": 0.04, "n": 1}
    none = {"dispatch_times_power_median_abs_err": None, "in_model_power_median_abs_err": None, "n": 0}
    rows = mod._form_choice_rows({"whole_model_jit_choice": {"choosing": side, "test": none, "chosen": "in_model"}})
    # choosing: 10.0% vs 4.0%; no test record: dashes (it raised a TypeError on None)
    assert rows[-1].endswith("10.0% vs 4.0% (n=1), on the test records - vs - (n=0).")


def test_summarize_cell_choice_rows_show_each_statistic_on_both_sides():
    mod = _load("summarize")
    side = {"whole_n": 3, "whole_time_median_abs_err": 0.111, "whole_power_median_abs_err": 0.05,
            "whole_energy_per_sample_median_abs_err": None, "layers_n": 9, "layers_power_median_abs_err": 0.095}
    rows = mod._cell_choice_rows({"chosen": "median", "in_use": "median", "rule": "r",
                                  "candidates": {"median": {"choosing": side, "test": side}}})
    assert rows[1] == "A calibration cell's efficiency: chosen median, in use median (r):"
    assert rows[-1] == ("| median | 11.1% (n=3) | 5.0% | - | 9.5% (n=9) | 11.1% (n=3) | 5.0% | - | 9.5% (n=9) |")
    assert mod._cell_choice_rows(None) == []


def test_summarize_prints_the_duty_busy_forms_and_the_layout_test():
    mod = _load("summarize")
    form = {"layers_n": 10, "power_median_abs_err": 0.113, "duty_lomo_measured_time_power_median_abs_err": 0.108,
            "duty_in_sample_measured_time_power_median_abs_err": 0.083, "models_power_median_abs_err": 0.0754,
            "models_n": 4}
    rows = mod._duty_busy_rows({"in_use": "capped", "headline": "uncapped", "candidates": {"capped": form}})
    assert rows[1] == "What the duty curve scales: this run's headline uncapped, in use capped (every record):"
    assert rows[-1] == "| capped | 11.3% (n=10) | 10.8% | 8.3% | 7.5% (n=4) |"
    test = {"test": "later records", "whole_models_channels_last": {"n": 2, "time_median_abs_err": 0.154, "rows": []},
            "layers_with_copies": {"windows": {"n": 3, "time_median_abs_err": 0.4, "time_median_signed_err": -0.25}},
            "paired_layouts": {"vgg16 float32 b32": {"measured_last_over_first": 1.369,
                                                     "calibrated_last_over_first": 1.147}}}
    rows = mod._layout_test_rows(test)
    assert rows[1] == ("The layout copies' test (later records, torch channels_last): whole-model time 15.4% (n=2); "
                       "layers with copies: windows 40.0% (signed -25.0%, n=3)")
    assert rows[-1] == "| vgg16 float32 b32 | 1.37 | 1.15 |"
    assert mod._duty_busy_rows(None) == [] and mod._layout_test_rows(None) == []
    # a test whose records the file does not hold: no dangling line
    empty = {"test": "later records", "whole_models_channels_last": {"n": 0, "time_median_abs_err": None, "rows": []},
             "layers_with_copies": {}, "paired_layouts": {}}
    assert mod._layout_test_rows(empty) == []


def test_xla_kernel_breakdown_splits_library_matmuls_from_xla_fusions_against_the_carm_bounds(tmp_path):
    mod = _load("xla_kernel_breakdown")
    csv_text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum"',
        '"","","usecond","byte","Kbyte"',
        '"0","sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32","2","1000","0.5"',
        '"1","loop_multiply_fusion","0.5","3000","1"',
        '"2","nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTN","1","200","0.1"',
        '"3","input_reduce_fusion_2","0.3","600","0"'])
    kernels = mod.parse_kernels(csv_text)
    assert not mod.is_matmul_kernel("loop_convert_fusion") and not mod.is_matmul_kernel("input_concatenate_fusion")
    assert mod.is_matmul_kernel("triton_gemm_dot_0") and mod.is_matmul_kernel("cudnn::detail::implicit_convolve_sgemm")
    assert mod.is_matmul_kernel("void gemv2T_kernel_val<int, int, float>") and mod.is_matmul_kernel("cublasLt::splitKreduce_kernel")
    assert [k["name"] for k in kernels][1] == "loop_multiply_fusion" and kernels[0]["time_s"] == pytest.approx(2e-6)
    doc = {"model": "m", "precision": "mixed_bfloat16", "batch_size": 8, "wall_s": 5e-6, "wall_calls": 3,
           "kernels": kernels, "carm": {"matmul_bound_s": 1.5e-6, "other_bound_s": 1e-6, "chained_saving_s": 0.6e-6,
                                        "other_bytes": 8000.0}}
    s = mod.summary(doc)
    # matmul: 2 us + 1 us over a 1.5 us bound; the rest: 0.8 us over 1 us (0.4 us once fused runs count once)
    assert (s["matmul_kernels"], s["other_kernels"]) == (2, 2)
    assert s["matmul_kernel_time_over_bound"] == pytest.approx(2.0)
    assert s["other_kernel_time_over_bound"] == pytest.approx(0.8)
    assert s["other_kernel_time_over_chained_bound"] == pytest.approx(2.0)
    assert s["other_kernel_dram_over_carm_bytes"] == pytest.approx(4600 / 8000)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, str(BENCH / "xla_kernel_breakdown.py"), "--summarize", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "| matmul class | 2 | 0.003 ms | 0.002 ms | 2.00 |" in proc.stdout
    # refused without the jax backend, one line, no traceback
    proc = subprocess.run([sys.executable, str(BENCH / "xla_kernel_breakdown.py")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert proc.returncode != 0 and "KERAS_BACKEND=jax" in proc.stderr and "Traceback" not in proc.stderr


def test_summarize_test_rows_print_the_four_figures_and_the_whole_models_by_group():
    mod = _load("summarize")
    targets = {"layer_power": 0.10, "layer_energy_given_time": 0.15, "model_power": 0.07,
               "model_energy_per_sample_calibrated_time": 0.15}
    group = {"n": 3, "power_median_abs_err": 0.08, "power_median_signed_err": -0.08,
             "energy_per_sample_median_abs_err": 0.886, "energy_per_sample_median_signed_err": 0.886,
             "time_median_abs_err": 1.008, "time_median_signed_err": 1.008}
    st = {"layers": {"n": 1056, "power_median_abs_err": 0.141, "energy_median_abs_err_given_time": 0.1406},
          "models": {"n": 3, "power_median_abs_err": 0.0703, "energy_per_sample_median_abs_err": 0.2004},
          "models_by_backend_model": {"torch vgg16": group}, "targets": targets}
    empty = {"layers": {"n": 0}, "models": {"n": 0}, "models_by_backend_model": {}, "targets": targets}
    rows = mod._test_set_rows({mod.TEST_SETS: {"first": st, "second": empty}})
    assert "Test on first alone:" in rows and not any("second" in r for r in rows)   # an empty test: no table
    assert "| per-layer power | 14.1% | 1056 | <= 10% |" in rows
    assert "| whole-model power | 7.0% | 3 | <= 7% |" in rows
    assert "| torch vgg16 | 3 | 8.0% (-8.0%) | 88.6% (+88.6%) | 100.8% (+100.8%) |" in rows


def test_summarize_compare_puts_the_carm_bound_time_beside_the_calibrated_one(tmp_path, monkeypatch):
    import gzip

    mod = _load("summarize")
    monkeypatch.setattr(mod, "RESULTS", tmp_path)
    models = {"n": 3, "power_median_abs_err": 0.05, "energy_per_sample_median_abs_err_calibrated_time": 0.1,
              "time_median_abs_err": 0.03}
    doc = {"validation": {"n": 200, "power_median_abs_err": 0.064, "energy_median_abs_err": 0.064,
                          "time_median_abs_err": 0.11, "models": {"headline": models}},
           # bound / measured - 1: -0.5, -0.9, +0.2, and a row without a bound left out -> median |err| 0.5
           "models": [{"carm_bound_time_s": 1.0, "measured_time_s": 2.0}, {"carm_bound_time_s": 1.0, "measured_time_s": 10.0},
                      {"carm_bound_time_s": 1.2, "measured_time_s": 1.0}, {"carm_bound_time_s": None, "measured_time_s": 1.0}]}
    (tmp_path / "x-power-model-a.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    (tmp_path / "x-power-model-0-old.json").write_text(json.dumps({"validation": {"n": 5, "models": [1, 2]}}))
    lines = mod.compare_table("x-power-model-*").splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| x-power-model-0-old.json | no whole-model headline in this file |")
    assert lines[3] == "| x-power-model-a.json.gz | 200 | 6.4% | 6.4% | 11.0% | 3 | 5.0% | 10.0% | 3.0% | 50.0% |"


def test_summarize_compare_reads_a_result_written_outside_the_results_folder_and_refuses_no_match(tmp_path):
    """A validation written under /tmp (before it is committed) is compared by its absolute path; a pattern that
    matches nothing is a one-line exit, not an empty table."""
    mod = _load("summarize")
    from carm_advisor.files import read_json

    committed = mod.RESULTS / "nvidia-h200-power-model-2026-12-07.json.xz"
    copy = tmp_path / "copy.json"
    copy.write_text(json.dumps(read_json(committed)))
    rows = mod.compare_table(str(copy)).splitlines()
    assert rows[2].startswith("| copy.json | 6897 | 11.3% |")
    with pytest.raises(mod.NoMatch, match="no result file matches nothing"):
        mod.compare_table("nothing*")


def test_summarize_record_set_labels_say_what_each_set_of_record_folders_holds():
    """A validation names a set of record folders by the key after their date; the label is the set's date, backends
    and batch sizes, from its layer runs and whole-model rows; a folder outside any set gets none."""
    mod = _load("summarize")
    doc = {"layers": {"runs_columns": ["file", "source", "backend", "batch_size"],
                      "runs": [["a.json", "nvidia-h200-records-2026-12-05-s9c1-torch", "torch", 48],
                               ["b.json", "nvidia-h200-records-2026-12-05-s9c1-torch", "torch", 24],
                               ["c.json", "nvidia-h200-records-2026-12-04-call3", "jax", 64],
                               ["d.json", "data", "torch", 64]]},
           "models": [{"source": "nvidia-h200-records-2026-12-05-s9c2-whole", "backend": "jax", "batch_size": 192},
                      {"source": "nvidia-h200-records-2026-12-03", "backend": "jax", "batch_size": 64}]}
    labels = mod.record_set_labels(doc)
    assert list(labels.values()) == ["the 2026-12-05 record set (jax and torch, batch 24, 48, 192)"]
    assert mod.record_set_labels({"layers": [], "models": []}) == {}   # an early file's layout: nothing to name


def test_summarize_power_table_of_the_validation_in_use_names_its_test_sets_by_what_they_hold():
    """The H200 validation of 2026-12-07: its test sets and choices are told by their records (the figures are those
    docs/measurements.md quotes for the torch batch-32 test of 2026-12-05), no folder key is printed."""
    import re

    mod = _load("summarize")
    from carm_advisor.files import read_json

    text = mod.power_table(read_json(mod.RESULTS / "nvidia-h200-power-model-2026-12-07.json.xz"))
    lines = text.splitlines()
    at = lines.index("Test on the 2026-12-05 record set (torch, batch 32) alone:")
    assert lines[at + 4] == "| per-layer power | 9.7% | 373 | <= 10% |"
    assert lines[at + 6] == "| whole-model power | 5.0% | 18 | <= 7% |"
    assert "Duty form choice (2026-12-04): chosen size_efficiency" in text
    assert not re.search(r"-s\d", text)


def test_summarize_power_table_reads_a_validation_without_targets():
    mod = _load("summarize")
    doc = {"validation": {"n": 20, "power_median_abs_err": 0.187, "energy_median_abs_err": 0.18,
                          "models": {"n": 3, "power_median_abs_err": 0.185}}}
    assert mod.power_table(doc).splitlines()[2:] == ["| per-layer power | 18.7% | 20 |",
                                                     "| per-layer energy, measured time | 18.0% | 20 |",
                                                     "| whole-model power | 18.5% | 3 |"]


def test_summarize_prints_the_readme_tables_by_default_and_refuses_a_bad_selection(capsys):
    """No option: the H200 ceilings run and the VGG16 layer runs of 2026-12-02 (the README's figures); a date with no
    file, a malformed date or a --cli glob matching no folder: one line on stderr, exit 2."""
    mod = _load("summarize")
    assert mod.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("| BF16 Tensor Core (wgmma, zero / random data) | 948 / 877 TFLOP/s (261 / 684 W) | cuBLAS 8192^3: 663 "
            "TFLOP/s (712 W) |") in out
    assert "| torch channels_first (repeat) | mixed_bfloat16 | 10.79 ms | 10.58 ms | 10.95 ms | 1.035 | 1.003 |" in out
    assert "| jax channels_last | mixed_bfloat16 | 4.20 ms | - | 7.85 ms | 1.871 | - |" in out
    for argv, said in ((["--date", "2026-12"], "--date expects YYYY-MM-DD"), (["--date", "1999-01-01"], "no result file"),
                       (["--cli", "no-such-folder*"], "no folder matches")):
        assert mod.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and err.count("\n") == 1


def test_summarize_cli_table_reads_the_cli_stage_folders(tmp_path, capsys):
    mod = _load("summarize")
    folder = tmp_path / "cli"
    folder.mkdir()
    (folder / "vgg16.json").write_text(json.dumps({
        "timings_s": {"keras_import": 1.04, "model_build": 2.0, "analysis": 3.26},
        "measurement": {"inference_graph": {"time_s": 0.010}}, "totals": {"sum_layer_time_s": 0.011}}))
    (folder / "vgg16.txt").write_text("... 12.5 s since\n start-up\n")
    (folder / "vgg16.time").write_text("vgg16 CLI wall 14.2 s\n")
    (folder / "call.json").write_text(json.dumps({"command": "not an analyze result"}))
    assert mod.main(["--cli", str(folder)]) == 0
    rows = capsys.readouterr().out.splitlines()
    # 0.011 s of layers over a 0.010 s graph replay: 1.100
    assert rows[2:] == ["| cli vgg16 | 1.0 s | 2.0 s | 3.3 s | 12.5 s | 14.2 s | 1.100 |"]


def test_xla_kernel_breakdown_counts_each_run_of_fused_layers_at_its_largest():
    from types import SimpleNamespace

    mod = _load("xla_kernel_breakdown")
    rows = [SimpleNamespace(type=t, predicted_time_s=s * 1e-3, known=k) for t, s, k in (
        ("Conv2D", 0.3, True), ("BatchNormalization", 0.1, True), ("ReLU", 0.08, True),   # run: 0.18, keeps 0.1
        ("MaxPooling2D", 0.2, True),                                                      # ends the run
        ("BatchNormalization", 0.05, True), ("Add", 0.12, True), ("ReLU", 0.07, True),   # run: 0.24, keeps 0.12
        ("Dense", 0.4, True), ("Dropout", 0.02, True),                                    # a run of one: saves 0
        ("Mystery", 1.0, False), ("ReLU", 0.03, True))]                                  # unknown: skipped
    # saved: (0.18 - 0.1) + (0.24 - 0.12) + (0.05 - 0.03: Dropout and the last ReLU, the unknown layer between)
    assert mod.chained_bound_s(rows) == pytest.approx((0.08 + 0.12 + 0.02) * 1e-3)


def test_the_hf_reference_flag_names_the_best_measured_configuration(tmp_path, capsys):
    """gpu_call.sh holds its transformer study against the best samples per joule its hf stage measured."""
    mod = _load("hf_reference")
    rows = [{"model": "bert-base", "dtype": "bfloat16", "compiler": "eager", "batch_size": 256,
             "samples_per_joule": 25.7},
            {"model": "bert-base", "dtype": "bfloat16", "compiler": "torch.compile", "batch_size": 64,
             "samples_per_joule": 17.2},
            {"model": "bert-base", "dtype": "bfloat16", "compiler": "eager", "batch_size": 1024,
             "error": "OutOfMemory"}]
    (tmp_path / "a.json").write_text(json.dumps({"rows": rows}))
    assert mod.reference_flag(str(tmp_path)) == "--reference hf-bert-base-bfloat16-eager-b256=25.7"
    assert mod.main(["--reference-flag", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == "--reference hf-bert-base-bfloat16-eager-b256=25.7"
    assert mod.reference_flag(str(tmp_path / "none")) == ""          # no hf stage ran: no reference


def test_the_device_call_script_parses():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_call.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0
