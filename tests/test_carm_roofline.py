import math

import pytest

from carm_advisor.carm.power_model import PowerModel, gflops_per_watt
from carm_advisor.carm.roofline import CARM
from carm_advisor.errors import ProfileError

# A round-number CARM so every expectation is a hand calculation.
PEAKS = {"fp32": 50e12, "tc_bf16": 800e12}
SLOPES = {"hbm": 4e12, "l2": 10e12, "shared": 30e12}


@pytest.fixture
def carm():
    return CARM(PEAKS, SLOPES)


def test_attainable_is_slope_times_ai_below_the_ridge(carm):
    assert carm.attainable_flops_per_s(10, "tc_bf16", "hbm") == pytest.approx(40e12)  # 4e12 B/s * 10 F/B


def test_attainable_is_the_roof_above_the_ridge(carm):
    assert carm.attainable_flops_per_s(1000, "tc_bf16", "hbm") == pytest.approx(800e12)


def test_ridge_is_roof_over_slope(carm):
    assert carm.ridge_ai("tc_bf16", "hbm") == pytest.approx(200.0)   # 800e12 / 4e12
    assert carm.ridge_ai("fp32", "l2") == pytest.approx(5.0)         # 50e12 / 10e12


def test_bound_switches_at_the_ridge(carm):
    assert carm.place(199.0, "tc_bf16", "hbm").bound == "memory:hbm"
    assert carm.place(201.0, "tc_bf16", "hbm").bound == "compute:tc_bf16"


def test_time_is_the_slower_of_compute_and_traffic(carm):
    # 1e12 FLOPs on fp32 take 0.02 s; 1e9 bytes from HBM take 0.00025 s -> compute wins
    assert carm.time_s(1e12, 1e9, "fp32", "hbm") == pytest.approx(0.02)
    # 1e9 FLOPs take 2e-5 s; 4e9 bytes take 1e-3 s -> memory wins
    assert carm.time_s(1e9, 4e9, "fp32", "hbm") == pytest.approx(1e-3)


def test_efficiency_and_headroom_of_a_measured_point(carm):
    p = carm.place(10, "tc_bf16", "hbm", achieved_flops_per_s=20e12)
    assert p.efficiency == pytest.approx(0.5)   # 20 of the 40 TFLOP/s the HBM slope allows at AI 10
    assert p.headroom == pytest.approx(2.0)


def test_nearest_roof_above_picks_the_lowest_roof_over_the_point(carm):
    # At AI 2: slopes give hbm 8, l2 20, shared 60 TFLOP/s; roofs 50 and 800.
    assert carm.nearest_roof_above(2, 15e12) == ("memory:l2", pytest.approx(20e12))
    assert carm.nearest_roof_above(2, 55e12) == ("memory:shared", pytest.approx(60e12))
    assert carm.nearest_roof_above(2, 900e12) is None  # above every roof: a bug to flag


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "fast"])
def test_invalid_ceilings_are_profile_errors(bad):
    with pytest.raises(ProfileError):
        CARM({"fp32": bad}, SLOPES)


def test_unknown_path_names_what_exists(carm):
    with pytest.raises(ProfileError, match="fp32, tc_bf16"):
        carm.attainable_flops_per_s(1, "tc_fp8_e4m3", "hbm")


def test_power_model_adds_constant_flop_and_byte_power():
    pm = PowerModel(constant_w=100, joules_per_flop={"tc_bf16": 1e-12}, joules_per_byte={"hbm": 50e-12}, power_limit_w=700)
    # 100 W + 1e-12 J * 400e12 /s + 50e-12 J * 2e12 B/s = 100 + 400 + 100
    assert pm.power_w(400e12, 2e12, "tc_bf16", "hbm") == pytest.approx(600.0)


def test_power_limit_stretches_time():
    pm = PowerModel(constant_w=100, joules_per_flop={"tc_bf16": 1e-12}, joules_per_byte={"hbm": 0.0}, power_limit_w=700)
    # 1e15 FLOPs need 1000 J of dynamic energy; 600 W of headroom -> at least 1.6667 s, though the roof allows 1 s
    assert pm.capped_time_s(1.0, 1e15, 0, "tc_bf16", "hbm") == pytest.approx(1000 / 600)
    # Below the cap the roofs' time stands.
    assert pm.capped_time_s(2.0, 1e15, 0, "tc_bf16", "hbm") == pytest.approx(2.0)


def test_energy_is_constant_power_times_time_plus_dynamic():
    pm = PowerModel(constant_w=100, joules_per_flop={"fp32": 10e-12}, joules_per_byte={"l2": 10e-12})
    assert pm.energy_j(0.5, 1e12, 1e10, "fp32", "l2") == pytest.approx(50 + 10 + 0.1)


def test_power_limit_must_exceed_constant_power():
    with pytest.raises(ProfileError):
        PowerModel(constant_w=300, power_limit_w=200)


def test_gflops_per_watt_is_gflop_per_joule():
    assert gflops_per_watt(2e12, 4.0) == pytest.approx(500.0)
