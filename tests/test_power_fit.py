"""The sweep power fit, the clock model and the energy-optimal clock, against a synthetic GPU whose
parameters the tests set (observations generated here from those parameters, by the formulas written
out in this file), and against hand calculations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from carm_advisor.carm.dvfs import Work, energy_optimal_sm_clock_mhz, energy_ridge_ai, predict_at_clock
from carm_advisor.carm.power_fit import PowerRecord, fit_power_sweep, nnls, records_from_benchmarks
from carm_advisor.carm.power_model import PowerModel, VoltageCurve
from carm_advisor.carm.roofline import CARM
from carm_advisor.errors import ProfileError

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"

# The synthetic GPU: every figure the fit must recover.
F0, KNEE, V_KNEE = 2000.0, 1200.0, 0.60   # not the prior (knee at F0/2, 0.70)
CONST_W = 100.0
E_FLOP = {"tc_bf16": 0.7e-12, "fp32": 2.0e-12}
ZERO_FACTOR = {"tc_bf16": 0.25}
E_BYTE = {"hbm": 90e-12, "l2": 40e-12, "shared": 5e-12}
PEAK = {"tc_bf16": 900e12, "fp32": 64e12}        # at F0
BANDWIDTH = {"hbm": 4.6e12, "l2": 9.0e12, "shared": 33e12}


def v_of(f):   # the voltage curve, written out: flat below the knee, linear to 1 at F0
    return V_KNEE if f <= KNEE else V_KNEE + (1 - V_KNEE) * (f - KNEE) / (F0 - KNEE)


def v_hand(f):   # the curve of the hand calculations below: knee 1000 MHz at 0.7, 1 at 2000 MHz
    return 0.7 if f <= 1000 else 0.7 + 0.3 * (f - 1000) / 1000


def synthetic_power_w(path, level, flops_per_s, bytes_per_s, f, data="random"):
    s = v_of(f) ** 2
    flop_w = s * E_FLOP[path] * (ZERO_FACTOR.get(path, 1.0) if data == "zero" else 1.0) * flops_per_s if path else 0.0
    byte_w = (1.0 if level == "hbm" else s) * E_BYTE[level] * bytes_per_s if level else 0.0
    return CONST_W + flop_w + byte_w


def synthetic_sweep(mixed=True):
    """Roof rows and, optionally, mixed rows of the synthetic GPU at clocks from 1200 to 2000 MHz."""
    rows = []
    for f in (2000.0, 1800.0, 1600.0, 1400.0, 1200.0):
        k = f / F0
        for path in E_FLOP:
            for data in ("random", "zero") if path in ZERO_FACTOR else ("random",):
                rows.append(PowerRecord(f"{path}-{data}-{f:.0f}", path, None, PEAK[path] * k, 0.0,
                                        synthetic_power_w(path, None, PEAK[path] * k, 0.0, f, data), f, data, 1.0))
        for level in E_BYTE:
            b = BANDWIDTH[level] * (1.0 if level == "hbm" else k)
            rows.append(PowerRecord(f"{level}-{f:.0f}", None, level, 0.0, b, synthetic_power_w(None, level, 0.0, b, f), f,
                                    "random", 1.0))
        if mixed:
            for level in E_BYTE:
                for ai in (0.5, 2.0, 8.0):
                    b = BANDWIDTH[level] * (1.0 if level == "hbm" else k)
                    fl = min(PEAK["fp32"] * k, b * ai)
                    by = fl / ai
                    rows.append(PowerRecord(f"mix-{level}-{ai}-{f:.0f}", "fp32", level, fl, by,
                                            synthetic_power_w("fp32", level, fl, by, f), f, "random", 1.0))
    return rows


def test_nnls_fallback_matches_a_hand_solved_constrained_problem():
    # Unconstrained least squares gives (2, -1); with x >= 0, x2 = 0 and x1 minimises (x1-2)^2 + (x1-1)^2: 1.5.
    a = [[1, 0], [0, 1], [1, 1]]
    x, _ = nnls(a, [2, -1, 1])
    assert x == pytest.approx([1.5, 0.0], abs=1e-12)


def test_nnls_agrees_with_scipy_on_random_problems_with_active_constraints():
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(7)
    for _ in range(20):
        a, b = rng.normal(size=(30, 8)), rng.normal(size=30)
        ours, theirs = nnls(a, b)[0], optimize.nnls(a, b)[0]
        assert ours == pytest.approx(theirs, abs=1e-8)
        assert (ours == 0).any()       # some constraints active: the case the active set exists for


def test_nnls_fallback_equals_unconstrained_least_squares_when_the_solution_is_positive():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.1, 1.0, (20, 4))
    truth = np.array([1.0, 2.0, 0.5, 3.0])
    x, _ = nnls(a, a @ truth)
    assert x == pytest.approx(truth, rel=1e-9)


def test_sweep_fit_recovers_the_synthetic_gpu_parameters_voltage_curve_and_zero_data_factor():
    fit = fit_power_sweep(synthetic_sweep(), idle_w=None, f0_mhz=F0)
    assert fit.constant_source == "fitted"
    assert fit.constant_w == pytest.approx(CONST_W, rel=1e-6)
    for path, e in E_FLOP.items():
        assert fit.joules_per_flop[path] == pytest.approx(e, rel=1e-6)
    for level, e in E_BYTE.items():
        assert fit.joules_per_byte[level] == pytest.approx(e, rel=1e-6)
    assert fit.data_factor["tc_bf16"]["zero"] == pytest.approx(0.25, rel=1e-6)
    assert fit.voltage.source == "fitted"
    # The clocks seen (1200-2000 MHz) pin the curve there, not below its lowest clock: a knee at 1000 MHz
    # and 0.50 draws the same line over 1200-2000 MHz as the true one (1200 MHz, 0.60), and which of such
    # exact ties the grid keeps depends on float rounding (numpy 2.4 keeps the 1000 MHz one).
    for f in np.linspace(1200.0, 2000.0, 9):
        assert fit.voltage.relative_voltage(f) == pytest.approx(v_of(f), rel=1e-9)
    assert fit.voltage.f_knee_mhz <= KNEE * (1 + 1e-9)   # the knee itself or below it, up to float rounding
    assert fit.quality["r2"] == pytest.approx(1.0, abs=1e-9)
    assert fit.quality["max_abs_rel_err"] < 1e-6


def test_sweep_fit_fixes_the_constant_to_idle_power_when_no_record_mixes_a_path_and_a_level():
    rows = [r for r in synthetic_sweep(mixed=False) if r.sm_clock_mhz == F0]
    fit = fit_power_sweep(rows, idle_w=CONST_W, f0_mhz=F0)
    assert fit.constant_source == "idle power"
    assert fit.constant_w == CONST_W
    assert fit.joules_per_flop["fp32"] == pytest.approx(E_FLOP["fp32"], rel=1e-6)
    assert fit.voltage.source == "assumed"        # one clock only: nothing to fit a voltage curve on
    with pytest.raises(ProfileError, match="idle power"):
        fit_power_sweep(rows, idle_w=None, f0_mhz=F0)


def test_sweep_fit_leaves_out_short_windows_and_unphysical_power():
    rows = [r for r in synthetic_sweep(mixed=False) if r.sm_clock_mhz == F0]
    bad = [PowerRecord("short", "fp32", None, 1e12, 0.0, 1478.0, F0, "random", 0.05),
           PowerRecord("zero-power", "fp32", None, 1e12, 0.0, 0.0, F0, "random", 1.0)]
    fit = fit_power_sweep(rows + bad, idle_w=CONST_W, f0_mhz=F0, power_limit_w=700.0)
    assert fit.quality["n"] == len(rows)
    assert fit.joules_per_flop["fp32"] == pytest.approx(E_FLOP["fp32"], rel=1e-6)


def _model(limit=None):
    return PowerModel(constant_w=CONST_W, joules_per_flop=dict(E_FLOP), joules_per_byte=dict(E_BYTE),
                      power_limit_w=limit, data_factor={p: {"zero": z} for p, z in ZERO_FACTOR.items()},
                      voltage=VoltageCurve(F0, KNEE, V_KNEE, "fitted"))


def test_power_at_a_clock_and_on_zero_data_follow_the_synthetic_formula():
    pm = _model()
    assert pm.power_w(450e12, 1e12, "tc_bf16", "l2", sm_clock_mhz=1500.0) == pytest.approx(
        synthetic_power_w("tc_bf16", "l2", 450e12, 1e12, 1500.0))
    assert pm.power_w(450e12, 0.0, "tc_bf16", "hbm", data="zero") == pytest.approx(
        synthetic_power_w("tc_bf16", "hbm", 450e12, 0.0, F0, "zero"))


def test_a_profile_without_voltage_or_data_factor_predicts_as_before():
    pm = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 2e-12}, joules_per_byte={"hbm": 1e-10})
    assert pm.power_w(1e13, 1e12, "fp32", "hbm", sm_clock_mhz=1000.0, data="zero") == pytest.approx(100 + 20 + 100)


def test_energy_optimal_clock_of_a_compute_bound_layer_is_the_hand_calculated_knee():
    # 1e15 FLOPs on a 1e15 FLOP/s roof at F0 = 2000 MHz: t(f) = 2000/f s; P(f) = 100 + v(f)^2 * 500 W (f/F0)
    # so E(f) = 100 * 2000 / f + 500 v(f)^2. Below the knee E falls with f; just above it dE/df =
    # -200000/f^2 + 500 * 2 v * 0.3/1000 = -0.2 + 0.21 > 0 at f = 1000: the optimum is the knee,
    # E = 200 + 0.49 * 500 = 445 J against 100 + 500 = 600 J at 2000 MHz.
    carm = CARM({"fp32": 1e15}, {"hbm": 1e15})
    pm = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 0.5e-12}, joules_per_byte={"hbm": 0.0},
                    voltage=VoltageCurve(2000.0, 1000.0, 0.7))
    best = energy_optimal_sm_clock_mhz(carm, pm, Work(1e15, 1.0, "fp32", "hbm"), clocks_mhz=range(600, 2001, 50))
    assert best.sm_clock_mhz == 1000
    assert best.at_optimum.energy_j == pytest.approx(445.0, rel=1e-6)
    assert best.at_default.energy_j == pytest.approx(600.0, rel=1e-6)
    assert best.energy_gain == pytest.approx(600 / 445, rel=1e-6)
    assert best.slowdown == pytest.approx(2.0, rel=1e-6)
    brute = min(range(600, 2001, 50), key=lambda f: 100 * 2000 / f + 500 * v_hand(f) ** 2)
    assert brute == best.sm_clock_mhz


def test_power_limit_lowers_the_sustained_clock_until_power_equals_the_limit():
    carm = CARM({"fp32": 1e15}, {"hbm": 1e15})
    pm = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 0.5e-12}, joules_per_byte={"hbm": 0.0},
                    power_limit_w=400.0, voltage=VoltageCurve(2000.0, 1000.0, 0.7))
    p = predict_at_clock(carm, pm, Work(1e15, 1.0, "fp32", "hbm"), 2000.0)
    assert p.power_capped and p.power_w == pytest.approx(400.0, rel=1e-9)
    f = p.sm_clock_mhz   # 100 + v(f)^2 (f/2000) 500 = 400, between 1500 (1083.75 < 1200) and 1600 (1239 > 1200)
    assert 1500 < f < 1600
    assert 100 + v_hand(f) ** 2 * f / 2000 * 500 == pytest.approx(400.0, rel=1e-9)
    assert p.time_s == pytest.approx(2000 / f, rel=1e-9)


def test_hbm_bound_work_keeps_its_time_when_the_sm_clock_drops():
    carm = CARM({"fp32": 1e15}, {"hbm": 1e12})
    pm = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 1e-12}, joules_per_byte={"hbm": 1e-10},
                    voltage=VoltageCurve(2000.0, 1000.0, 0.7))
    hi = predict_at_clock(carm, pm, Work(1e12, 1e12, "fp32", "hbm"), 2000.0)
    lo = predict_at_clock(carm, pm, Work(1e12, 1e12, "fp32", "hbm"), 1000.0)
    assert hi.time_s == lo.time_s == pytest.approx(1.0)
    # FLOP energy at 1000 MHz is 0.49 of that at 2000; HBM energy per byte does not scale.
    assert hi.power_w - lo.power_w == pytest.approx(1.0 * (1 - 0.49))


def test_energy_ridge_is_the_energy_balance_point():
    carm = CARM({"fp32": 50e12}, {"hbm": 5e12})
    pm = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 2e-12}, joules_per_byte={"hbm": 80e-12})
    # e_byte / (e_flop + P_const / peak) = 80e-12 / (2e-12 + 2e-12) = 20 FLOP/B (performance ridge: 10)
    assert energy_ridge_ai(carm, pm, "fp32", "hbm") == pytest.approx(20.0)


def test_fit_over_the_recorded_h200_run_explains_the_zero_and_random_bf16_wgmma_rows():
    doc = json.loads((RESULTS / "nvidia-h200-ceilings-2026-12-02.json").read_text())
    records = records_from_benchmarks(doc["benchmarks"])
    idle = doc["power_model"]["constant_w"]
    fit = fit_power_sweep(records, idle, 1980.0, 700.0)
    # Mixed rows carry 0.05-0.1 s windows: none is trusted; 28 roof rows and hbm_read_bulk remain.
    assert fit.quality["n"] == 29 and all(not r.name.startswith("mix_") for r in fit.records)
    assert fit.constant_source == "idle power"
    rand = next(b for b in doc["benchmarks"] if b["name"] == "tc_bf16_wgmma_rand")
    zero = next(b for b in doc["benchmarks"] if b["name"] == "tc_bf16_wgmma_zero")

    def v(f):   # the prior voltage curve: 0.70 below 990 MHz, linear to 1 at 1980
        return 0.7 + 0.3 * max(0.0, f - 990) / 990

    e_rand = (rand["power_w"] - idle) / (v(rand["sm_clock_mhz"]) ** 2 * rand["flops_per_s"])
    e_zero = (zero["power_w"] - idle) / (v(zero["sm_clock_mhz"]) ** 2 * zero["flops_per_s"])
    assert fit.joules_per_flop["tc_bf16"] == pytest.approx(e_rand, rel=1e-6)
    assert fit.data_factor["tc_bf16"]["zero"] == pytest.approx(e_zero / e_rand, rel=1e-6)
    assert 0.15 < fit.data_factor["tc_bf16"]["zero"] < 0.3   # 261 W vs 684 W on the card


def test_voltage_curve_is_recovered_from_the_clocks_work_sustains_under_the_power_cap():
    from carm_advisor.carm.power_fit import CappedClock, fit_voltage_to_capped_clocks

    limit = 800.0     # above every sweep row (a real sweep never reads far above the limit), below two works
    sweep = [r for r in synthetic_sweep(mixed=False) if r.sm_clock_mhz == F0]   # energies only: no clock leverage

    def capped_clock(scaled_w, hbm_w=0.0):
        # Compute-bound work at the cap: 100 + v(f)^2 (f/F0) scaled_w + (f/F0) hbm_w = limit (HBM energy per
        # byte does not scale with the SM voltage; its byte rate follows the compute rate). Bisection here.
        lo, hi = 1.0, F0
        for _ in range(80):
            mid = (lo + hi) / 2
            power = CONST_W + v_of(mid) ** 2 * mid / F0 * scaled_w + mid / F0 * hbm_w
            lo, hi = (mid, hi) if power <= limit else (lo, mid)
        return lo

    bf16 = PEAK["tc_bf16"] * E_FLOP["tc_bf16"]                 # 630 W at F0
    l2 = BANDWIDTH["l2"] * E_BYTE["l2"]                         # 360 W
    hbm = BANDWIDTH["hbm"] * E_BYTE["hbm"]                      # 414 W
    observations = [CappedClock(PEAK["tc_bf16"], BANDWIDTH["l2"], "tc_bf16", "l2", capped_clock(bf16 + l2)),
                    CappedClock(PEAK["tc_bf16"], BANDWIDTH["hbm"], "tc_bf16", "hbm", capped_clock(bf16, hbm))]
    fit, err_mhz = fit_voltage_to_capped_clocks(sweep, CONST_W, F0, limit, CARM(PEAK, BANDWIDTH), observations)
    assert err_mhz < 1e-3
    # The capped clocks (about 1650-1800 MHz) lie above every candidate knee: they fix the slope of the curve,
    # (1 - 0.6) / (2000 - 1200) = 0.0005 per MHz, and the voltage at those clocks; of the curves that agree
    # there, the knee nearest the prior's (F0 / 2 = 1000 MHz) is kept: (1000 MHz, 0.5).
    v = fit.voltage
    assert (1 - v.v_knee) / (F0 - v.f_knee_mhz) == pytest.approx((1 - V_KNEE) / (F0 - KNEE), rel=1e-9)
    assert (v.f_knee_mhz, v.v_knee) == pytest.approx((1000.0, 0.5), rel=1e-9)
    for o in observations:
        assert v.relative_voltage(o.sm_clock_mhz) == pytest.approx(v_of(o.sm_clock_mhz), rel=1e-6)


def test_benchmark_rows_say_which_run_on_zero_operands():
    rows = [{"name": "tc_bf16_wgmma_zero", "kind": "compute", "key": "tc_bf16", "variant": "zero", "power_w": 261.0,
             "flops_per_s": 9.5e14, "bytes_per_s": 0.0, "sm_clock_mhz": 1921.0, "extra": {"window_s": [1.05]}},
            {"name": "mix_bf16_wgmma_hbm_c8", "kind": "mixed", "key": "tc_bf16", "memory_key": "hbm",
             "variant": "wgmma-c8", "power_w": 600.0, "flops_per_s": 5.9e14, "bytes_per_s": 4.6e12,
             "sm_clock_mhz": 1980.0, "extra": {"window_s": [1.1]}},
            {"name": "hbm_read", "kind": "memory", "key": "hbm", "variant": "read", "power_w": 612.0,
             "flops_per_s": 1e9, "bytes_per_s": 4.65e12, "sm_clock_mhz": 1980.0, "extra": {"window_s": [1.1]}},
            {"name": "mix_fp32_l2_c4", "kind": "mixed", "key": "fp32", "memory_key": "l2", "variant": "c4",
             "power_w": None, "flops_per_s": 1.7e13, "bytes_per_s": 8.7e12, "sm_clock_mhz": 1980.0, "extra": {}}]
    recs = {r.name: r for r in records_from_benchmarks(rows)}
    assert set(recs) == {"tc_bf16_wgmma_zero", "mix_bf16_wgmma_hbm_c8", "hbm_read"}   # no power: no record
    assert recs["tc_bf16_wgmma_zero"].data == recs["mix_bf16_wgmma_hbm_c8"].data == "zero"
    assert recs["hbm_read"].data == "random"
    # A memory row's address arithmetic is no compute path: all its power is charged to its bytes.
    assert (recs["hbm_read"].path, recs["hbm_read"].flops_per_s, recs["hbm_read"].level) == (None, 0.0, "hbm")
    assert (recs["mix_bf16_wgmma_hbm_c8"].path, recs["mix_bf16_wgmma_hbm_c8"].level) == ("tc_bf16", "hbm")
    assert recs["tc_bf16_wgmma_zero"].window_s == 1.05


def test_layer_prediction_goes_through_the_sustained_clock_when_the_model_has_a_voltage_curve():
    from carm_advisor.carm.dvfs import predicted_time_energy

    carm = CARM({"fp32": 1e15}, {"hbm": 1e15})
    blind = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 0.5e-12}, joules_per_byte={"hbm": 0.0},
                       power_limit_w=400.0)
    aware = PowerModel(constant_w=100.0, joules_per_flop={"fp32": 0.5e-12}, joules_per_byte={"hbm": 0.0},
                       power_limit_w=400.0, voltage=VoltageCurve(2000.0, 1000.0, 0.7))
    # Clock-blind: 500 J of dynamic energy at most 300 W above the constant: 5/3 s, 400 W throughout.
    assert predicted_time_energy(carm, blind, 1e15, 1.0, "fp32", "hbm") == pytest.approx((5 / 3, 400 * 5 / 3))
    # With the curve the clock falls to f where 100 + v(f)^2 (f/2000) 500 = 400: time 2000/f, still 400 W.
    time_s, energy_j = predicted_time_energy(carm, aware, 1e15, 1.0, "fp32", "hbm")
    f = 2000 / time_s
    assert 100 + v_hand(f) ** 2 * f / 2000 * 500 == pytest.approx(400.0, rel=1e-9)
    assert energy_j == pytest.approx(400.0 * time_s, rel=1e-9)
    assert time_s < 5 / 3      # lower voltage makes each FLOP cheaper: less slowdown than the clock-blind stretch
