"""The Predictor: layer costs placed on a profile's CARM, the calibration seam, and the model-bound what-ifs.

Profile figures are round so each expected time and energy is a hand calculation.
"""

import keras
import pytest

import carm_advisor
from carm_advisor.mapping.types import OP_ELEMENTWISE, OP_MATMUL, LayerCost
from carm_advisor.predict import Predictor, resolve_math_mode
from carm_advisor.profiles.profile import SCHEMA, profile_from_dict

TORCH_MODE = {"conv": "tf32", "matmul": "fp32"}


def profile(power_limit_w=None, duty=None):
    doc = {
        "schema": SCHEMA,
        "device": {"name": "Round GPU", "l2_usable_bytes": 1000},
        "provenance": {"source": "recorded"},
        "ceilings": {
            "fp32": {"kind": "compute", "value": 1e12, "provenance": {"source": "datasheet"}},
            "tc_bf16": {"kind": "compute", "value": 2e13, "provenance": {"source": "datasheet"}},
            "l2": {"kind": "memory", "value": 1e12, "provenance": {"source": "datasheet"}},
            "hbm": {"kind": "memory", "value": 1e11, "provenance": {"source": "datasheet"}},
        },
        "power_model": {"constant_w": 100, "power_limit_w": power_limit_w,
                        "joules_per_flop": {"fp32": 1e-11, "tc_bf16": 5e-13},
                        "joules_per_byte": {"l2": 1e-11, "hbm": 1e-10}},
    }
    if duty is not None:
        doc["power_model"]["duty"] = duty
    return profile_from_dict(doc)


def matmul(flops=4e10, bytes_read=6e7, dtype="bfloat16"):
    return LayerCost(name="mm", type="Dense", flops=int(flops), bytes_read=int(bytes_read), bytes_written=0,
                     compute_dtype=dtype, op_class=OP_MATMUL, tensor_core=True)


class FixedEfficiency:
    """A stand-in calibration: one efficiency for every layer, recording what it was asked."""

    def __init__(self, value):
        self.value, self.asked = value, []

    def efficiency(self, row, backend):
        self.asked.append((row.name, backend))
        return self.value


def test_bf16_matmul_is_compute_bound_with_time_and_energy_by_hand():
    (row,) = Predictor(profile(), TORCH_MODE).rows_for_costs([matmul()])
    # AI = 4e10 / 6e7 = 667 FLOP/B > ridge 2e13 / 1e11 = 200: on the BF16 roof, 4e10 / 2e13 = 2 ms.
    assert (row.path, row.level, row.bound) == ("tc_bf16", "hbm", "compute:tc_bf16")
    assert row.predicted_time_s == pytest.approx(2e-3)
    # 100 W x 2 ms + 5e-13 J/FLOP x 4e10 + 1e-10 J/B x 6e7 = 0.2 + 0.02 + 0.006 J
    assert row.predicted_energy_j == pytest.approx(0.226)
    assert row.calibrated_time_s is None and row.calibrated_energy_j is None


def test_power_limit_stretches_the_bound_and_says_so():
    # dynamic energy 0.026 J over (110 - 100) W headroom = 2.6 ms > the roofs' 2 ms
    (row,) = Predictor(profile(power_limit_w=110), TORCH_MODE).rows_for_costs([matmul()])
    assert row.predicted_time_s == pytest.approx(2.6e-3)
    assert "slowed by the power limit" in row.notes


def test_float32_matmul_follows_the_math_mode_and_falls_back_to_a_roof_the_profile_has():
    # torch's default runs float32 matmuls on CUDA cores; the profile has fp32 but no tc_tf32.
    (fp32,) = Predictor(profile(), resolve_math_mode("torch")).rows_for_costs([matmul(dtype="float32")])
    (tf32,) = Predictor(profile(), {"conv": "tf32", "matmul": "tf32"}).rows_for_costs([matmul(dtype="float32")])
    assert fp32.path == "fp32" and tf32.path == "fp32"
    assert fp32.predicted_time_s == pytest.approx(4e10 / 1e12)


def test_for_backend_takes_torchs_shipped_flags():
    # torch ships cudnn.allow_tf32=True and cuda.matmul.allow_tf32=False
    predictor = Predictor.for_backend(profile(), "torch")
    assert predictor.backend == "torch"
    assert (predictor.math_mode["conv"], predictor.math_mode["matmul"]) == ("tf32", "fp32")


