import json
import os
import subprocess
import sys
import time
import zipfile

import keras
import pytest

from carm_advisor.cli import main

VGG16_TF_PROFILER_FLOPS = 30_960_211_824   # TensorFlow profiler, VGG16 at 224x224, per sample


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own exits
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, fragment):
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("carm-advise: error:")
    assert fragment in lines[0]
    assert "Traceback" not in err


def test_vgg16_end_to_end_on_the_recorded_profile(tmp_path):
    """The README's main job: a fresh process, JSON and plot, on a CPU-only machine."""
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "carm_advisor.cli", "analyze", "vgg16", "--json", str(out_json), "--plot", str(out_png)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"}, timeout=300,
    )
    wall_s = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    d = json.loads(out_json.read_text())
    assert d["device"]["source"] == "profile"
    assert d["totals"]["flops_per_sample"] == pytest.approx(VGG16_TF_PROFILER_FLOPS, rel=0.01)
    assert out_png.read_bytes()[:4] == b"\x89PNG"
    assert "PREDICTED" in proc.stdout
    assert wall_s < 60, f"analyze vgg16 took {wall_s:.1f} s"   # target 20 s on a developer machine


def test_unknown_model_name(capsys):
    code, _, err = run_cli(capsys, "analyze", "vgg17")
    assert_one_line_error(code, err, "vgg17")


def test_missing_model_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "missing.keras"))
    assert_one_line_error(code, err, "not found")


def test_corrupt_model_file(capsys, tmp_path):
    path = tmp_path / "corrupt.keras"
    path.write_bytes(b"\x00garbage" * 10)
    code, _, err = run_cli(capsys, "analyze", str(path))
    assert_one_line_error(code, err, "not a valid .keras file")


def test_zip_that_is_not_a_model(capsys, tmp_path):
    path = tmp_path / "notamodel.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("hello.txt", "not a model")
    code, _, err = run_cli(capsys, "analyze", str(path))
    assert_one_line_error(code, err, "could not load")


def test_saved_keras_model_is_analysed(capsys, tmp_path):
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(16, 3, name="conv")(inputs)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="gap")(x))
    path = tmp_path / "small.keras"
    model.save(path)
    code, out, err = run_cli(capsys, "analyze", str(path), "--batch-size", "4", "--json", str(tmp_path / "s.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "s.json").read_text())
    conv = d["layers"][0]
    assert conv["name"] == "conv"
    # 4 x 30x30x16 outputs, each 3x3x3 multiply-adds (2 FLOPs) + 1 bias add
    assert conv["flops"] == 4 * 30 * 30 * 16 * (2 * 27 + 1)
    # Where the CLI's time went, per phase, in the JSON and on the last line printed.
    assert set(d["timings_s"]) == {"keras_import", "model_build", "analysis"}
    assert all(v >= 0 for v in d["timings_s"].values())
    assert "took keras import" in out and "since start-up" in out


@pytest.mark.parametrize("argv, fragment", [
    (["analyze", "vgg16", "--batch-size", "0"], "positive integer"),
    (["analyze", "vgg16", "--batch-size", "many"], "positive integer"),
    (["analyze", "vgg16", "--precision", "float13"], "invalid choice"),
    (["analyze", "vgg16", "--input-shape", "a,b"], "input shape"),
    (["analyze"], "model"),
    (["frobnicate"], "'frobnicate' is neither a subcommand"),   # a first word that is no subcommand is a model for tune
    (["analyse", "vgg16"], "invalid choice: 'analyse'"),             # ... unless it is a near miss of one
])
def test_bad_options(capsys, argv, fragment):
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, fragment)


def test_malformed_profile(capsys, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": "carm-advisor/profile/1", "device": {}}))
    code, _, err = run_cli(capsys, "analyze", "vgg16", "--profile", str(path))
    assert_one_line_error(code, err, "ceilings")


def test_output_directory_must_exist(capsys, tmp_path):
    code, _, err = run_cli(capsys, "analyze", "vgg16", "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert_one_line_error(code, err, "does not exist")


def test_output_path_that_is_a_directory_is_refused_before_the_analysis(capsys, tmp_path):
    code, out, err = run_cli(capsys, "analyze", "vgg16", "--json", str(tmp_path))
    assert_one_line_error(code, err, "directory")
    assert "Layers on the CARM" not in out


def test_ceilings_without_a_gpu_is_a_one_line_error(capsys):
    code, _, err = run_cli(capsys, "ceilings", "--quick")
    assert_one_line_error(code, err, "no NVIDIA GPU")


def test_ceilings_show_prints_the_recorded_profile(capsys, tmp_path):
    code, out, err = run_cli(capsys, "ceilings", "--show", "--json", str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.png"))
    assert code == 0, err
    assert "tc_bf16" in out and "recorded profile" in out
    assert json.loads((tmp_path / "p.json").read_text())["schema"] == "carm-advisor/profile/1"
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_an_error_from_a_fresh_process_is_exactly_one_line_on_stderr():
    """TensorFlow's native start-up lines must not reach the terminal around our one-line error."""
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", "analyze", "vgg17"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "carm-advise: error: 'vgg17' is neither a model file nor a keras.applications model; did you mean vgg16, vgg19?"
    ]


def test_unknown_chart_format_is_refused_before_the_analysis(capsys, tmp_path):
    code, out, err = run_cli(capsys, "analyze", "vgg16", "--plot", str(tmp_path / "chart.xyz"))
    assert_one_line_error(code, err, "cannot write a chart")
    assert "Layers on the CARM" not in out


def test_input_shape_with_a_model_file_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "m.keras"), "--input-shape", "32,32,3")
    assert_one_line_error(code, err, "input-shape")


def test_ceilings_exclude_takes_comma_separated_names_with_or_without_spaces():
    from carm_advisor.cli import build_parser

    args = build_parser().parse_args(["ceilings", "--exclude", "l2_read_bulk, hbm_read_bulk,"])
    assert args.exclude == ("l2_read_bulk", "hbm_read_bulk")
    assert build_parser().parse_args(["ceilings"]).exclude == ()


def test_ceilings_binding_is_ctypes_or_tensorflow_and_defaults_to_the_backend_rule(capsys):
    from carm_advisor.cli import build_parser

    assert build_parser().parse_args(["ceilings", "--binding", "tensorflow"]).binding == "tensorflow"
    assert build_parser().parse_args(["ceilings"]).binding is None   # measure/binding.default_binding decides
    code, _, err = run_cli(capsys, "ceilings", "--binding", "cuda")
    assert_one_line_error(code, err, "binding")
