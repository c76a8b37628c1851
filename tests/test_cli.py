import json
import os
import subprocess
import sys
import time
import zipfile

import keras
import pytest
from _cli import assert_one_line_error, run_cli

from carm_advisor.cli import main, tune_shorthand

VGG16_TF_PROFILER_FLOPS = 30_960_211_824   # TensorFlow profiler, VGG16 at 224x224, per sample






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
    (["analyze", "vgg16", "--layout", "channels_first", "--input-shape", "224,224,3"],
     "--input-shape is C,H,W (channels first) in the channels_first layout; 224,224,3 has 224 channels: did you mean "
     "3,224,224?"),
    (["analyze", "vgg16", "--input-shape", "3,160,160"], "has 160 channels: did you mean 160,160,3?"),
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


@pytest.mark.parametrize("gpu_name, shown", [("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
                                              ("NVIDIA A100-SXM4-80GB", "NVIDIA H200")])
def test_ceilings_show_on_a_gpu_without_a_measured_profile_shows_its_models_shipped_one(monkeypatch, tmp_path,
                                                                                           gpu_name, shown):
    """On an H100 with nothing measured, --show is the H100's shipped profile, not the H200's; a GPU model none
    ships for (an A100) sees the recorded default."""
    from carm_advisor.cli import ceilings
    from carm_advisor.power.fake import FakeGPU

    monkeypatch.setattr("carm_advisor.power.nvml.open_gpu", lambda index=0, **kw: FakeGPU(name=gpu_name))
    assert ceilings.profile_for_show().name.startswith(shown)


def test_an_error_from_a_fresh_process_is_exactly_one_line_on_stderr():
    """TensorFlow's native start-up lines must not reach the terminal around our one-line error."""
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", "analyze", "vgg17"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "carm-advise: error: 'vgg17' is neither a model file nor a keras.applications model nor a keras_hub preset; "
        "did you mean vgg16, vgg19?"
    ]


def test_unknown_chart_format_is_refused_before_the_analysis(capsys, tmp_path):
    code, out, err = run_cli(capsys, "analyze", "vgg16", "--plot", str(tmp_path / "chart.xyz"))
    assert_one_line_error(code, err, "cannot write a chart")
    assert "Layers on the CARM" not in out


def test_an_input_shape_that_does_not_agree_with_a_model_files_input_is_refused(capsys, tmp_path):
    x = keras.Input((8,))
    keras.Model(x, keras.layers.Dense(2)(x)).save(tmp_path / "m.keras")
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "m.keras"), "--no-measure", "--input-shape", "9")
    assert_one_line_error(code, err, "--input-shape 9 does not agree with input")
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "m.keras"), "--no-measure", "--input-shape", "8")
    assert code == 0, err


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


# ---- output that is not a terminal -----------------------------------------------------------------------

def _piped(*argv, columns=None):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    if columns:
        env["COLUMNS"] = columns
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", *argv], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_piped_analyze_keeps_every_column_and_whole_layer_names():
    out = _piped("analyze", "vgg16")
    header = next(line for line in out.splitlines() if "layer" in line and "share" in line)
    for column in ("FLOPs", "AI F/B", "bound time", "calibrated", "cal. power", "roof power"):
        assert column in header, header
    rows = [line for line in out.splitlines() if line.startswith("│block")]
    # VGG16's 18 conv and pool layers, each name on one line
    assert sorted(line.split("│")[1].strip() for line in rows) == sorted(
        [f"block{b}_conv{c}" for b, n in ((1, 2), (2, 2), (3, 3), (4, 3), (5, 3)) for c in range(1, n + 1)]
        + [f"block{b}_pool" for b in range(1, 6)])


def test_piped_ceilings_show_cuts_no_label():
    out = _piped("ceilings", "--show")
    assert "…" not in out
    assert "measured" in out