def test_a_calibration_adds_its_time_and_energy_beside_the_unchanged_bound():
    calibration = FixedEfficiency(0.5)
    (row,) = Predictor(profile(), TORCH_MODE, backend="torch", calibration=calibration).rows_for_costs([matmul()])
    assert calibration.asked == [("mm", "torch")]
    assert row.predicted_time_s == pytest.approx(2e-3) and row.predicted_energy_j == pytest.approx(0.226)
    # half the bound's speed: 4 ms. Without a duty curve the layer draws its CARM-point (busy) power,
    # 0.226 J / 2 ms = 113 W, for the whole 4 ms: 0.452 J.
    assert row.calibrated_time_s == pytest.approx(4e-3)
    assert row.calibrated_energy_j == pytest.approx(113.0 * 4e-3)
    d = row.to_dict()
    assert d["calibrated_time_s"] == pytest.approx(4e-3) and d["predicted_time_s"] == pytest.approx(2e-3)


def test_calibrated_energy_scales_the_busy_power_above_the_constant_by_the_profiles_duty_curve():
    duty = {"t_full_s": 16e-3, "gamma": 0.5}
    (row,) = Predictor(profile(duty=duty), TORCH_MODE, calibration=FixedEfficiency(0.5)).rows_for_costs([matmul()])
    # busy 113 W (0.226 J over 2 ms); at 4 ms, (4 / 16) ** 0.5 = 0.5 of its 13 W above the 100 W constant:
    # 106.5 W x 4 ms = 0.426 J. The bound's own energy is unchanged.
    assert row.predicted_energy_j == pytest.approx(0.226)
    assert row.calibrated_energy_j == pytest.approx(106.5 * 4e-3)
    # At 16 ms or longer the layer draws its busy power: efficiency 1/8 -> 16 ms at 113 W.
    (slow,) = Predictor(profile(duty=duty), TORCH_MODE, calibration=FixedEfficiency(0.125)).rows_for_costs([matmul()])
    assert slow.calibrated_energy_j == pytest.approx(113.0 * 16e-3)


def test_the_efficiency_form_of_the_duty_curve_scales_by_the_share_of_its_roof_the_layer_reaches():
    duty = {"variable": "efficiency", "gamma": 0.5}
    (row,) = Predictor(profile(duty=duty), TORCH_MODE, calibration=FixedEfficiency(0.25)).rows_for_costs([matmul()])
    # bound 2 ms, calibrated 8 ms: efficiency 0.25, 0.25 ** 0.5 = 0.5 of the 13 W above the constant:
    # 106.5 W x 8 ms (the time form would need a t_full_s; its absence is no error for this form)
    assert row.calibrated_time_s == pytest.approx(8e-3)
    assert row.calibrated_energy_j == pytest.approx(106.5 * 8e-3)
    (full,) = Predictor(profile(duty=duty), TORCH_MODE, calibration=FixedEfficiency(1.0)).rows_for_costs([matmul()])
    assert full.calibrated_energy_j == pytest.approx(113.0 * 2e-3)   # at its roof: the busy power


def test_a_malformed_duty_curve_in_a_profile_is_a_one_line_profile_error():
    from carm_advisor.errors import ProfileError

    with pytest.raises(ProfileError, match="power_model.duty must hold numbers"):
        profile(duty={"gamma": 0.5})
    with pytest.raises(ProfileError, match="t_full_s > 0"):
        profile(duty={"t_full_s": -1, "gamma": 0.5})
    with pytest.raises(ProfileError, match="power_model.duty must be an object"):
        profile(duty=[1e-3, 0.5])
    with pytest.raises(ProfileError, match="duty curve variable must be one of"):
        profile(duty={"variable": "clock", "gamma": 0.5})


