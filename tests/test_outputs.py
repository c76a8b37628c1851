"""Output files: written whole or not at all, and only once the whole run has succeeded."""

import json

import keras
import pytest

import carm_advisor as advisor
from carm_advisor.errors import CarmError
from carm_advisor.report.files import Outputs, write_text_atomic
from test_cli import run_cli


@pytest.fixture
def small_model_file(tmp_path):
    inputs = keras.Input(shape=(16,))
    model = keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs), name="tiny")
    path = tmp_path / "tiny.keras"
    model.save(path)
    return path


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
