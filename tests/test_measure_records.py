"""The measurement record: JSON round trip and one-line errors on malformed files (replay relies on it)."""

from __future__ import annotations

import copy
import json
import math

import pytest

from carm_advisor.errors import MeasurementError
from carm_advisor.measure.records import SCHEMA, LayerMeasurement, ModelMeasurement, RunMeasurement


def make_run() -> RunMeasurement:
    return RunMeasurement(
        device={"name": "NVIDIA H200", "uuid": "GPU-1", "driver": "580.159.04"},
        backend="torch",
        backend_version="2.11.0",
        keras_version="3.15.1",
        batch_size=64,
        precision="mixed_bfloat16",
        layout="channels_first",
        math_mode={"conv": "tf32", "matmul": "fp32", "source": "torch flags"},
        date="2026-12-02T12:00:00+00:00",
        command="carm-advise analyze vgg16",
        layers=[
            LayerMeasurement("block1_conv1", "Conv2D", 1.5e-3, 0.02, 2, 0.9, 600.0, 1500.0, "eager",
                             {"flops": 1.0e11, "sm_bytes": 2.0e9, "ai": 50.0}),
            LayerMeasurement("flatten", "Flatten", 2e-6, 0.5, 2),
        ],
        inference=ModelMeasurement(0.015, 0.01, 9.5, 650.0, 1600.0, 2, "eager"),
        training_step=None,
        wall_s=21.5,
        model_name="vgg16",
        settings={"preset": "standard"},
    )


def test_round_trip_through_json_gives_an_equal_record(tmp_path):
    run = make_run()
    path = run.to_json(tmp_path / "sub" / "m.json")
    assert RunMeasurement.from_json(path) == run


def test_written_json_carries_schema_and_unit_named_keys(tmp_path):
    data = json.loads(make_run().to_json(tmp_path / "m.json").read_text())
    assert data["schema"] == SCHEMA
    assert set(data["layers"][0]) >= {"name", "type", "time_s", "energy_j", "power_w", "sm_clock_mhz", "execution"}
    assert data["inference"]["energy_j"] == 9.5


def test_infinite_spread_is_written_as_null_and_reads_back_as_none(tmp_path):
    run = make_run()
    run.layers[1].time_spread = math.inf
    path = run.to_json(tmp_path / "m.json")
    assert "Infinity" not in path.read_text()
    assert RunMeasurement.from_json(path).layers[1].time_spread is None


def test_unknown_extra_keys_are_tolerated(tmp_path):
    data = make_run().to_dict()
    data["future_key"] = 1
    data["layers"][0]["future_layer_key"] = "x"
    assert RunMeasurement.from_dict(data).layers[0].name == "block1_conv1"


def test_sum_of_layer_times_and_lookup_by_name():
    run = make_run()
    assert run.sum_layer_time_s == pytest.approx(1.5e-3 + 2e-6)
    assert run.layer("flatten").type == "Flatten"
    with pytest.raises(MeasurementError):
        run.layer("nope")


def _mutated(mutate):
    data = make_run().to_dict()
    data = copy.deepcopy(data)
    mutate(data)
    return data


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda d: d.update(schema="carm-advisor/report/1"), "schema"),
        (lambda d: d.pop("batch_size"), "batch_size"),
        (lambda d: d.update(batch_size="64"), "batch_size"),
        (lambda d: d.update(batch_size=True), "batch_size"),
        (lambda d: d.update(layers={"a": 1}), "layers"),
        (lambda d: d["layers"].append(3), "layers[2]"),
        (lambda d: d["layers"][0].pop("time_s"), "time_s"),
        (lambda d: d["layers"][0].update(time_s=-1.0), "time_s"),
        (lambda d: d["layers"][0].update(energy_j="lots"), "energy_j"),
        # the report divides FLOPs by these: a zero time or a non-number crashed the replay
        (lambda d: d["layers"][0].update(time_s=0.0), "time_s"),
        (lambda d: d["layers"][0].update(counters={"flops": "many"}), "counters.flops"),
        (lambda d: d["layers"][0].update(counters={"ai": float("nan")}), "counters.ai"),
        (lambda d: d["layers"][0].update(execution="compiled"), "execution"),
        (lambda d: d.update(inference=[1, 2]), "inference"),
        (lambda d: d["inference"].pop("time_s"), "time_s"),
        (lambda d: d.update(math_mode="tf32"), "math_mode"),
    ],
)
def test_malformed_record_raises_one_line_error_naming_the_problem(tmp_path, mutate, fragment):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutated(mutate)))
    with pytest.raises(MeasurementError) as err:
        RunMeasurement.from_json(path)
    message = str(err.value)
    assert fragment in message and "\n" not in message


def test_invalid_json_raises_one_line_error_with_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"schema": "carm-advisor/measurements/1",\n "layers": [}')
    with pytest.raises(MeasurementError) as err:
        RunMeasurement.from_json(path)
    assert "line 2" in str(err.value) and "\n" not in str(err.value)


def test_json_that_is_not_an_object_raises(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(MeasurementError, match="object"):
        RunMeasurement.from_json(path)


def test_missing_file_raises_measurement_error(tmp_path):
    with pytest.raises(MeasurementError, match="readable"):
        RunMeasurement.from_json(tmp_path / "absent.json")


def test_jax_mixed_precision_layers_recorded_before_the_autocast_fix_are_flagged():
    from carm_advisor.measure.records import RunMeasurement

    def run(backend, precision, settings):
        return RunMeasurement(device={}, backend=backend, backend_version="", keras_version="", batch_size=1,
                              precision=precision, layout="channels_last", math_mode={}, date="", command="",
                              settings=settings)

    assert not run("jax", "mixed_bfloat16", {}).jit_layers_in_policy_dtype
    assert not run("jax", "mixed_float16", {"method": "layer-windows"}).jit_layers_in_policy_dtype
    assert run("jax", "mixed_bfloat16", {"jax_layer_trace": "x"}).jit_layers_in_policy_dtype
    assert run("jax", "float32", {}).jit_layers_in_policy_dtype        # float32 was float32 either way
    assert run("torch", "mixed_bfloat16", {}).jit_layers_in_policy_dtype
