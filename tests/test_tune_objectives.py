"""Objectives against hand arithmetic; the search space against what is installed."""

import math

import pytest

from carm_advisor.trials.runner import Measurement
from carm_advisor.trials.space import SearchSpace, TrialConfig, baseline_config, installed_backends
from carm_advisor.tune.objectives import OBJECTIVES, get_objective
from carm_advisor.tune.study import resolve_objectives

# 50 samples in 0.5 s for 100 J, 2e12 FLOPs per batch.
M = Measurement(time_s=0.5, energy_j=100.0, flops=2e12, batch_size=50, source="fake")


def test_each_objective_matches_hand_arithmetic():
    assert OBJECTIVES["gflops_per_watt"].value(M) == pytest.approx(20.0)      # 2e12 / 100 J / 1e9
    assert OBJECTIVES["samples_per_joule"].value(M) == pytest.approx(0.5)     # 50 / 100
    assert OBJECTIVES["throughput"].value(M) == pytest.approx(100.0)          # 50 / 0.5
    assert OBJECTIVES["latency"].value(M) == pytest.approx(0.5)
    assert OBJECTIVES["edp"].value(M) == pytest.approx(0.02)                  # (100/50) * (0.5/50)


def test_directions_and_gain_are_better_when_larger_for_maximise_and_smaller_for_minimise():
    assert OBJECTIVES["gflops_per_watt"].gain(30.0, 20.0) == pytest.approx(1.5)
    assert OBJECTIVES["edp"].gain(0.01, 0.02) == pytest.approx(2.0)
    assert OBJECTIVES["latency"].better(0.1, 0.2) and not OBJECTIVES["throughput"].better(1.0, 2.0)
    assert OBJECTIVES["edp"].select([0.3, 0.1, float("nan"), 0.2]) == 1


def test_energy_objectives_without_an_energy_figure_are_nan_not_a_number_pretending():
    no_energy = Measurement(time_s=0.5, energy_j=None, flops=1e9, batch_size=1, source="measured")
    assert math.isnan(OBJECTIVES["samples_per_joule"].value(no_energy))


def test_unknown_objective_and_pareto_pairing():
    with pytest.raises(ValueError, match="objective must be one of"):
        get_objective("joules")
    assert [o.name for o in resolve_objectives("gflops_per_watt", pareto=True)] == ["gflops_per_watt", "throughput"]
    assert [o.name for o in resolve_objectives(["samples_per_joule", "latency"])] == ["samples_per_joule", "latency"]


def test_space_offers_only_installed_backends(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    assert "jax" not in installed_backends()
    with pytest.raises(ValueError, match="jax is not installed"):
        SearchSpace.default(backends=("jax",))
    space = SearchSpace.default()
    assert "jax" not in space.backends


def test_compile_choices_are_per_backend_and_equivalent_precisions_share_a_key():
    space = SearchSpace(backends=("torch", "jax"), precisions=("float32", "float32_tf32"), batch_sizes=(32,),
                        layouts=("channels_last",))
    keys = {c.key for c in space.grid()}
    # torch: 2 precisions x (eager, torch.compile); jax: float32 == float32_tf32 (XLA's default is TF32), xla only.
    assert keys == {"torch/float32/b32/channels_last/eager/auto", "torch/float32/b32/channels_last/torch.compile/auto",
                    "torch/float32_tf32/b32/channels_last/eager/auto",
                    "torch/float32_tf32/b32/channels_last/torch.compile/auto", "jax/float32/b32/channels_last/xla/auto"}


def test_baseline_is_keras_defaults():
    b = baseline_config("torch")
    assert (b.precision, b.batch_size, b.layout, b.compiler) == ("float32", 32, "channels_last", "eager")
    assert TrialConfig.from_dict(b.to_dict()) == b


def test_advisor_tune_is_callable_even_after_the_tune_package_is_imported():
    import carm_advisor
    import carm_advisor.trials.space  # noqa: F401  (binds the package to carm_advisor.tune)
    from carm_advisor.tune.study import tune as tune_function

    assert callable(carm_advisor.tune)
    assert carm_advisor.tune.tune is tune_function
