"""Roof selection, per-clock maxima, the power-model fit and the sweep fitness (carm/fitting.py) on plain
benchmark runs, against hand calculations."""

import pytest

from carm_advisor.carm import fitting as F


def test_best_runs_keep_the_highest_variant_as_the_roof():
    runs = [F.BenchmarkRun("a", "compute", "tc_bf16", "", "rand", 600e12, 0, 3, None, None, 0.1),
            F.BenchmarkRun("b", "compute", "tc_bf16", "", "zero", 800e12, 0, 3, None, None, 0.1),
            F.BenchmarkRun("c", "memory", "hbm", "hbm", "copy", 3.5e12, 0, 3, None, None, 0.1)]
    best = F.best_runs(runs)
    assert best["tc_bf16"].name == "b" and best["hbm"].name == "c"


def test_per_clock_maximum_of_hopper_fp32():
    # 132 SMs x 256 FLOP/clk x 1980 MHz = 66.9 TFLOP/s (the H100/H200 datasheet's 67)
    assert F.per_clock_max("fp32", 90, 132, 1980) == pytest.approx(132 * 256 * 1980e6)
    assert F.per_clock_max("fp32", 75, 132, 1980) is None


def test_power_model_fit_is_dynamic_power_over_rate():
    runs = [F.BenchmarkRun("r", "compute", "tc_bf16", "", "rand", 600e12, 0, 3, 700.0, 1500, 0.1, flops_per_s=600e12),
            F.BenchmarkRun("z", "compute", "tc_bf16", "", "zero", 800e12, 0, 3, 500.0, 1900, 0.1, flops_per_s=800e12),
            F.BenchmarkRun("h", "memory", "hbm", "hbm", "read", 4e12, 0, 3, 500.0, 1980, 0.1, bytes_per_s=4e12)]
    pm = F.fit_power_model(runs, idle_w=100.0, power_limit_w=700.0)
    assert pm["joules_per_flop"] == {"tc_bf16": pytest.approx(600 / 600e12)}   # zero-data run ignored
    assert pm["joules_per_byte"]["hbm"] == pytest.approx(400 / 4e12)
    assert pm["constant_w"] == 100.0


def test_sweep_fitness_counts_points_within_ten_percent_of_min_roofs():
    runs = [F.BenchmarkRun("m1", "mixed", "fp32", "hbm", "c8", 0, 0, 1, None, None, 0.1, flops_per_s=14.5e12, intensity=4.0),
            F.BenchmarkRun("m2", "mixed", "fp32", "hbm", "c64", 0, 0, 1, None, None, 0.1, flops_per_s=40e12, intensity=64.0)]
    fit = F.sweep_fitness(runs, {"fp32": 60e12}, {"hbm": 4e12})
    # m1: min(60, 4*4=16) -> 14.5/16 = 0.906 (within); m2: min(60, 256) = 60 -> 0.667 (outside)
    assert fit["fitness"] == pytest.approx(0.5)
    assert [round(p["ratio"], 3) for p in fit["points"]] == [0.906, 0.667]


def test_sweep_fitness_takes_the_fastest_implementation_of_each_point_and_flags_any_above_the_roofs():
    mk = lambda name, ai, f: F.BenchmarkRun(name, "mixed", "fp32", "hbm", name, 0, 0, 1, None, None, 0.1,  # noqa: E731
                                            flops_per_s=f, intensity=ai)
    runs = [mk("plain_c8", 4.0, 12e12), mk("pipe_c8", 4.0, 15e12),      # bound 16e12: 0.75 and 0.9375
            mk("plain_c64", 64.0, 50e12), mk("pipe_c64", 64.0, 70e12)]  # bound 60e12: 0.833 and 1.167 (a bug)
    fit = F.sweep_fitness(runs, {"fp32": 60e12}, {"hbm": 4e12})
    assert fit["sweep_points"] == 2
    assert fit["fitness"] == pytest.approx(0.5)          # pipe_c8 within 10%, pipe_c64 above by 17%
    assert fit["missed"] == ["pipe_c64"] and fit["above_roofs"] == ["pipe_c64"]
    assert [p["stands_for_point"] for p in fit["points"]] == [False, True, False, True]