def test_columns_set_by_the_user_still_wins_when_piped():
    out = _piped("ceilings", "--show", columns="70")
    assert max(len(line) for line in out.splitlines()) <= 70


# ---- the tune shorthand --------------------------------------------------------------------------------

def test_a_model_first_means_tune_whatever_the_options():
    assert tune_shorthand(["vgg16", "--trials", "1"]) == ["tune", "vgg16", "--trials", "1"]
    assert tune_shorthand(["vgg16"]) == ["tune", "vgg16"]
    assert tune_shorthand(["my.keras", "--predict"]) == ["tune", "my.keras", "--predict"]
    assert tune_shorthand(["pkg.mod:build"]) == ["tune", "pkg.mod:build"]
    for argv in ([], ["--help"], ["-h"], ["analyze", "vgg16"], ["tune", "vgg16"], ["ceilings", "--show"],
                 ["build-kernels"], ["worker", "--storage", "x", "--study", "y"]):
        assert tune_shorthand(argv) == argv


def test_a_near_miss_of_a_subcommand_is_still_named_as_an_invalid_choice(capsys):
    code, _, err = run_cli(capsys, "analyse", "vgg16")
    assert_one_line_error(code, err, "invalid choice: 'analyse'")


def test_model_then_tune_options_runs_a_predicted_study(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "vgg16", "--trials", "1", "--predict", "--storage", str(tmp_path / "s.db"))
    assert code == 0, err
    assert "carm_advisor tune" in out


def test_a_word_that_is_neither_subcommand_nor_model_is_one_line_and_stores_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "frobnicate")
    assert_one_line_error(code, err, "'frobnicate' is neither a subcommand")
    assert list(tmp_path.iterdir()) == []


def test_help_and_no_arguments_are_as_before(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "{analyze,ceilings,tune,worker,build-kernels}" in capsys.readouterr().out
    assert main([]) == 2
    assert "usage: carm-advise" in capsys.readouterr().out


# ---- unknown custom classes ------------------------------------------------------------------------------

def _save_with_custom_layers(path, *layer_classes):
    inputs = keras.Input(shape=(8,))
    x = inputs
    for cls in layer_classes:
        x = cls()(x)
    keras.Model(inputs, x).save(path)


def test_an_unregistered_custom_layer_is_named_with_how_to_register_it(capsys, tmp_path):
    class Doubler(keras.layers.Layer):   # never registered
        def call(self, x):
            return x * 2.0

    class Shifter(keras.layers.Layer):
        def call(self, x):
            return x + 1.0

    path = tmp_path / "custom.keras"
    _save_with_custom_layers(path, Doubler, Shifter)
    code, _, err = run_cli(capsys, "analyze", str(path))
    assert_one_line_error(code, err, "unknown custom class Doubler")
    assert "Shifter" in err   # Keras stops at the first; config.json names the second
    assert "custom_objects" in err and "keras.saving.register_keras_serializable" in err


def test_a_class_saved_under_a_package_name_says_that_name(capsys, tmp_path):
    @keras.saving.register_keras_serializable(package="review_pkg")
    class Tripler(keras.layers.Layer):
        def call(self, x):
            return x * 3.0

    path = tmp_path / "pkg.keras"
    _save_with_custom_layers(path, Tripler)
    keras.saving.get_custom_objects().pop("review_pkg>Tripler")   # as in a process that never imported it
    code, _, err = run_cli(capsys, "analyze", str(path))
    assert_one_line_error(code, err, "unknown custom class Tripler")
    assert "'review_pkg>Tripler'" in err and "package='review_pkg'" in err


def test_layout_with_a_model_file_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "m.keras"), "--layout", "channels_first")
    assert_one_line_error(code, err, "--layout applies to keras.applications models")
    assert "fixed by its weights and input shape" in err


