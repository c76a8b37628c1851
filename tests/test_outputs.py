"""Output files: written whole or not at all, and only once the whole run has succeeded; created with the
mode a plain open() would give, and an unwritable output refused before any work."""

import json
import os
import stat

import keras
import pytest
from _cli import assert_one_line_error, run_cli

import carm_advisor as advisor
from carm_advisor.errors import CarmError
from carm_advisor.files import Outputs, write_text_atomic


@pytest.fixture
def small_model_file(tmp_path):
    inputs = keras.Input(shape=(16,))
    model = keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs), name="tiny")
    path = tmp_path / "tiny.keras"
    model.save(path)
    return path


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the CLI starts loading Keras, i.e. gets past its up-front checks."""
    def refuse(*a, **k):
        raise AssertionError("the CLI started work before refusing an output path")

    for subcommand in ("analyze", "tune"):
        monkeypatch.setattr(f"carm_advisor.cli.{subcommand}.import_keras_quietly", refuse)


def test_a_failing_chart_leaves_the_existing_json_as_it_was(capsys, tmp_path, small_model_file):
    existing = tmp_path / "existing.json"
    existing.write_text("old report\n")
    code, _, err = run_cli(capsys, "analyze", str(small_model_file), "--json", str(existing),
                           "--plot", "/proc/x.png")   # /proc is a folder where no file can be created
    assert code == 2, err
    assert existing.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json", "tiny.keras"]   # no temporary left


def test_ctrl_c_while_drawing_the_chart_leaves_both_old_files(capsys, tmp_path, small_model_file, monkeypatch):
    old_json, old_png = tmp_path / "r.json", tmp_path / "r.png"
    old_json.write_text("old json\n")
    old_png.write_bytes(b"old png")

    def interrupted(report, path):
        path.write_bytes(b"half a chart")
        raise KeyboardInterrupt

    monkeypatch.setattr("carm_advisor.report.plot.plot_report", interrupted)
    code, _, _ = run_cli(capsys, "analyze", str(small_model_file), "--json", str(old_json), "--plot", str(old_png))
    assert code == 130
    assert old_json.read_text() == "old json\n" and old_png.read_bytes() == b"old png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.png", "tiny.keras"]


def test_a_successful_run_replaces_both_files(capsys, tmp_path, small_model_file):
    old_json, old_png = tmp_path / "r.json", tmp_path / "r.png"
    old_json.write_text("old json\n")
    old_png.write_bytes(b"old png")
    code, _, err = run_cli(capsys, "analyze", str(small_model_file), "--json", str(old_json), "--plot", str(old_png))
    assert code == 0, err
    assert json.loads(old_json.read_text())["model"]["name"] == "tiny"
    assert old_png.read_bytes()[:4] == b"\x89PNG"


def test_one_path_for_two_outputs_is_refused_before_the_analysis(capsys, tmp_path, small_model_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "analyze", str(small_model_file), "--json", "a.png", "--plot", "./a.png")
    assert code == 2
    assert err.count("\n") == 1 and "both be written to" in err
    assert "Layers on the CARM" not in out
    assert not (tmp_path / "a.png").exists()


def test_outputs_discards_staged_files_without_commit(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("keep")
    with Outputs() as outs:
        outs.stage(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_write_text_atomic_leaves_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")


    with pytest.raises(TypeError):
        write_text_atomic(target, object())   # not text: write_text raises before anything is renamed
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_report_plot_to_a_directory_is_a_clear_error(tmp_path):
    inputs = keras.Input(shape=(16,))
    report = advisor.analyze(keras.Model(inputs, keras.layers.Dense(8)(inputs)), measure=False)
    with pytest.raises(CarmError, match="directory"):
        report.plot(tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CarmError, match="directory"):
        report.to_json(tmp_path)


# ---- file modes ----------------------------------------------------------------------------------------

def test_analyze_outputs_get_the_mode_open_would_give(capsys, tmp_path, small_model_file):
    saved = os.umask(0o022)
    try:
        code, _, err = run_cli(capsys, "analyze", str(small_model_file), "--json", str(tmp_path / "r.json"),
                               "--plot", str(tmp_path / "r.png"), "--plot-energy", str(tmp_path / "e.png"))
    finally:
        os.umask(saved)
    assert code == 0, err
    for name in ("r.json", "r.png", "e.png"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name   # 0o666 & ~0o022


# ---- unwritable outputs ----------------------------------------------------------------------------------

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


def test_a_write_that_fails_late_names_the_users_path(capsys, tmp_path, small_model_file, monkeypatch):
    def disk_full(report, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("carm_advisor.report.plot_energy.plot_energy", disk_full)
    target = tmp_path / "e.png"
    code, _, err = run_cli(capsys, "analyze", str(small_model_file), "--plot-energy", str(target))
    assert_one_line_error(code, err, f"cannot write --plot-energy {target}: No space left on device")
    assert ".tmp" not in err
