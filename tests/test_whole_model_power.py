"""predict.whole_model_power_w: the whole-model power the tuner and the advice use, the one
benchmarks/power_model_validation.py validates (figures by hand)."""

from types import SimpleNamespace

import pytest

from carm_advisor.carm.power_model import DutyCurve, PowerModel
from carm_advisor.predict import whole_model_layer_times, whole_model_power_w

PM = PowerModel(constant_w=100.0, duty=DutyCurve(None, 0.5, variable="efficiency"))


def _row(name, busy_w, bound_s, calibrated_s, known=True):
    return SimpleNamespace(name=name, type="Conv2D", dtype="bfloat16", known=known, flops=1.0, bytes=1.0,
                           predicted_power_w=busy_w, predicted_energy_j=busy_w * bound_s,
                           predicted_time_s=bound_s, calibrated_time_s=calibrated_s)


class FakeCalibration:
    """Whole times: CUDA graph 6 ms, eager 12 ms; in-model (jit) times: 1 ms and 2 ms."""

    def whole_time_s(self, rows, backend, execution, model=None):
        return {"cuda_graph": 6e-3, "eager": 12e-3, "jit": 3e-3}[execution]

    def in_model_time_s(self, layer_type, bound_s, backend, execution, dtype=None, model=None, kernels=None):
        return {1e-3: 1e-3, 2e-3: 2e-3}[bound_s]


# conv: busy 700 W, bound 1 ms, calibrated 4 ms -> efficiency 0.25, duty 0.5 -> 400 W;
# dense: busy 500 W, bound 2 ms, calibrated 2 ms -> at its roof -> 500 W; an unknown layer is left out.
ROWS = [_row("conv", 700.0, 1e-3, 4e-3), _row("dense", 500.0, 2e-3, 2e-3), _row("x", 900.0, 1e-3, 1e-3, known=False)]


def test_gpu_paced_whole_model_power_is_the_time_weighted_duty_power():
    # (400 x 4 + 500 x 2) / 6 = 433.33 W
    assert whole_model_power_w(ROWS, PM, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(2600 / 6)


def test_eager_whole_model_power_keeps_the_gpu_share_above_the_constant():
    # GPU share 6 / 12 = 0.5: 100 + (433.33 - 100) x 0.5 = 266.67 W
    times, share = whole_model_layer_times(ROWS, FakeCalibration(), "torch", "eager")
    assert share == pytest.approx(0.5) and [r.name for r, _ in times] == ["conv", "dense"]
    assert whole_model_power_w(ROWS, PM, FakeCalibration(), "torch", "eager") == pytest.approx(100 + 1000 / 6)


def test_jit_whole_model_power_weights_the_layers_at_their_in_model_times():
    # in-model 1 ms and 2 ms: both at their roofs -> (700 x 1 + 500 x 2) / 3 = 566.67 W
    times, share = whole_model_layer_times(ROWS, FakeCalibration(), "jax", "jit")
    assert [t for _, t in times] == [1e-3, 2e-3] and share == 1.0
    assert whole_model_power_w(ROWS, PM, FakeCalibration(), "jax", "jit") == pytest.approx(1700 / 3)


def test_no_power_model_or_calibration_no_whole_model_power():
    assert whole_model_power_w(ROWS, None, FakeCalibration(), "torch", "cuda_graph") is None
    assert whole_model_power_w(ROWS, PM, None, "torch", "cuda_graph") is None
    assert PM.mean_duty_power_w([]) is None


class HostPacedJit(FakeCalibration):
    """A jit fit with a host term (the host max) whose call the GPU is busy half of."""

    def compiled_gpu_share(self, rows, backend, execution, model=None):
        return 0.5


def test_jit_whole_model_power_keeps_the_gpu_share_of_a_host_paced_call_above_the_constant():
    # in-model 1 ms and 2 ms at their roofs: 566.67 W busy; half the call at 100 W: 100 + 466.67 x 0.5
    times, share = whole_model_layer_times(ROWS, HostPacedJit(), "jax", "jit")
    assert share == 0.5
    assert whole_model_power_w(ROWS, PM, HostPacedJit(), "jax", "jit") == pytest.approx(100 + (1700 / 3 - 100) / 2)


def test_a_tensor_core_curve_applies_to_the_layers_on_a_tensor_core_path_only():
    import dataclasses

    # the rest at gamma 0.5 (above), the Tensor Core layers at gamma 1: conv at efficiency 0.25 -> 0.25 of the
    # 600 W above the constant -> 250 W; the dense layer at its roof stays 500 W: (250 x 4 + 500 x 2) / 6 W
    pm = dataclasses.replace(PM, duty_tensor_core=DutyCurve(None, 1.0, variable="efficiency"))
    rows = [SimpleNamespace(**{**vars(r), "path": "tc_bf16"}) for r in ROWS]
    assert whole_model_power_w(rows, pm, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(2000 / 6)
    assert pm.duty_power_w(700.0, 4e-3, bound_time_s=1e-3, path="tc_fp16") == pytest.approx(250.0)
    assert pm.duty_power_w(700.0, 4e-3, bound_time_s=1e-3, path="fp16x2") == pytest.approx(400.0)   # the rest
    assert pm.duty_power_w(700.0, 4e-3, bound_time_s=1e-3) == pytest.approx(400.0)                 # path unknown
    # CUDA-core rows (or rows without a path) keep the one curve: 433.33 W as above
    fp32 = [SimpleNamespace(**{**vars(r), "path": "fp32"}) for r in ROWS]
    assert whole_model_power_w(fp32, pm, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(2600 / 6)
    assert whole_model_power_w(ROWS, pm, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(2600 / 6)


def test_a_paths_own_curve_comes_before_its_units():
    import dataclasses

    from carm_advisor.errors import ProfileError

    # tc_bf16's own curve at gamma 2: conv at efficiency 0.25 -> 100 + 600 x 0.0625 = 137.5 W, dense at its roof 500 W:
    # (137.5 x 4 + 500 x 2) / 6 W; tc_tf32 rows keep the Tensor Core curve (gamma 1): (250 x 4 + 500 x 2) / 6 W
    pm = dataclasses.replace(PM, duty_tensor_core=DutyCurve(None, 1.0, variable="efficiency"),
                             duty_by_path={"tc_bf16": DutyCurve(None, 2.0, variable="efficiency")})
    bf16 = [SimpleNamespace(**{**vars(r), "path": "tc_bf16"}) for r in ROWS]
    tf32 = [SimpleNamespace(**{**vars(r), "path": "tc_tf32"}) for r in ROWS]
    assert whole_model_power_w(bf16, pm, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(1550 / 6)
    assert whole_model_power_w(tf32, pm, FakeCalibration(), "torch", "cuda_graph") == pytest.approx(2000 / 6)
    assert pm.duty_power_w(700.0, 4e-3, bound_time_s=1e-3, path="fp32") == pytest.approx(400.0)   # the other curve
    with pytest.raises(ProfileError, match="duty_by_path\\['fp32'\\] must be a duty curve"):
        PowerModel(constant_w=100.0, duty_by_path={"fp32": 0.5})