def test_a_duty_curve_round_trips_through_a_saved_profile(tmp_path):
    from carm_advisor.profiles.profile import load_profile

    p = profile(duty={"t_full_s": 4e-4, "gamma": 0.2, "source": "fitted on H200 layer records"})
    p.save(tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again.power_model.duty == p.power_model.duty
    assert (again.power_model.duty.t_full_s, again.power_model.duty.gamma) == (4e-4, 0.2)
    assert again.power_model.duty.source == "fitted on H200 layer records"


def test_a_tensor_core_duty_curve_round_trips_and_a_malformed_one_is_a_profile_error(tmp_path):
    from carm_advisor.errors import ProfileError
    from carm_advisor.profiles.profile import load_profile, profile_from_dict

    p = profile(duty={"t_full_s": 4e-4, "gamma": 0.2})
    doc = p.to_dict()
    doc["power_model"]["duty_tensor_core"] = {"variable": "efficiency", "gamma": 0.7}
    tc = profile_from_dict(doc)
    tc.save(tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again.power_model.duty_tensor_core.gamma == 0.7 and again.power_model.duty == p.power_model.duty
    assert p.power_model.duty_tensor_core is None and "duty_tensor_core" not in p.to_dict()["power_model"]
    doc["power_model"]["duty_tensor_core"] = [0.7]
    with pytest.raises(ProfileError, match="power_model.duty_tensor_core must be an object"):
        profile_from_dict(doc)


def test_path_duty_curves_round_trip_and_a_malformed_table_is_a_profile_error(tmp_path):
    from carm_advisor.errors import ProfileError
    from carm_advisor.profiles.profile import load_profile, profile_from_dict

    p = profile(duty={"t_full_s": 4e-4, "gamma": 0.2})
    doc = p.to_dict()
    doc["power_model"]["duty_by_path"] = {"tc_bf16": {"variable": "efficiency", "gamma": 0.7}}
    profile_from_dict(doc).save(tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json").power_model
    assert again.duty_by_path["tc_bf16"].gamma == 0.7 and again.duty == p.power_model.duty
    assert again.duty_curve_for("tc_bf16").gamma == 0.7 and again.duty_curve_for("tc_fp16") == p.power_model.duty
    assert "duty_by_path" not in p.to_dict()["power_model"]
    for bad in ({"tc_bf16": [0.7]}, [1]):
        doc["power_model"]["duty_by_path"] = bad
        with pytest.raises(ProfileError, match="power_model.duty_by_path must map each compute path"):
            profile_from_dict(doc)


def test_a_calibration_never_makes_a_layer_faster_than_its_bound():
    (row,) = Predictor(profile(), TORCH_MODE, calibration=FixedEfficiency(2.0)).rows_for_costs([matmul()])
    assert row.calibrated_time_s == pytest.approx(2e-3) and row.calibrated_energy_j == pytest.approx(0.226)


def test_without_calibration_rows_serialise_without_calibrated_keys():
    (row,) = Predictor(profile(), TORCH_MODE, calibration=FixedEfficiency(None)).rows_for_costs([matmul()])
    assert row.calibrated_time_s is None
    assert "calibrated_time_s" not in row.to_dict() and "calibrated_energy_j" not in row.to_dict()


def test_a_calibration_is_not_asked_about_layers_without_a_predicted_time():
    unknown = LayerCost(name="odd", type="Mystery", flops=0, bytes_read=0, bytes_written=0, compute_dtype="float32",
                        op_class=OP_ELEMENTWISE, tensor_core=False, known=False)
    calibration = FixedEfficiency(0.5)
    (row,) = Predictor(profile(), TORCH_MODE, calibration=calibration).rows_for_costs([unknown])
    assert calibration.asked == [] and row.calibrated_time_s is None


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan")])
def test_a_calibration_efficiency_that_is_not_positive_is_rejected(bad):
    with pytest.raises(ValueError, match="efficiency > 0"):
        Predictor(profile(), TORCH_MODE, calibration=FixedEfficiency(bad)).rows_for_costs([matmul()])


def test_model_predictor_changes_only_the_setting_it_is_asked_to():
    inputs = keras.Input(shape=(1024,))
    model = keras.Model(inputs, keras.layers.Dense(1024, use_bias=False, name="fc")(inputs))
    at_8 = Predictor(profile(), TORCH_MODE).for_model(model, batch_size=8, dtype="bfloat16")
    (base,) = at_8.rows()
    (bigger,) = at_8.rows(batch_size=32)
    (fp32,) = at_8.rows(dtype="float32")
    assert base.flops == 2 * 8 * 1024 * 1024 and base.dtype == "bfloat16"
    assert bigger.flops == 2 * 32 * 1024 * 1024 and bigger.dtype == "bfloat16"
    assert fp32.flops == base.flops and fp32.bytes == 2 * base.bytes and fp32.path == "fp32"


def test_predictor_is_a_lazy_public_name_of_the_package():
    assert "Predictor" in carm_advisor.__all__
    assert carm_advisor.Predictor is Predictor


def test_a_row_carries_the_elements_its_layer_writes():
    cost = LayerCost(name="mm", type="Dense", flops=10, bytes_read=10, bytes_written=0, compute_dtype="bfloat16",
                     op_class=OP_MATMUL, tensor_core=True, output_shapes=((8, 16, 16, 32), (8, 10)))
    (row,) = Predictor(profile(), TORCH_MODE).rows_for_costs([cost])
    assert row.output_elements == 8 * 16 * 16 * 32 + 8 * 10
    (unknown,) = Predictor(profile(), TORCH_MODE).rows_for_costs([matmul()])   # no shape recorded: 0
    assert unknown.output_elements == 0


# ---- the whole model's calibrated energy (Report.totals) ------------------------------------------------------

def _calibrated_report(layer_energies_j, whole_time_s, whole_power_w):
    from carm_advisor.report.model import Report
    from carm_advisor.results import DeviceInfo, LayerRow, ModelInfo

    rows = [LayerRow(name=f"l{i}", type="Dense", dtype="float32", flops=1000, bytes=1000, ai=1.0,
                     ai_source="analytic", path="fp32", level="hbm", bound="memory:hbm", attainable_flops_per_s=1e11,
                     predicted_time_s=1e-6, predicted_energy_j=1e-4, tensor_core=False, known=True,
                     calibrated_time_s=40e-6, calibrated_energy_j=e) for i, e in enumerate(layer_energies_j)]
    return Report(model=ModelInfo("m", 64, "float32", "channels_last", "jax", {}),
                  device=DeviceInfo("GPU", "profile", "GPU", "recorded", {}), ceilings={}, layers=rows,
                  recommendations=[], calibration={"execution": "jit", "whole_time_s": whole_time_s,
                                                   "whole_power_w": whole_power_w})


def test_the_whole_model_calibrated_energy_is_its_calibrated_power_over_its_calibrated_time():
    # The review's jax case: the model's calibrated time is 115 us (one jitted call), its predicted whole-model power
    # 180 W; its layers, each calibrated alone, sum to 0.150 J. Energy = 180 W x 115 us = 0.0207 J, not 0.150 J
    # (0.150 J / 115 us would be 1,304 W, above a 700 W board).
    t = _calibrated_report([0.05, 0.06, 0.04], 115e-6, 180.0).totals()
    assert t["calibrated_energy_j"] == pytest.approx(0.0207)
    assert t["calibrated_energy_j"] / t["calibrated_time_s"] == pytest.approx(180.0)
    assert t["calibrated_power_w"] == pytest.approx(180.0)
    assert t["calibrated_layer_energy_sum_j"] == pytest.approx(0.15)   # the layers' own sum, named apart
    assert t["energy_j"] == pytest.approx(0.0207)                       # the headline agrees


def test_no_whole_model_calibrated_energy_without_a_whole_model_power():
    t = _calibrated_report([0.05], 115e-6, None).totals()
    assert t["calibrated_energy_j"] is None and t["calibrated_layer_energy_sum_j"] == pytest.approx(0.05)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_calibrated_energy_over_calibrated_time_is_a_power_between_the_constant_power_and_the_cap(tmp_path, backend):
    """The invariant on the embedded H200 profile and the shipped calibration, as a user runs the CLI."""
    import importlib.util
    import json
    import os
    import subprocess
    import sys

    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed here")
    inputs = keras.Input((64,), dtype="int32")
    x = keras.layers.Embedding(1000, 128)(inputs)
    x = keras.layers.MultiHeadAttention(num_heads=4, key_dim=32, name="mha")(x, x)
    x = keras.layers.Dense(512, activation="gelu", name="ff1")(x)
    outputs = keras.layers.Dense(2, activation="softmax", name="head")(keras.layers.GlobalAveragePooling1D()(x))
    path = tmp_path / "enc.keras"
    keras.Model(inputs, outputs, name="enc").save(path)
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", "analyze", str(path), "--batch-size", "64",
                           "--no-measure", "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                          env={**os.environ, "KERAS_BACKEND": backend}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "r.json").read_text())
    t, pm = d["totals"], carmadvisor_power_model()
    assert t["calibrated_time_s"] and t["calibrated_energy_j"], t
    power_w = t["calibrated_energy_j"] / t["calibrated_time_s"]
    assert pm.constant_w <= power_w <= pm.power_limit_w
    assert t["calibrated_energy_j"] == pytest.approx(d["calibration"]["whole_power_w"] * t["calibrated_time_s"])


def carmadvisor_power_model():
    from carm_advisor.profiles.profile import load_profile

    return load_profile().power_model