def _save_mixed_with_float32_output(path):
    """Saved under mixed_bfloat16, its output layer pinned to float32: two of three layers hold mixed_bfloat16."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inputs = keras.Input(shape=(64,))
        x = keras.layers.Dense(64, name="h1")(inputs)
        x = keras.layers.Dense(64, name="h2")(x)
        keras.Model(inputs, keras.layers.Dense(16, dtype="float32", name="out")(x), name="mixed").save(path)
    finally:
        keras.config.set_dtype_policy(previous)


def test_a_mixed_model_file_is_labelled_with_its_own_policy(capsys, tmp_path):
    _save_mixed_with_float32_output(tmp_path / "mixed.keras")
    code, out, err = run_cli(capsys, "analyze", str(tmp_path / "mixed.keras"), "--no-measure",
                             "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["model"]["precision"] == "mixed_bfloat16" and "precision mixed_bfloat16" in out
    assert not any("mixed_bfloat16" in r["title"] for r in d["recommendations"])


def test_precision_on_a_model_file_keeps_the_layers_pinned_to_another_policy(capsys, tmp_path):
    _save_mixed_with_float32_output(tmp_path / "mixed.keras")
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "mixed.keras"), "--precision", "mixed_float16",
                           "--no-measure", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    assert {r["name"]: r["dtype"] for r in d["layers"]} == {"h1": "float16", "h2": "float16", "out": "float32"}
    assert d["model"]["precision"] == "mixed_float16"


def test_precision_on_a_file_whose_policies_cannot_be_replaced_says_its_layers_are_analysed_at_it(capsys, tmp_path):
    inputs = keras.Input(shape=(64,))
    x = keras.layers.Dense(64, dtype="bfloat16", name="h")(inputs)
    keras.Model(inputs, keras.layers.Dense(16, dtype="bfloat16", name="out")(x)).save(tmp_path / "bf16.keras")
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "bf16.keras"), "--precision", "float32", "--no-measure",
                           "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    assert [r["dtype"] for r in d["layers"]] == ["float32", "float32"] and d["model"]["precision"] == "float32"
    assert any("cannot be replaced by a rebuild" in w for w in d["warnings"])


BUILDER_MODULE = '''
import keras
import numpy as np


class ImageAndTokens(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.proj = keras.layers.Dense(5, name="proj")
        self.embed = keras.layers.Embedding(50, 5, name="embed")
        self.head = keras.layers.Dense(2, name="head")

    def call(self, image, tokens):
        return self.head(self.proj(keras.ops.mean(image, axis=(1, 2))) + keras.ops.sum(self.embed(tokens), axis=1))


def build():
    model = ImageAndTokens()
    model(np.zeros((1, 4, 4, 3), "float32"), np.zeros((1, 7), "int32"))
    return model


class WithTimestep(keras.Model):
    """call(image, t): one timestep per sample, shape (batch,), as a diffusion model takes it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = keras.layers.Dense(2, name="head")

    def call(self, image, t):
        return self.head(keras.ops.mean(image, axis=(1, 2)) + keras.ops.expand_dims(t, -1))


def with_timestep():
    model = WithTimestep()
    model(np.zeros((1, 4, 4, 3), "float32"), np.zeros((1,), "float32"))
    return model
