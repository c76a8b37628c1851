"""The tune CLI: the `carm-advise MODEL ...` shorthand, and bad input as one line with exit code 2."""

from __future__ import annotations

import pytest

from carm_advisor.cli import main, tune_shorthand


def test_model_first_is_shorthand_for_tune():
    assert tune_shorthand(["vgg16", "--objective", "gflops_per_watt"]) == ["tune", "vgg16", "--objective", "gflops_per_watt"]
    assert tune_shorthand(["vgg16", "--pareto"])[0] == "tune"
    assert tune_shorthand(["analyze", "vgg16", "--batch-size", "8"]) == ["analyze", "vgg16", "--batch-size", "8"]
    assert tune_shorthand(["vgg16"]) == ["tune", "vgg16"]   # the README's default objective needs no flag
    assert tune_shorthand(["vgg16", "--trials", "1"]) == ["tune", "vgg16", "--trials", "1"]
    assert tune_shorthand(["analyse", "vgg16"]) == ["analyse", "vgg16"]   # a near miss: argparse names the choices
    assert tune_shorthand(["--help"]) == ["--help"] and tune_shorthand([]) == []


@pytest.mark.parametrize("argv, message", [
    (["vgg16", "--objective", "joules"], "invalid choice: 'joules'"),
    (["tune", "vgg16", "--trials", "0"], "expected a positive integer"),
    (["tune", "vgg16", "--backends", "cuda"], "expected backends from"),
    (["tune", "vgg16", "--batch-sizes", "32,x"], "expected integers"),
    (["tune", "vgg16", "--max-output-error", "-1"], "expected a positive number"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_storage_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["vgg16", "--objective", "throughput", "--predict", "--storage", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert "Expected a storage URL" in err and err.count("\n") == 1


def test_apply_clocks_is_refused_in_one_line_without_permission(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CARM_ADVISOR_NO_CLOCK_CONTROL", "1")
    code = main(["tune", "vgg16", "--objective", "edp", "--apply-clocks", "--storage", str(tmp_path / "c.db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    # Without a GPU the refusal names that; with one (and the kill switch set) it names the switch.
    assert "--apply-clocks" in err


def test_training_mode_cannot_be_predicted(capsys, tmp_path):
    code = main(["tune", "vgg16", "--objective", "throughput", "--mode", "training", "--predict",
                 "--storage", str(tmp_path / "t.db")])
    assert code == 2 and "covers inference only" in capsys.readouterr().err


def test_unknown_model_is_one_line(capsys, tmp_path):
    code = main(["tune", "vgg17", "--objective", "throughput", "--predict", "--storage", str(tmp_path / "u.db")])
    err = capsys.readouterr().err
    assert code == 2 and "neither a model file nor a keras.applications model" in err


def test_a_model_file_with_nothing_to_cost_is_one_line(capsys, tmp_path):
    import keras

    inputs = keras.Input((8,))
    path = tmp_path / "onlydropout.keras"
    keras.Model(inputs, keras.layers.Dropout(0.5, name="drop")(inputs), name="onlydropout").save(path)
    code = main(["tune", str(path), "--predict", "--trials", "2", "--storage", str(tmp_path / "d.db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "nothing to tune in onlydropout: no layer of the model does work the CARM can cost (drop (Dropout)" in err
    assert "Expected at least one finite objective value" not in err and "Traceback" not in err
