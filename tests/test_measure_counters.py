"""Nsight Compute counters: CSV parsing on a recorded-format fixture, the ncu command, the child process.

The fixture tests/data/ncu_two_layers_raw.csv is in the format of
`ncu --import R --csv --page raw --print-units base --print-nvtx-rename kernel`: ==PROF== lines around
it, a header row, a units row, one row per kernel named after its NVTX range (carm:0, carm:1), a
thousands separator, an "n/a" cell, and no int8 Tensor Core column. Expected figures are summed by hand
from the rows below (see the comments).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from carm_advisor.errors import MeasurementError
from carm_advisor.measure import counters

FIXTURE = Path(__file__).parent / "data" / "ncu_two_layers_raw.csv"
NAMES = ["block/conv", "dense"]


@pytest.fixture(scope="module")
def parsed():
    return counters.parse_ncu_csv(FIXTURE.read_text(), NAMES)


def test_rows_are_attributed_to_layers_by_nvtx_range_name(parsed):
    assert set(parsed) == {"block/conv", "dense"}
    assert parsed["block/conv"].kernels == 2
    assert parsed["dense"].kernels == 1


def test_conv_flops_sum_tensor_and_cuda_core_counters(parsed):
    conv = parsed["block/conv"]
    # TF32 Tensor Core: 1,000,000 + 500,000 (already 2 FLOPs per multiply-add).
    assert conv.flops_by_path["tensor_tf32"] == 1_500_000
    # FP32 CUDA cores: 2 x 1000 FFMA + 10 FADD + 5 FMUL (kernel 0) + 200 FADD (kernel 1) = 2215.
    assert conv.flops_by_path["cuda_fp32"] == 2215
    assert conv.tensor_flops == 1_500_000
    assert conv.flops == 1_502_215


def test_dense_flops_count_fma_twice_for_half_and_double(parsed):
    dense = parsed["dense"]
    assert dense.flops_by_path["tensor_bf16"] == 2_000_000
    assert dense.flops_by_path["tensor_fp16"] == 0  # "n/a" counts as nothing
    assert dense.flops_by_path["cuda_fp16"] == 400  # 100 HFMA2, each two multiply-adds = 4 FLOPs
    assert dense.flops_by_path["cuda_fp64"] == 6    # 2 x 3 DFMA
    assert dense.flops == 2_000_406


def test_bytes_and_intensity_per_level(parsed):
    conv = parsed["block/conv"]
    # SM-requested bytes: global 4000 + 1000, shared 2000 + 1000, local 0.
    assert conv.sm_bytes == 8000
    assert conv.level_bytes == {"l1": 10_000, "l2": 6500, "hbm": 4000}
    assert conv.ai("sm") == pytest.approx(1_502_215 / 8000)
    assert conv.ai("hbm") == pytest.approx(1_502_215 / 4000)
    dense = parsed["dense"]
    assert dense.sm_bytes == 10_100  # global 10,000 + local 100
    assert dense.ai("l2") == pytest.approx(2_000_406 / 9000)


def test_kernel_time_converted_from_nanoseconds(parsed):
    assert parsed["block/conv"].kernel_time_s == pytest.approx(2000e-9)  # 1500 ns + 500 ns
    assert parsed["dense"].kernel_time_s == pytest.approx(2000e-9)


def test_metric_absent_from_csv_is_listed_as_missing(parsed):
    assert "sm__ops_path_tensor_src_int8.sum" in parsed["dense"].missing_metrics
    assert parsed["dense"].flops_by_path["tensor_int8"] == 0


def test_to_dict_carries_flops_bytes_and_ai(parsed):
    d = parsed["block/conv"].to_dict()
    assert d["source"] == "ncu"
    assert d["flops"] == 1_502_215 and d["sm_bytes"] == 8000 and d["hbm_bytes"] == 4000
    assert d["ai"] == pytest.approx(1_502_215 / 8000)


def test_zero_bytes_gives_no_intensity():
    assert counters.LayerCounters(name="x", flops_by_path={"cuda_fp32": 10.0}).ai("sm") is None


def test_unit_scales_to_base_units():
    assert counters._unit_scale("byte") == 1
    assert counters._unit_scale("Kbyte") == 1e3
    assert counters._unit_scale("Mbyte") == 1e6
    assert counters._unit_scale("Gbyte") == 1e9
    assert counters._unit_scale("usecond") == 1e-6
    assert counters._unit_scale("nsecond") == 1e-9
    assert counters._unit_scale("inst") == 1


def test_scaled_units_row_multiplies_values():
    text = (
        '"ID","Kernel Name","dram__bytes.sum","gpu__time_duration.sum"\n'
        '"","","Mbyte","usecond"\n'
        '"0","carm:0","2.5","3"\n'
    )
    layer = counters.parse_ncu_csv(text, ["only"])["only"]
    assert layer.level_bytes["hbm"] == pytest.approx(2.5e6)
    assert layer.kernel_time_s == pytest.approx(3e-6)


def test_kernels_not_renamed_by_nvtx_raise_one_line():
    text = '"ID","Kernel Name","dram__bytes.sum"\n"0","void cutlass::Kernel<float>(Params)","10"\n'
    with pytest.raises(MeasurementError) as err:
        counters.parse_ncu_csv(text, ["a"])
    assert "print-nvtx-rename" in str(err.value) and "\n" not in str(err.value)


def test_output_without_header_raises():
    with pytest.raises(MeasurementError, match="header"):
        counters.parse_ncu_csv("==PROF== No kernels were profiled.\n", ["a"])


def test_range_index_beyond_layer_list_raises():
    text = '"ID","Kernel Name"\n"0","carm:5"\n'
    with pytest.raises(MeasurementError, match="index"):
        counters.parse_ncu_csv(text, ["a", "b"])


def test_profile_command_filters_one_range_per_layer_and_keeps_clocks():
    cmd = counters.profile_command("ncu", Path("/tmp/r"), 3, ["python", "-m", "x"])
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--nvtx-include"] == ["carm:0/", "carm:1/", "carm:2/"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert "sm__sass_data_bytes_mem_shared.sum" in metrics and "dram__bytes.sum" in metrics
    assert cmd[-3:] == ["python", "-m", "x"]


def test_export_command_renames_kernels_by_nvtx_range_in_base_units():
    cmd = counters.export_command("ncu", Path("/tmp/r.ncu-rep"))
    joined = " ".join(cmd)
    assert "--print-nvtx-rename kernel" in joined and "--print-units base" in joined and "--page raw" in joined


def test_without_ncu_counters_are_none(monkeypatch):
    import keras

    monkeypatch.setattr(counters, "ncu_path", lambda: None)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert counters.measure_counters(model, batch_size=2) is None


def test_child_runs_one_call_per_layer_inside_its_range(tmp_path, monkeypatch):
    """The child under ncu: warm-up outside any range, then exactly one range per layer, in order."""
    import json

    import keras

    from carm_advisor.measure import backends

    inp = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(3, 3, name="conv")(inp)
    out = keras.layers.Dense(2, name="dense")(keras.layers.Flatten(name="flat")(x))
    path = tmp_path / "m.keras"
    keras.Model(inp, out).save(path)
    (tmp_path / "layers.json").write_text(json.dumps(["conv", "dense"]))

    events: list[str] = []
    monkeypatch.setattr(backends, "nvtx_functions",
                        lambda: (lambda name: events.append(f"push {name}"), lambda: events.append("pop")))
    rc = counters._child(["--model", str(path), "--batch-size", "2", "--layers", str(tmp_path / "layers.json")])
    assert rc == 0
    assert events == ["push carm:0", "pop", "push carm:1", "pop"]


def test_the_child_walks_a_subclassed_call_of_two_tensors_on_the_shapes_analyze_was_given(tmp_path, monkeypatch):
    """analyze(..., counters=True, input_shapes=...) on a call(self, a, b): the child reloads the model, where Keras
    recorded only a's shape; the shapes travel with it (walker.given_shapes_json), a keras.Input's dtype too."""
    import json

    import keras

    from carm_advisor.mapping.given_shapes import call_shapes, given_shapes_json
    from carm_advisor.mapping.walker import iter_layer_calls
    from carm_advisor.measure import backends

    model = TwoTensors()
    model(keras.ops.zeros((2, 4)), keras.ops.ones((2, 3), dtype="int32"))
    path = tmp_path / "m.keras"
    model.save(path)
    shapes = [(None, 4), keras.Input((3,), dtype="int32")]
    with call_shapes(model, shapes):
        names = [c.path for c in iter_layer_calls(model, 2)]
        (tmp_path / "shapes.json").write_text(given_shapes_json(model))
    assert names == ["da", "emb", "mean", "add"]
    (tmp_path / "layers.json").write_text(json.dumps(names))

    events: list[str] = []
    monkeypatch.setattr(backends, "nvtx_functions",
                        lambda: (lambda name: events.append(f"push {name}"), lambda: events.append("pop")))
    rc = counters._child(["--model", str(path), "--batch-size", "2", "--layers", str(tmp_path / "layers.json"),
                          "--input-shapes", str(tmp_path / "shapes.json")])
    assert rc == 0 and events.count("pop") == 4


import keras  # noqa: E402 - the registered model below must be importable by name when the child reloads it


@keras.saving.register_keras_serializable(package="carm_test_counters")
class TwoTensors(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.da = keras.layers.Dense(8, name="da")
        self.emb = keras.layers.Embedding(10, 8, name="emb")

    def call(self, a, ids):
        return self.da(a) + keras.ops.mean(self.emb(ids), axis=1)
