"""Review defects of the CLI: unwritable outputs refused before any work, file modes, the width of
piped output, the `carm-advise MODEL ...` shorthand, and unknown custom classes in .keras files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import keras
import pytest

from carm_advisor.cli import main, tune_shorthand
from test_cli import assert_one_line_error, run_cli


@pytest.fixture
def tiny_model_file(tmp_path):
    inputs = keras.Input(shape=(16,))
    path = tmp_path / "tiny.keras"
    keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs), name="tiny").save(path)
    return path


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the CLI starts loading Keras, i.e. gets past its up-front checks."""
    def refuse(*a, **k):
        raise AssertionError("the CLI started work before refusing an output path")

    monkeypatch.setattr("carm_advisor.cli._import_keras", refuse)


# ---- 1. modes ------------------------------------------------------------------------------------------

def test_analyze_outputs_get_the_mode_open_would_give(capsys, tmp_path, tiny_model_file):
    saved = os.umask(0o022)
    try:
        code, _, err = run_cli(capsys, "analyze", str(tiny_model_file), "--json", str(tmp_path / "r.json"),
                               "--plot", str(tmp_path / "r.png"), "--plot-energy", str(tmp_path / "e.png"))
    finally:
        os.umask(saved)
    assert code == 0, err
    for name in ("r.json", "r.png", "e.png"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name   # 0o666 & ~0o022


# ---- 2. unwritable outputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, flag, path", [
    (["analyze", "vgg16", "--plot-energy", "/proc/e.png"], "--plot-energy", "/proc/e.png"),
    (["analyze", "vgg16", "--json", "/proc/r.json"], "--json", "/proc/r.json"),
    (["analyze", "vgg16", "--plot", "/proc/c.png"], "--plot", "/proc/c.png"),
    (["ceilings", "--show", "--json", "/proc/p.json"], "--json", "/proc/p.json"),
    (["ceilings", "--plot", "/proc/p.png"], "--plot", "/proc/p.png"),
    (["tune", "vgg16", "--json", "/proc/t.json"], "--json", "/proc/t.json"),
    (["tune", "vgg16", "--plot", "/proc/no-such-dir"], "--plot", "/proc/no-such-dir"),
])
def test_an_unwritable_output_is_refused_before_any_work(capsys, no_work, argv, flag, path):
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, f"cannot write {flag} {path}: ")
    assert ".tmp" not in err and out == ""


def test_a_write_that_fails_late_names_the_users_path(capsys, tmp_path, tiny_model_file, monkeypatch):
    def disk_full(report, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("carm_advisor.report.plot_energy.plot_energy", disk_full)
    target = tmp_path / "e.png"
    code, _, err = run_cli(capsys, "analyze", str(tiny_model_file), "--plot-energy", str(target))
    assert_one_line_error(code, err, f"cannot write --plot-energy {target}: No space left on device")
    assert ".tmp" not in err


# ---- 3. output that is not a terminal --------------------------------------------------------------------

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


# ---- 4. the tune shorthand -----------------------------------------------------------------------------

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


# ---- 5. unknown custom classes ---------------------------------------------------------------------------

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