'''


@pytest.fixture
def builder_here(tmp_path, monkeypatch):
    """A 'module:function' builder in the current directory, which a console script does not put on sys.path."""
    (tmp_path / "carm_cli_builder_mod.py").write_text(BUILDER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "carm_cli_builder_mod", raising=False)
    yield "carm_cli_builder_mod:build"
    sys.modules.pop("carm_cli_builder_mod", None)


@pytest.mark.parametrize("shapes", [["4,4,3", "7:int16"], ["image=4,4,3", "tokens=7:int16"],
                                    ["tokens=7:int16", "image=4,4,3"]])
def test_analyze_takes_a_builder_and_the_call_shapes_of_a_subclassed_model(capsys, tmp_path, builder_here, shapes):
    argv = ["analyze", builder_here, "--batch-size", "4", "--no-measure", "--json", str(tmp_path / "r.json")]
    code, _, err = run_cli(capsys, *argv, *[a for s in shapes for a in ("--call-shape", s)])
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    rows = {r["name"]: r for r in d["layers"]}
    assert {"proj", "embed", "head"} <= set(rows)
    assert not [w for w in d["warnings"] if "lower bound" in w]   # traced whole: no lower bound
    assert rows["proj"]["flops"] == 4 * 5 * (2 * 3 + 1)    # batch 4 x 5 outputs x (3 multiply-adds + bias)
    assert rows["head"]["flops"] == 4 * 2 * (2 * 5 + 1)
    # int16 ids (4 x 7 x 2 B) read, and the 28 gathered rows of 5 float32 read and written (2 x 560 B)
    assert rows["embed"]["bytes"] == 4 * 7 * 2 + 2 * (4 * 7 * 5 * 4)


def test_a_builder_without_call_shapes_is_a_lower_bound_that_says_which_flag_to_pass(capsys, tmp_path, builder_here):
    code, _, err = run_cli(capsys, "analyze", builder_here, "--no-measure", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    assert any("lower bound" in w and "--input-shape for each" in w and "(image, tokens)" in w for w in warnings)


@pytest.mark.parametrize("shapes, fragment", [
    (["image=4,4,3", "7"], "name every input"),
    (["image=4,4,3", "image=4,4,3"], "an input given twice: image, image"),
    (["4,4,3", "7:int99"], "expected a dtype after ':'"),
    (["4,4,3", "7,x"], "expected an input shape without the batch"),
    (["4,0,3"], "positive dimensions"),
    (["a b=4"], "NAME=DIMS"),
    (["colour=4,4,3"], "among the tensor arguments of ImageAndTokens.call() (image, tokens), received: colour"),
    (["4,4,3", "7", "1"], "at most 2 input shape(s)"),
])
def test_bad_call_shapes_are_one_line_errors(capsys, builder_here, shapes, fragment):
    code, _, err = run_cli(capsys, "analyze", builder_here, "--no-measure",
                           *[a for s in shapes for a in ("--call-shape", s)])
    assert_one_line_error(code, err, fragment)


def test_one_input_shape_is_an_applications_image_size_and_a_subclassed_calls_first_argument(capsys, tmp_path,
                                                                                           builder_here):
    code, _, err = run_cli(capsys, "analyze", "mobilenetv3small", "--no-measure", "--json", str(tmp_path / "r.json"),
                           "--call-shape", "96,96,3")   # --input-shape's former name, still read
    assert code == 0, err
    first = json.loads((tmp_path / "r.json").read_text())["layers"][0]
    assert first["name"] == "rescaling" and first["input_bytes"] == 96 * 96 * 3 * 4   # one 96x96 RGB float32 image
    code, _, err = run_cli(capsys, "analyze", builder_here, "--no-measure", "--input-shape", "4,4,3")
    assert_one_line_error(code, err, "missing 1 required positional argument: 'tokens'")
    code, _, err = run_cli(capsys, "analyze", "carm_cli_builder_mod:missing")
    assert_one_line_error(code, err, "has no attribute 'missing'")


@pytest.mark.parametrize("flag", ["t=", "t=:float32"])
def test_a_call_shape_without_dimensions_is_one_value_per_sample(capsys, tmp_path, builder_here, flag):
    """t of shape (batch,): expand_dims makes it (batch, 1), added to the (batch, 3) image mean; a shape (batch, 1)
    would broadcast to (batch, batch, 3) instead."""
    code, _, err = run_cli(capsys, "analyze", "carm_cli_builder_mod:with_timestep", "--batch-size", "4",
                           "--no-measure", "--json", str(tmp_path / "r.json"), "--call-shape", "image=4,4,3",
                           "--call-shape", flag)
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["layers"]}
    assert rows["head"]["flops"] == 4 * 2 * (2 * 3 + 1)
