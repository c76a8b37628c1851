"""carm_advisor.validation: recorded runs laid out on their models' rows, and every layer and whole model scored
against the power model and the calibration (figures by hand on a round CARM and power model)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from carm_advisor.carm.power_model import DutyCurve, PowerModel
from carm_advisor.carm.roofline import CARM
from carm_advisor.measure.records import LayerMeasurement, RunMeasurement
from carm_advisor.profiles.profile import load_profile
from carm_advisor.validation import compact_layers, exclusion, load_runs, validate
from carm_advisor.validation.scoring import VARIANTS, replay_share

DATA = Path(__file__).resolve().parent / "data"


def _hand_model(**changes):
    """100 W constant, 1 pJ per bf16 Tensor Core FLOP, 100 pJ per HBM byte, 700 W limit."""
    pm = PowerModel(constant_w=100.0, joules_per_flop={"tc_bf16": 1e-12}, joules_per_byte={"hbm": 1e-10},
                    power_limit_w=700.0)
    return dataclasses.replace(pm, **changes)


def _hand_carm():
    return CARM({"tc_bf16": 1e15}, {"hbm": 4e12})


# The work 2e11 FLOP + 1e9 B on the hand CARM: the roofs allow max(0.2, 0.25) = 0.25 ms, at 100 + 0.3 J / 0.25 ms =
# 1300 W, over the limit: the time stretches until 100 + 0.3 / t = 700, t = 0.5 ms. Busy power 700 W, bound 0.5 ms.
BUSY_W, BOUND_S = 700.0, 5e-4


def _layer(name, time_s, power_w, flops=2e11, bytes_=1e9, **extra):
    return {"name": name, "type": "Conv2D", "flops": flops, "bytes": bytes_, "path": "tc_bf16", "level": "hbm",
            "time_s": time_s, "power_w": power_w, "energy_j": None if power_w is None else power_w * time_s,
            "sm_clock_mhz": 1980.0, "output_elements": 1000, **extra}


def _run(file, layers, model="toy", method="layer-windows", window=0.5, whole=None, calibrated=None, batch=10):
    return {"file": file, "source": "folder", "date": "2026-12-03", "layers_in_policy_dtype": True, "model": model,
            "backend": "torch", "precision": "mixed_bfloat16", "batch_size": batch, "layout": "channels_first",
            "method": method, "layer_window_s": window, "reference": "inference_graph" if whole else None,
            "whole": whole or {}, "calibrated": calibrated or {}, "layers": layers}


# Measured powers on d = (0.5 ms / t) ** 0.5 above 100 W under the 700 W busy power: 0.5 ms -> 700 W, 1 ms ->
# 100 + 600 / sqrt(2) = 524.26 W, 2 ms -> 400 W, 8 ms -> 250 W. The size term of the fitted form stays at 1.
TRUTH = {5e-4: 700.0, 1e-3: 100 + 600 * 0.5 ** 0.5, 2e-3: 400.0, 8e-3: 250.0}


def _two_models():
    return [_run(f"{m}.json", [_layer(f"l{i}", t, p, calibrated_time_s_leave_one_model_out=t)
                               for i, (t, p) in enumerate(TRUTH.items())], model=m) for m in ("one", "two")]


def test_layers_are_scored_where_their_power_is_a_per_layer_measurement():
    runs = [_run("long.json", [_layer("a", 1e-3, 500.0),
                               _layer("hot", 1e-3, 700.0, flops=1e12),      # 1.1 J: 1.83 ms at the 700 W limit
                               _layer("zero", 1e-3, 0.0)]),                  # no reading
            _run("short.json", [_layer("a", 1e-3, 1200.0)], window=0.05),
            _run("profiled.json", [_layer("a", 1e-3, 650.0)], method="profiled", window=None),
            _run("old.json", [_layer("a", 1e-3, 300.0)], method=None, window=None)]
    out = validate(runs, _hand_carm(), _hand_model(), 2000.0, min_layer_window_s=0.5)
    v = out["validation"]
    assert v["filters"]["removed"] == {"layers_not_in_policy_dtype": 0, "profiled": 1, "window_unknown": 1,
                                       "window_short": 1, "no_power_reading": 1, "host_paced_without_gpu_time": 0,
                                       "measured_as_one_call": 0}
    assert v["filters"]["evaluated"] == 6 and v["filters"]["scored"] == 2
    a = next(r for r in out["layers"] if r["run"] == "long.json" and r["layer"] == "a")
    assert a["carm_bound_time_s"] == pytest.approx(BOUND_S, rel=1e-6)
    assert a["predicted_power_w_by_variant"]["carm_point"] == pytest.approx(BUSY_W)
    assert a["power_err_by_variant"]["carm_point"] == pytest.approx(700.0 / 500.0 - 1)
    # busy power alone: |700 / 500 - 1| = 0.4 and |700 / 700 - 1| = 0 -> median 0.2
    assert v["variants"]["carm_point"]["power_median_abs_err"] == pytest.approx(0.2)
    assert v["carm_point_power_median_abs_err"] == pytest.approx(0.2)
    # one model: no other model's layers to fit its curve on, so no headline
    assert v["n"] == 0 and a["predicted_power_w_by_variant"]["duty_lomo_calibrated_time"] is None
    # a lower threshold lets the short window in; 0 lets the record that does not say its window in too
    assert validate(runs, _hand_carm(), _hand_model(), 2000.0, 0.05)["validation"]["filters"]["scored"] == 3
    assert validate(runs, _hand_carm(), _hand_model(), 2000.0, 0.0)["validation"]["filters"]["scored"] == 4


def test_exclusion_names_the_first_reason_a_layer_is_not_scored():
    run = {"layers_in_policy_dtype": True, "method": "layer-windows", "layer_window_s": 1.0}
    assert exclusion(run, {"power_w": 300.0}, 0.5) is None
    assert exclusion({**run, "layers_in_policy_dtype": False}, {"power_w": 300.0}, 0.5) == "layers_not_in_policy_dtype"
    assert exclusion(run, {"power_w": 300.0, "execution": "jit"}, 0.5) == "host_paced_without_gpu_time"
    assert exclusion(run, {"power_w": 300.0, "execution": "jit", "gpu_time_s_leave_one_model_out": 1e-5}, 0.5) is None
    assert exclusion(run, {"power_w": 300.0, "part_of": "sep"}, 0.5) == "measured_as_one_call"


def test_a_host_paced_layer_without_an_in_model_gpu_time_is_not_scored():
    jitted = _layer("a", 1e-3, 500.0, execution="jit")                               # no jit fit: no GPU time
    known = _layer("b", 1e-3, 500.0, execution="jit", gpu_time_s_leave_one_model_out=5e-4)
    out = validate([_run("jax.json", [jitted, known])], _hand_carm(), _hand_model(), 2000.0, 0.5)
    assert out["validation"]["filters"]["removed"]["host_paced_without_gpu_time"] == 1
    assert [r["layer"] for r in out["layers"] if r["scored"]] == ["b"]


def test_the_noise_floor_is_that_of_the_scored_layers_only():
    runs = [_run(f"r{i}.json", [_layer("a", 1e-3, p)], window=w)
            for i, (w, p) in enumerate([(0.5, 400.0), (0.5, 440.0), (0.5, 420.0), (0.05, 50.0), (0.05, 1100.0)])]
    v = validate(runs, _hand_carm(), _hand_model(), 2000.0, 0.5)["validation"]
    # scored: 400, 440, 420 W; median 420: deviations -1/21, +1/21, 0 -> median |dev| 1/21
    assert v["measurement_noise_floor"] == {"power_median_abs_dev": pytest.approx(1 / 21), "n": 3, "configurations": 1}


def test_the_headline_takes_the_duty_curve_of_the_other_models_at_the_calibrated_time():
    out = validate(_two_models(), _hand_carm(), _hand_model(), 2000.0, 0.5)
    curves = out["duty_curves"]["leave_one_model_out"]
    assert curves["one"]["source"].endswith("but one") and curves["two"]["source"].endswith("but two")
    assert curves["one"]["gamma"] == pytest.approx(0.5) and curves["one"]["variable"] == "size_efficiency"
    v = out["validation"]
    assert v["headline_variant"] == "duty_lomo_calibrated_time" and v["n"] == 8
    assert v["power_median_abs_err"] == pytest.approx(0.0, abs=1e-9)      # the other model follows the same curve
    row = next(r for r in out["layers"] if r["run"] == "one.json" and r["layer"] == "l2")
    assert row["predicted_power_w_by_variant"]["duty_lomo_calibrated_time"] == pytest.approx(400.0)
    # the busy power alone: 700 / P - 1 = 0, 0.3352, 0.75, 1.8 for each model -> the middle two's mean
    assert v["variants"]["carm_point"]["power_median_abs_err"] == pytest.approx((700 / TRUTH[1e-3] - 1 + 0.75) / 2)
    # a layer calibrated at twice its measured 2 ms: 100 + 600 * (0.5 / 4) ** 0.5 = 312.1 W against 400 W measured
    runs = _two_models()
    runs[0]["layers"][2]["calibrated_time_s_leave_one_model_out"] = 4e-3
    row = next(r for r in validate(runs, _hand_carm(), _hand_model(), 2000.0, 0.5)["layers"]
               if r["run"] == "one.json" and r["layer"] == "l2")
    assert row["power_err_by_variant"]["duty_lomo_calibrated_time"] == pytest.approx((100 + 600 * 0.125 ** 0.5) / 400 - 1)
    assert row["power_err_by_variant"]["duty_lomo_measured_time"] == pytest.approx(0.0, abs=1e-9)
    assert row["headline_energy_err_given_time"] == pytest.approx((100 + 600 * 0.125 ** 0.5) / 400 - 1)


def test_the_layers_on_a_tensor_core_path_get_a_curve_of_their_own():
    pm = _hand_model(power_limit_w=None, joules_per_flop={"tc_bf16": 1e-12, "fp32": 1e-12})
    carm = CARM({"tc_bf16": 1e15, "fp32": 1e14}, {"hbm": 4e12})
    # By hand, no limit: 2e11 FLOP + 1e8 B on tc_bf16: 0.2 ms, 0.21 J -> 100 + 1050 = 1150 W; 1e8 FLOP + 1e9 B on
    # fp32: 0.25 ms (HBM), 0.1001 J -> 100 + 400.4 = 500.4 W. Measured on d = e ** 0.4 (Tensor Cores), 1 (the rest).
    def layer(name, path, flops, bytes_, busy, bound, e):
        t = bound / e
        return _layer(name, t, 100 + (busy - 100) * (e ** 0.4 if path == "tc_bf16" else 1.0), flops, bytes_,
                      path=path, calibrated_time_s_leave_one_model_out=t)

    runs = [_run(f"{m}.json", [layer(f"tc{i}", "tc_bf16", 2e11, 1e8, 1150.0, 2e-4, e) for i, e in enumerate((0.2, 0.4, 0.6, 0.8))]
                 + [layer(f"ew{i}", "fp32", 1e8, 1e9, 500.4, 2.5e-4, e) for i, e in enumerate((0.2, 0.4, 0.6, 0.8))],
                 model=m) for m in ("m1", "m2", "m3")]
    out = validate(runs, carm, pm, 2000.0, 0.5)
    assert out["duty_curves"]["tensor_core_in_sample"]["gamma"] == pytest.approx(0.4)
    assert out["duty_curves"]["in_sample"]["gamma"] == pytest.approx(0.0)
    errs = [abs(r["headline_power_err"]) for r in out["layers"] if r["scored"]]
    assert len(errs) == 24 and max(errs) < 1e-6                      # each curve recovered, left out by model


def test_another_gpus_curves_are_taken_for_every_model_in_place_of_the_fitted_ones():
    # 2e9 FLOP + 1e9 B: 0.25 ms at the HBM roof, 0.102 J: busy 100 + 408 = 508 W (under the limit); measured at
    # 1 ms it reaches e = 0.25 of its roof: 508 W at gamma 0, 100 + 408 * 0.25 = 202 W at gamma 1
    lay = lambda n: _layer(n, 1e-3, 300.0, flops=2e9)  # noqa: E731
    runs = [_run("a.json", [lay("x"), lay("y")]), _run("b.json", [lay("x")], model="toy2")]
    for gamma, expected_w in ((0.0, 508.0), (1.0, 202.0)):
        fixed = _hand_model(duty=DutyCurve(None, gamma, "given", "efficiency"))
        out = validate(runs, _hand_carm(), _hand_model(), 2000.0, 0.5, fixed_duty=fixed)
        assert {m: c["gamma"] for m, c in out["duty_curves"]["leave_one_model_out"].items()} == {"toy": gamma,
                                                                                               "toy2": gamma}
        for layer in out["layers"]:
            assert layer["predicted_power_w_by_variant"]["duty_lomo_measured_time"] == pytest.approx(expected_w)


def test_a_whole_model_takes_its_layers_powers_at_their_calibrated_times_and_the_calibrated_time():
    # measured (graph): 500 W over 2.5 ms, 1.25 J per call of 10 samples: 0.125 J per sample. Calibrated: the hand
    # work in 2 ms (e = 0.25 of its 0.5 ms bound), the whole model in 3 ms. With the curve d = e ** 1: 100 + 600 *
    # 0.25 = 250 W (-50%), 250 W x 3 ms = 0.75 J: 0.075 J per sample (-40%); time 3 / 2.5 - 1 = +20%.
    whole = {"time_s": 2.5e-3, "power_w": 500.0, "energy_j": 1.25, "execution": "cuda_graph"}
    cal = {"whole_time_s": 3e-3, "layers": [(2e11, 1e9, "tc_bf16", "hbm", 2e-3, 1000)], "gpu_share": 1.0}
    run = _run("m.json", [_layer("a", 1e-3, 550.0)], method="profiled", window=None, whole=whole,
               calibrated={"in_sample": cal, "leave_one_model_out": {**cal, "gpu_share": 0.5}})
    fixed = _hand_model(duty=DutyCurve(None, 1.0, "given", "efficiency"))
    out = validate([run], _hand_carm(), _hand_model(), 2000.0, 0.5, fixed_duty=fixed)
    assert out["validation"]["filters"]["scored"] == 0        # profiled: no per-layer power scored...
    (m,) = out["models"]                                      # ...but the whole model counts
    assert m["reference"] == "inference_graph" and m["reference_execution"] == "cuda_graph"
    assert m["measured_energy_per_sample_j"] == pytest.approx(0.125)
    assert m["carm_bound_time_s"] == pytest.approx(BOUND_S, rel=1e-6) and m["sum_layer_time_s"] == 1e-3
    c = m["calibrated_in_sample"]
    assert c["duty_lomo_predicted_power_w"] == pytest.approx(250.0) and c["duty_lomo_power_err"] == pytest.approx(-0.5)
    assert c["duty_lomo_predicted_energy_per_sample_j"] == pytest.approx(0.075)
    assert c["duty_lomo_energy_per_sample_err"] == pytest.approx(-0.4) and c["time_err"] == pytest.approx(0.2)
    assert c["carm_point_power_err"] == pytest.approx(700.0 / 500.0 - 1)
    # a host-paced call the GPU is busy half of: 100 + (250 - 100) x 0.5 = 175 W
    lomo = m["calibrated_leave_one_model_out"]
    assert lomo["duty_lomo_predicted_power_w"] == pytest.approx(175.0) and lomo["gpu_share"] == 0.5
    h = out["validation"]["models"]["headline"]
    assert h["n"] == 1 and h["power_median_abs_err"] == pytest.approx(0.65)
    assert h["energy_per_sample_median_abs_err_in_sample_calibrated_time"] == pytest.approx(0.4)
    assert h["time_median_abs_err"] == pytest.approx(0.2)


def test_a_whole_model_recorded_alone_is_scored_on_its_calibrated_figures_only():
    alone = _run("c.json", [], model="c", method="whole-model-only", window=None,
                 whole={"time_s": 2e-3, "power_w": 500.0, "execution": "jit"},
                 calibrated={"leave_one_model_out": {"whole_time_s": 2e-3, "gpu_share": 1.0,
                                                     "layers": [(2e11, 1e9, "tc_bf16", "hbm", 2e-3, 1000)]}})
    out = validate(_two_models() + [alone], _hand_carm(), _hand_model(), 2000.0, 0.5)
    assert out["duty_curves"]["leave_one_model_out"]["c"]["source"].endswith("(none of c)")
    row = next(m for m in out["models"] if m["run"] == "c.json")
    # the curve of the two other models, d = e ** 0.5: 100 + 600 * 0.5 = 400 W against 500 W
    assert row["calibrated_leave_one_model_out"]["duty_lomo_power_err"] == pytest.approx(-0.2)
    assert row["sum_layer_time_s"] == 0.0
    # without a calibrated figure either, it is not a whole-model row
    bare = {**alone, "model": "d", "file": "d.json", "calibrated": {}}
    assert all(m["run"] != "d.json" for m in validate([bare], _hand_carm(), _hand_model(), 2000.0, 0.5)["models"])


def test_a_replayed_layer_draws_its_power_for_the_gpus_share_of_each_replay():
    replay = {"execution": "cuda_graph", "calibrated_time_s_leave_one_model_out": 3e-6,
              "replay_floor_s_leave_one_model_out": 4e-6}
    assert replay_share(replay) == pytest.approx(0.75)                         # 3 us of GPU work per 4 us replay
    assert replay_share({**replay, "calibrated_time_s_leave_one_model_out": 8e-6}) == 1.0
    assert replay_share({**replay, "execution": "jit"}) == 1.0                 # host-paced: its own form
    assert replay_share({**replay, "replay_floor_s_leave_one_model_out": None}) == 1.0


def test_compact_rows_keep_one_list_per_layer_and_runs_of_one_file_name_in_two_folders_apart():
    base = {"run": "r.json", "model": "m", "backend": "torch", "precision": "float32", "batch_size": 8,
            "method": "layer-windows", "layer_window_s": 0.5, "layer": "conv", "type": "Conv2D", "path": "fp32",
            "level": "hbm", "excluded": None, "measured_time_s": 1.0 / 3, "measured_power_w": 500.0,
            "predicted_power_w_by_variant": {k: 400.0 for k in VARIANTS}}
    compact = compact_layers([{**base, "source": "old"}, {**base, "source": "new"}, {**base, "source": "old"}])
    assert compact["runs"] == [["r.json", "old", "m", "torch", "float32", 8, "layer-windows", 0.5],
                               ["r.json", "new", "m", "torch", "float32", 8, "layer-windows", 0.5]]
    assert [r[0] for r in compact["rows"]] == [0, 1, 0]
    row = dict(zip(compact["columns"], compact["rows"][0]))
    assert row["measured_time_s"] == 0.33333 and row["power_w:carm_point"] == 400.0 and row["excluded"] is None


def _record(path: Path, model: str, layers, **changes) -> Path:
    run = RunMeasurement(device={"name": "NVIDIA H200"}, backend="torch", backend_version="x", keras_version="x",
                         batch_size=2, precision="float32", layout="channels_last",
                         math_mode={"conv": "tf32", "matmul": "fp32"}, date="2026-12-03T10:00:00", command="test",
                         layers=layers, model_name=model, settings={"method": "layer-windows", "layer_window_s": 0.5})
    return dataclasses.replace(run, **changes).to_json(path)


def test_records_are_laid_out_once_with_their_folder_method_window_and_whole_model_reference(tmp_path):
    # the same recorded run in two folders counts once; the graph replay is the reference over the eager call
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    record = DATA / "h200-record-vgg16-float32-b64-graphs.json"
    shutil.copy(record, tmp_path / "a" / record.name)
    shutil.copy(record, tmp_path / "b" / "again.json")
    (tmp_path / "b" / "call.json").write_text(json.dumps({"notes": "not a record"}))
    runs = load_runs([tmp_path / "a", tmp_path / "b"], load_profile())
    (run,) = runs
    doc = json.loads(record.read_text())
    assert run["source"] == "a" and run["model"] == "vgg16" and run["reference"] == "inference_graph"
    assert run["whole"]["time_s"] == doc["inference_graph"]["time_s"] and run["calibrated"] == {"in_sample": None}
    assert run["method"] == doc["settings"].get("method") and run["layers_in_policy_dtype"]
    measured = {m["name"]: m for m in doc["layers"]}
    first = run["layers"][0]
    assert first["time_s"] == measured[first["name"]]["time_s"] and first["flops"] > 0 and first["part_of"] is None


def test_a_jax_mixed_record_traced_before_the_autocast_fix_keeps_its_whole_model_not_its_layers():
    (run,) = load_runs([DATA / "h200-record-vgg16-mixed_bfloat16-jax-b64.json"], load_profile())
    assert not run["layers_in_policy_dtype"]
    assert exclusion(run, run["layers"][0], 0.0) == "layers_not_in_policy_dtype"


def test_a_model_built_after_another_still_matches_its_recorded_auto_named_layers(tmp_path):
    # records name auto-named layers as a fresh process does ("conv2d", "conv2d_1", ...); built after Xception in
    # one process (its shortcut convolutions are auto-named too), InceptionV3's would be "conv2d_4"...
    import keras

    keras.applications.Xception(weights=None)
    layers = [LayerMeasurement(n, "Conv2D", 1e-4, 0.0, 1, power_w=300.0) for n in ("conv2d", "conv2d_1", "conv2d_93")]
    (run,) = load_runs([_record(tmp_path / "r.json", "inceptionv3", layers)], load_profile())
    assert [r["name"] for r in run["layers"]] == ["conv2d", "conv2d_1", "conv2d_93"]   # 94 auto-named convolutions
    assert all(r["flops"] > 0 for r in run["layers"])


def test_a_separable_conv_measured_as_one_call_shares_its_time_between_its_parts(tmp_path):
    batch = 2
    layers = [LayerMeasurement("block1_conv1", "Conv2D", 2e-4, 0.0, 1, energy_j=0.08, power_w=400.0),
              LayerMeasurement("block2_sepconv1", "SeparableConv2D", 1e-4, 0.0, 1, energy_j=0.03, power_w=300.0)]
    (run,) = load_runs([_record(tmp_path / "r.json", "xception", layers)], load_profile())
    by = {r["name"]: r for r in run["layers"]}
    assert set(by) == {"block1_conv1", "block2_sepconv1:depthwise", "block2_sepconv1:pointwise"}
    dw, pw = by["block2_sepconv1:depthwise"], by["block2_sepconv1:pointwise"]
    # block1 (3x3 stride 2 valid, 299 -> 149) and block1_conv2 (3x3 valid, 149 -> 147) give 147x147x64; a 3x3
    # depthwise over it is 9 MACs per element, the pointwise 64 -> 128 channels 64 MACs per output element
    assert 2 * batch * 147 * 147 * 64 * 9 <= dw["flops"] < 1.1 * 2 * batch * 147 * 147 * 64 * 9
    assert 2 * batch * 147 * 147 * 128 * 64 <= pw["flops"] < 1.1 * 2 * batch * 147 * 147 * 128 * 64
    assert dw["time_s"] + pw["time_s"] == pytest.approx(1e-4) and dw["time_s"] > 0 and pw["time_s"] > 0
    assert dw["energy_j"] + pw["energy_j"] == pytest.approx(0.03)
    assert dw["power_w"] == pw["power_w"] == 300.0 and dw["part_of"] == pw["part_of"] == "block2_sepconv1"
    assert by["block1_conv1"]["part_of"] is None and by["block1_conv1"]["time_s"] == 2e-4
    assert exclusion(run, dw, 0.5) == "measured_as_one_call" and exclusion(run, by["block1_conv1"], 0.5) is None


def test_a_layers_calibrated_time_leaves_its_own_models_samples_out(tmp_path):
    from carm_advisor.calibration import Calibration, Sample

    def samples(model, e):   # Conv2D samples at efficiency e in every half-decade of bound, three each
        return [Sample("torch", "Conv2D", "float32", b, b / e, model, f"s{k}{i}", "cuda_graph")
                for k in range(-14, -2) for i, b in enumerate([10.0 ** (k / 2)] * 3)]

    layers = [LayerMeasurement("block1_conv1", "Conv2D", 1e-4, 0.0, 1, power_w=300.0, execution="cuda_graph")]
    path = _record(tmp_path / "r.json", "vgg16", layers)
    times, floors = [], []
    for other_e in (0.25, 0.5):   # the record's own model's samples (0.9) are left out: only "other"'s count
        (run,) = load_runs([path], load_profile(), Calibration(samples("vgg16", 0.9) + samples("other", other_e)))
        (layer,) = run["layers"]
        times.append(layer["calibrated_time_s_leave_one_model_out"])
        floors.append(layer["replay_floor_s_leave_one_model_out"])
        assert "gpu_time_s_leave_one_model_out" not in layer        # a replay, not a layer jitted alone
    assert times[0] == pytest.approx(2 * times[1])                  # bound / 0.25 against bound / 0.5
    # the replay floor: the shortest replayed cell's median time, 1e-7 s of bound at 0.25 and at 0.5
    assert floors == [pytest.approx(1e-7 / 0.25), pytest.approx(1e-7 / 0.5)]
    assert run["calibrated"] == {"in_sample": None, "leave_one_model_out": None}   # no whole-model measurement
