"""The whole measured path without a GPU: per-layer measurements recorded on the H200 test machine
(benchmarks/vgg16_layers.py, torch backend, counters from Nsight Compute) replayed through the CLI."""

import json
from pathlib import Path

import pytest

from carm_advisor.cli import main

DATA = Path(__file__).parent / "data"
BF16 = DATA / "h200-record-vgg16-mixed_bfloat16-b64.json"
FP32 = DATA / "h200-record-vgg16-float32-b64.json"


def replay(tmp_path, record, precision, *extra):
    out = tmp_path / "r.json"
    code = main(["analyze", "vgg16", "--batch-size", "64", "--precision", precision, "--layout", "channels_first",
                 "--from-measurements", str(record), "--json", str(out), *extra])
    return code, (json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture(autouse=True)
def _restore_layout():
    import keras

    before = keras.config.image_data_format()
    yield
    keras.config.set_image_data_format(before)


def test_replayed_bf16_run_is_reported_as_measured_with_counter_intensity(tmp_path, capsys):
    code, d = replay(tmp_path, BF16, "mixed_bfloat16", "--plot", str(tmp_path / "p.png"))
    assert code == 0, capsys.readouterr().err
    record = json.loads(BF16.read_text())
    assert d["device"]["source"] == "measured" and d["device"]["name"] == "NVIDIA H200"
    assert d["model"]["backend"] == "torch"
    recorded = {m["name"]: m["time_s"] for m in record["layers"]}
    convs = [r for r in d["layers"] if r["type"] in ("Conv2D", "Dense")]
    assert len(convs) == 16
    for r in convs:
        assert r["measured"] and r["time_s"] == pytest.approx(recorded[r["name"]])
        assert r["ai_source"] == "counters"
        assert r["path"] == "tc_bf16"
        assert r["bound"] != "above-roof"
    assert d["totals"]["time_source"] == "measured"
    assert d["totals"]["time_s"] == pytest.approx(record["inference"]["time_s"])
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_replayed_float32_run_uses_the_torch_math_mode_it_recorded(tmp_path, capsys):
    code, d = replay(tmp_path, FP32, "float32")
    assert code == 0, capsys.readouterr().err
    paths = {r["name"]: r["path"] for r in d["layers"]}
    assert paths["block3_conv1"] == "tc_tf32"     # cuDNN convolutions run TF32 by default in torch
    assert paths["fc1"] == "fp32"                 # cuBLAS matmuls do not
    assert not [r for r in d["layers"] if r["bound"] == "above-roof"]


def test_replay_at_another_batch_size_is_a_one_line_error(tmp_path, capsys):
    code = main(["analyze", "vgg16", "--batch-size", "8", "--from-measurements", str(BF16)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "batch size 64" in err


def test_malformed_recording_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "carm-advisor/measurements/1"}')
    code = main(["analyze", "vgg16", "--batch-size", "64", "--from-measurements", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("record, precision", [
    (DATA / "h200-record-vgg16-mixed_bfloat16-b64-graphs.json", "mixed_bfloat16"),
    (DATA / "h200-record-vgg16-float32-b64-graphs.json", "float32"),
])
def test_cuda_graph_layer_times_add_up_to_the_model_time(tmp_path, capsys, record, precision):
    """Issue target: on torch, the sum of per-layer GPU times is within 15% of the whole model's."""
    code, d = replay(tmp_path, record, precision)
    assert code == 0, capsys.readouterr().err
    graph = d["measurement"]["inference_graph"]
    assert graph and graph["execution"] == "cuda_graph"
    ratio = d["totals"]["sum_layer_time_s"] / graph["time_s"]
    assert 0.85 <= ratio <= 1.15, ratio
    assert all(r["measured"] for r in d["layers"] if r["flops"])
