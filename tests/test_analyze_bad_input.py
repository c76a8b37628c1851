"""Bad input to `carm-advise analyze`: one clear line on stderr naming what was wrong and what was expected, exit 2,
no report of impossible figures; the Python API warns before its figures instead."""

from __future__ import annotations

import io
import json
import shutil
from importlib import resources
from pathlib import Path

import keras
import pytest
from _cli import assert_one_line_error, run_cli
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.report.render import print_report

DATA = Path(__file__).parent / "data"
H200_MEMORY = 150_109_880_320   # bytes: device.memory_bytes of the embedded H200 profile
WEIGHTS = 1024 * 1024 * 4        # the dense layer's float32 kernel, no bias
PER_SAMPLE = (1024 + 1024) * 4   # its float32 input and output, one sample


def dense(layer="fc"):
    inputs = keras.Input(shape=(1024,))
    return keras.Model(inputs, keras.layers.Dense(1024, use_bias=False, name=layer)(inputs), name="one_dense")


@pytest.fixture
def dense_file(tmp_path):
    path = tmp_path / "one_dense.keras"
    dense().save(path)
    return str(path)


def test_binary_measurements_are_one_line_naming_the_file_and_what_was_expected(capsys, tmp_path, dense_file):
    binary = tmp_path / "run.json"
    binary.write_bytes(bytes(range(256)) * 4)
    code, out, err = run_cli(capsys, "analyze", dense_file, "--from-measurements", str(binary))
    assert_one_line_error(code, err, str(binary))
    assert "measurements JSON" in err and "not text" in err
    assert "UnicodeDecodeError" not in err and "Layers on the CARM" not in out


@pytest.mark.parametrize("layer", ["fc", "predictions"])
def test_measurements_of_another_model_are_refused_naming_it(capsys, tmp_path, layer):
    """A VGG16 recording (batch 64) replayed onto another model: none of its 22 layers is in the model analysed, or
    one only, by a common name (VGG16's output layer 'predictions', as ResNet50's)."""
    path = tmp_path / "one_dense.keras"
    dense(layer).save(path)
    record = DATA / "h200-record-vgg16-float32-b64.json"
    code, out, err = run_cli(capsys, "analyze", str(path), "--batch-size", "64", "--from-measurements", str(record))
    assert_one_line_error(code, err, str(record))
    assert "vgg16" in err and "one_dense" in err
    assert "Layers on the CARM" not in out


@pytest.mark.parametrize("batch", [20_000_000, 10**26])
def test_a_batch_that_cannot_fit_is_refused_with_the_largest_that_can(capsys, dense_file, batch):
    """One call needs at least WEIGHTS + batch * PER_SAMPLE bytes (mapping/memory.py's lower bound): on the H200's
    150,109,880,320 bytes no batch above (150,109,880,320 - 4,194,304) // 8192 = 18,323,448 fits."""
    largest = (H200_MEMORY - WEIGHTS) // PER_SAMPLE
    assert largest == 18_323_448
    code, out, err = run_cli(capsys, "analyze", dense_file, "--batch-size", str(batch))
    assert_one_line_error(code, err, f"batch size {batch} cannot run on NVIDIA H200")
    assert f"no batch above {largest:,} fits" in err
    assert out.strip() == ""   # no report of impossible times


def test_the_largest_batch_that_fits_is_not_refused(capsys, dense_file):
    code, out, err = run_cli(capsys, "analyze", dense_file, "--batch-size", str(18_323_448))
    assert code == 0, err
    assert "Layers on the CARM" in out


def test_the_python_api_warns_before_its_figures():
    report = advisor.analyze(dense(), batch_size=20_000_000, measure=False, calibration=False)
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=200))
    text = " ".join(buf.getvalue().replace("│", " ").split())
    assert text.index("batch size 20000000 cannot run on NVIDIA H200") < text.index("per sample")
    assert text.count("cannot run on NVIDIA H200") == 1   # in the header, not again at the bottom


def test_a_profile_without_the_roof_a_layer_needs_is_named(capsys, tmp_path, dense_file):
    doc = json.loads(resources.files("carm_advisor.profiles").joinpath("nvidia_h200.json").read_text())
    doc["ceilings"] = {k: v for k, v in doc["ceilings"].items() if k in ("tc_bf16", "hbm")}
    path = tmp_path / "bf16_only.json"
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "analyze", dense_file, "--profile", str(path))
    assert_one_line_error(code, err, f"{path}: the profile has no compute roof 'fp32'")


def test_a_profile_without_a_power_model_says_why_there_is_no_energy(tmp_path):
    doc = json.loads(resources.files("carm_advisor.profiles").joinpath("nvidia_h200.json").read_text())
    doc.pop("power_model")
    path = tmp_path / "no_power.json"
    path.write_text(json.dumps(doc))
    report = advisor.analyze(dense(), profile=str(path), measure=False, calibration=False)
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=250))
    text = " ".join(buf.getvalue().replace("│", " ").split())
    assert "energy none (the profile has no power model)" in text
    assert "- samples/J" not in text


def test_an_empty_profile_is_one_line(capsys, tmp_path, dense_file):
    path = tmp_path / "empty.json"
    path.write_text("")
    code, _, err = run_cli(capsys, "analyze", dense_file, "--profile", str(path))
    assert_one_line_error(code, err, str(path))


def test_a_truncated_profile_is_one_line(capsys, tmp_path, dense_file):
    path = tmp_path / "cut.json"
    shutil.copyfileobj(io.StringIO(resources.files("carm_advisor.profiles").joinpath("nvidia_h200.json")
                                   .read_text()[:2000]), path.open("w"))
    code, _, err = run_cli(capsys, "analyze", dense_file, "--profile", str(path))
    assert_one_line_error(code, err, str(path))


@pytest.mark.parametrize("argv, fragment", [(["--top", "0"], "--top: expected a positive integer"),
                                            (["--input-shape", "0,224,3"], "--input-shape: expected positive dim"),
                                            (["--batch-size", "1e26"], "--batch-size: expected a positive integer")])
def test_nonsense_numbers_are_refused_in_one_line(capsys, argv, fragment):
    code, out, err = run_cli(capsys, "analyze", "resnet50", *argv)
    assert_one_line_error(code, err, fragment)
    assert out == ""
