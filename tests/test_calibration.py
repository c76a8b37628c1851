"""Calibration: efficiencies by key with fallbacks, calibrated times, whole-model fit (hand numbers)."""

from types import SimpleNamespace

import pytest

from carm_advisor.calibration import Calibration, Sample, WholeSample, apply_calibration, shipped_calibration, size_bucket
from carm_advisor.errors import ProfileError


def _s(eff, dtype="bfloat16", bound=1e-4, cls="Conv2D", backend="torch", model="m"):
    return Sample(backend, cls, dtype, bound, bound / eff, model)


@pytest.fixture
def calib():
    return Calibration([_s(0.2), _s(0.4), _s(0.6), _s(0.5, "float32"), _s(0.7, "float32", model="other")])


def test_size_buckets_are_half_decades_of_the_bound():
    assert size_bucket(1e-4) == -8          # 2 * -4
    assert size_bucket(3.2e-4) == -7        # 2 * log10(3.2e-4) = -6.99
    assert size_bucket(1e-3) == -6


def test_the_finest_key_with_three_samples_wins(calib):
    found = calib.estimate("torch", "Conv2D", "bfloat16", 1e-4)
    assert found.efficiency == pytest.approx(0.4) and found.n == 3 and len(found.key) == 4


def test_another_size_falls_back_to_class_and_dtype(calib):
    found = calib.estimate("torch", "Conv2D", "bfloat16", 1e-3)
    assert found.key == ("torch", "Conv2D", "bfloat16") and found.efficiency == pytest.approx(0.4)


def test_two_samples_are_too_few_so_the_class_median_is_used(calib):
    found = calib.estimate("torch", "Conv2D", "float32", 1e-4)
    assert found.key == ("torch", "Conv2D") and found.efficiency == pytest.approx(0.5)  # median of .2 .4 .5 .6 .7


def test_an_unseen_class_gets_the_backend_median_and_an_unseen_backend_none(calib):
    assert calib.estimate("torch", "Dense", "bfloat16", 1e-4).efficiency == pytest.approx(0.5)
    assert calib.estimate("jax", "Conv2D", "bfloat16", 1e-4) is None


def test_calibrated_time_is_bound_over_efficiency_and_never_below_the_bound(calib):
    row = SimpleNamespace(name="c", type="Conv2D", dtype="bfloat16", predicted_time_s=1e-4, predicted_energy_j=None,
                          path="p", level="l", flops=1, bytes=1)
    apply_calibration([row], calib, "torch")
    assert row.calibrated_time_s == pytest.approx(2.5e-4)
    assert "n=3" in row.calibration
    fast = Calibration([_s(2.0), _s(2.0), _s(2.0)])
    apply_calibration([row], fast, "torch")
    assert row.calibrated_time_s == pytest.approx(1e-4)


def test_leaving_a_model_out_drops_its_samples(calib):
    assert len(calib.without_model("other").samples) == 4


def _rows(*pairs):
    return [SimpleNamespace(type=t, calibrated_time_s=s) for t, s in pairs]


def test_whole_model_fit_separates_matmul_and_other_layers():
    # t = 1 * matmul + 0.5 * other, exactly, on two records
    c = Calibration(whole=[WholeSample("torch", "cuda_graph", 3.0, 2.0, 2.0, 10), WholeSample("torch", "cuda_graph", 5.0, 4.0, 2.0, 10)])
    fit = c.whole_fit("torch", "cuda_graph")
    assert (fit.matmul_factor, fit.other_factor) == (pytest.approx(1.0), pytest.approx(0.5))
    assert c.whole_time_s(_rows(("Conv2D", 1.0), ("Activation", 4.0)), "torch", "cuda_graph") == pytest.approx(3.0)
    assert c.whole_time_s(_rows(("Conv2D", 1.0)), "jax", "jit") is None


def test_eager_whole_model_is_bounded_below_by_the_dispatch_per_layer_call():
    c = Calibration(whole=[
        WholeSample("torch", "eager", 10.0, 1.0, 1.0, 100),   # 5x the GPU sum: Python-bound, 0.1 s per call
        WholeSample("torch", "eager", 2.0, 1.0, 1.0, 100),    # GPU-bound
        WholeSample("torch", "eager", 2.0, 2.0, 0.0, 100),    # GPU-bound
    ])
    fit = c.whole_fit("torch", "eager")
    assert fit.dispatch_per_call_s == pytest.approx(0.1)
    rows = _rows(("Conv2D", 0.05), ("Activation", 0.05), ("Dense", 0.05))
    assert c.whole_time_s(rows, "torch", "eager") == pytest.approx(0.3)   # 3 calls * 0.1 s > 0.15 s of GPU work


def test_round_trip_and_bad_schema(tmp_path, calib):
    path = calib.save(tmp_path / "c.json")
    assert Calibration.load(path).estimate("torch", "Conv2D", "bfloat16", 1e-4).efficiency == pytest.approx(0.4)
    with pytest.raises(ProfileError, match="schema"):
        Calibration.from_dict({"schema": "nope"})


def test_the_shipped_h200_calibration_has_torch_and_jax_conv_samples():
    shipped = shipped_calibration()
    assert shipped.estimate("torch", "Conv2D", "bfloat16", 1e-4) is not None
    assert shipped.estimate("jax", "Conv2D", "bfloat16", 1e-4) is not None
    assert shipped.provenance["command"].startswith("python benchmarks/fit_calibration.py")


def test_the_shipped_calibration_is_only_used_for_its_own_gpu_and_the_cache_extends_it(tmp_path, monkeypatch):
    from carm_advisor.calibration import load_calibration
    from carm_advisor.profiles.cache import store_calibration

    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))
    device = {"uuid": "GPU-1", "driver": "1"}
    assert load_calibration(device, "Some Other GPU") is None
    shipped_n = len(load_calibration(device, "NVIDIA H200").samples)
    store_calibration(device, Calibration([_s(0.5, model="mine")]))
    assert len(load_calibration(device, "NVIDIA H200").samples) == shipped_n + 1
    assert len(load_calibration(device, "Some Other GPU").samples) == 1     # this GPU's own measurements
    store_calibration(device, Calibration([_s(0.25, model="mine"), _s(0.3, model="mine")]))  # a newer run replaces
    assert len(load_calibration(device, "Some Other GPU").samples) == 2
