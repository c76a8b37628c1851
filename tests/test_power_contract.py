"""One contract, every GPU backend: FakeGPU, NvmlGPU over a stub pynvml, NvmlGPU over real NVML.

The stub pynvml speaks NVML's own units (mW, mJ, MHz) with the real pynvml error classes, so the
NvmlGPU conversions and error translation are checked here, on a machine without a GPU. The real
NVML case runs only where a GPU is present (marked gpu) and never calls a setter.
Also here: FakeGPU's own behaviour (replay, permission, counter steps) and NvmlGPU's failure modes.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
import types
from pathlib import Path

import pynvml as real_pynvml
import pytest

from carm_advisor.errors import (
    CarmError,
    GPUUnavailableError,
    MeasurementError,
    NoPermissionError,
    NotSupportedError,
    PowerError,
)
from carm_advisor.power import GPU, FakeGPU, NvmlGPU, TraceSample, gpu_count, open_gpu
from carm_advisor.power import nvml as nvml_module

REPO_ROOT = Path(__file__).resolve().parents[1]


# --- a stub pynvml: NVML's units and error classes, no library ------------------------------


def make_stub_pynvml(*, permission: bool = False, device_count: int = 1) -> types.ModuleType:
    stub = types.ModuleType("pynvml")
    for attr in dir(real_pynvml):
        if attr.startswith("NVMLError") or attr.startswith("NVML_"):
            setattr(stub, attr, getattr(real_pynvml, attr))
    stub.init_calls = 0
    stub.set_calls = []
    stub.energy_mj = 1_000_000
    stub.fail = {}  # function name -> NVMLError instance to raise

    def api(fn):
        def wrapper(*args):
            if fn.__name__ in stub.fail:
                raise stub.fail[fn.__name__]
            return fn(*args)

        wrapper.__name__ = fn.__name__
        setattr(stub, fn.__name__, wrapper)
        return wrapper

    @api
    def nvmlInit():
        stub.init_calls += 1

    @api
    def nvmlShutdown():
        pass

    @api
    def nvmlDeviceGetCount():
        return device_count

    @api
    def nvmlDeviceGetHandleByIndex(index):
        return f"handle-{index}"

    @api
    def nvmlDeviceGetName(handle):
        return "NVIDIA H200"

    @api
    def nvmlDeviceGetUUID(handle):
        return "GPU-5c1d0000-0000-0000-0000-000000000000"

    @api
    def nvmlSystemGetDriverVersion():
        return "580.159.04"

    @api
    def nvmlDeviceGetTotalEnergyConsumption(handle):
        stub.energy_mj += 35_000  # 350 W for 0.1 s between readings
        return stub.energy_mj

    @api
    def nvmlDeviceGetPowerUsage(handle):
        return 350_000  # mW

    @api
    def nvmlDeviceGetClockInfo(handle, clock_type):
        return {real_pynvml.NVML_CLOCK_SM: 1755, real_pynvml.NVML_CLOCK_MEM: 3201}[clock_type]

    @api
    def nvmlDeviceGetMaxClockInfo(handle, clock_type):
        return {real_pynvml.NVML_CLOCK_SM: 1980, real_pynvml.NVML_CLOCK_MEM: 3201}[clock_type]

    @api
    def nvmlDeviceGetSupportedMemoryClocks(handle):
        return [3201, 2201]

    @api
    def nvmlDeviceGetSupportedGraphicsClocks(handle, mem_mhz):
        return {3201: [1980, 1965, 345], 2201: [1980, 1500, 345, 210]}[mem_mhz]

    @api
    def nvmlDeviceGetEnforcedPowerLimit(handle):
        return 700_000  # mW

    @api
    def nvmlDeviceGetPowerManagementLimit(handle):
        return 650_000  # mW: an example where another cap does not bind but the value differs

    @api
    def nvmlDeviceGetPowerManagementLimitConstraints(handle):
        return [200_000, 700_000]  # mW

    @api
    def nvmlDeviceGetTemperatureV(handle, sensor):
        return 41

    @api
    def nvmlDeviceGetTemperature(handle, sensor):
        return 41

    def setter(name):
        def fn(*args):
            if name in stub.fail:
                raise stub.fail[name]
            if not permission:
                raise real_pynvml.NVMLError_NoPermission(real_pynvml.NVML_ERROR_NO_PERMISSION)
            stub.set_calls.append((name, args))

        setattr(stub, name, fn)

    for name in (
        "nvmlDeviceSetGpuLockedClocks",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceSetPowerManagementLimit",
    ):
        setter(name)
    return stub


@pytest.fixture
def stub_nvml(monkeypatch):
    """Installs a fresh stub pynvml and a fresh process-wide NVML state; yields a factory."""

    def install(**kwargs):
        stub = make_stub_pynvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", stub)
        monkeypatch.setattr(nvml_module, "_LIBRARY", nvml_module._NvmlLibrary())
        return stub

    return install


# --- the contract, one suite over every backend ----------------------------------------------


@pytest.fixture(
    params=[
        "fake",
        "nvml-stub",
        pytest.param("nvml-real", marks=pytest.mark.gpu),
    ]
)
def backend(request, stub_nvml):
    """(gpu, let_time_pass, may_call_setters) for each backend."""
    if request.param == "fake":
        gpu = FakeGPU(power_w=350.0, sm_clock_mhz=1755.0, permission=False)
        return gpu, lambda: gpu.advance(0.1), True
    if request.param == "nvml-stub":
        stub_nvml(permission=False)
        return NvmlGPU(0), lambda: None, True
    # Real GPU: reading only. Its settings must never change, so setters are never called.
    return NvmlGPU(0), lambda: time.sleep(0.15), False


def test_identity_strings_are_non_empty(backend):
    gpu, _, _ = backend
    assert isinstance(gpu, GPU)
    for value in (gpu.name(), gpu.uuid(), gpu.driver_version()):
        assert isinstance(value, str) and value


def test_energy_counter_is_integer_millijoules_and_monotonic(backend):
    gpu, let_time_pass, _ = backend
    readings = []
    for _ in range(3):
        readings.append(gpu.total_energy_mj())
        let_time_pass()
    assert all(isinstance(r, int) for r in readings)
    assert readings == sorted(readings)
    assert readings[-1] > readings[0]  # a powered GPU draws energy over 0.2 s or more


def test_power_is_watts_within_the_power_limit_range(backend):
    gpu, _, _ = backend
    low_w, high_w = gpu.power_limit_range_w()
    assert 0 < low_w <= high_w < 5000  # watts, not milliwatts
    assert low_w <= gpu.power_limit_w() <= high_w
    assert low_w <= gpu.power_management_limit_w() <= high_w
    # Readings may overshoot the cap briefly; 1.5x the top of the range is never a W figure.
    assert 0 < gpu.power_w() <= 1.5 * high_w


def test_clocks_are_mhz_within_the_supported_range(backend):
    gpu, _, _ = backend
    supported = gpu.supported_sm_clocks_mhz()
    assert supported and supported == sorted(supported, reverse=True)
    assert len(set(supported)) == len(supported)
    assert supported[0] <= gpu.max_sm_clock_mhz() < 10_000
    assert 0 < gpu.sm_clock_mhz() <= gpu.max_sm_clock_mhz()
    assert 100 < gpu.memory_clock_mhz() < 20_000


def test_temperature_is_celsius(backend):
    gpu, _, _ = backend
    assert 0 < gpu.temperature_c() < 120


def test_setters_without_permission_raise_no_permission_error(backend):
    gpu, _, may_call_setters = backend
    if not may_call_setters:
        pytest.skip("never change settings on a real GPU")
    for call in (
        lambda: gpu.lock_sm_clocks_mhz(1410, 1410),
        gpu.reset_sm_clocks,
        lambda: gpu.set_power_limit_w(500),
    ):
        with pytest.raises(NoPermissionError) as info:
            call()
        assert "\n" not in str(info.value)


# --- NvmlGPU over the stub: units, error translation, initialisation ------------------------


def test_nvml_converts_milliwatts_to_watts(stub_nvml):
    stub_nvml()
    gpu = NvmlGPU(0)
    assert gpu.power_w() == 350.0
    assert gpu.power_limit_w() == 700.0
    assert gpu.power_limit_range_w() == (200.0, 700.0)
    assert gpu.power_management_limit_w() == 650.0


def test_nvml_passes_energy_through_as_millijoules(stub_nvml):
    stub = stub_nvml()
    gpu = NvmlGPU(0)
    assert gpu.total_energy_mj() == 1_035_000
    assert stub.energy_mj == 1_035_000


def test_nvml_reads_sm_and_memory_clocks_by_their_nvml_ids(stub_nvml):
    stub_nvml()
    gpu = NvmlGPU(0)
    assert (gpu.sm_clock_mhz(), gpu.memory_clock_mhz(), gpu.max_sm_clock_mhz()) == (1755, 3201, 1980)


def test_nvml_supported_clocks_are_the_union_over_memory_clocks_highest_first(stub_nvml):
    stub_nvml()
    assert NvmlGPU(0).supported_sm_clocks_mhz() == [1980, 1965, 1500, 345, 210]


def test_nvml_setters_send_integer_mhz_and_milliwatts(stub_nvml):
    stub = stub_nvml(permission=True)
    gpu = NvmlGPU(0)
    gpu.lock_sm_clocks_mhz(1410.0, 1500.0)
    gpu.set_power_limit_w(450.5)
    gpu.reset_sm_clocks()
    assert stub.set_calls == [
        ("nvmlDeviceSetGpuLockedClocks", ("handle-0", 1410, 1500)),
        ("nvmlDeviceSetPowerManagementLimit", ("handle-0", 450500)),
        ("nvmlDeviceResetGpuLockedClocks", ("handle-0",)),
    ]


def test_nvml_initialises_once_for_many_gpus(stub_nvml):
    stub = stub_nvml(device_count=2)
    NvmlGPU(0), NvmlGPU(1), gpu_count()
    assert stub.init_calls == 1


@pytest.mark.parametrize(
    ("nvml_error", "expected_class"),
    [
        (real_pynvml.NVMLError_NotSupported, NotSupportedError),
        (real_pynvml.NVMLError_FunctionNotFound, NotSupportedError),
        (real_pynvml.NVMLError_NoPermission, NoPermissionError),
        (real_pynvml.NVMLError_GpuIsLost, GPUUnavailableError),
        (real_pynvml.NVMLError_Unknown, PowerError),
    ],
)
def test_nvml_errors_become_one_line_carm_errors(stub_nvml, nvml_error, expected_class):
    stub = stub_nvml()
    gpu = NvmlGPU(0)
    stub.fail["nvmlDeviceGetTotalEnergyConsumption"] = nvml_error()
    with pytest.raises(expected_class) as info:
        gpu.total_energy_mj()
    assert not isinstance(info.value, real_pynvml.NVMLError)
    assert isinstance(info.value, PowerError)
    assert "\n" not in str(info.value)
    if expected_class is GPUUnavailableError:
        assert str(info.value).startswith("NVML is not available (the GPU fell off the bus)")
    else:
        assert "total_energy_mj on GPU 0" in str(info.value)


def test_nvml_gpu_index_out_of_range_says_expected_and_received(stub_nvml):
    stub_nvml(device_count=1)
    expected = r"Expected a GPU index in \[0, 1\), Received: index=3"
    with pytest.raises(GPUUnavailableError, match=expected):
        NvmlGPU(3)


def test_missing_pynvml_names_the_package_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    monkeypatch.setattr(nvml_module, "_LIBRARY", nvml_module._NvmlLibrary())
    with pytest.raises(PowerError, match="nvidia-ml-py") as info:
        NvmlGPU(0)
    assert "\n" not in str(info.value)
    assert gpu_count() == 0


def _libnvidia_ml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_libnvidia_ml_loadable(), reason="this machine has libnvidia-ml.so.1")
def test_opening_nvml_without_a_driver_raises_a_one_line_carm_error(monkeypatch):
    monkeypatch.setattr(nvml_module, "_LIBRARY", nvml_module._NvmlLibrary())  # the real pynvml
    with pytest.raises(CarmError) as info:
        open_gpu(0)
    err = info.value
    assert isinstance(err, GPUUnavailableError) and isinstance(err, PowerError)
    assert str(err) == (
        "NVML is not available (libnvidia-ml.so not found): no NVIDIA driver on this machine"
    )
    assert gpu_count() == 0


def test_importing_carm_advisor_power_does_not_import_pynvml():
    code = "import sys, carm_advisor.power; assert 'pynvml' not in sys.modules, 'pynvml imported'"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_open_gpu_returns_the_given_fake_or_a_default_fake():
    fake = FakeGPU()
    assert open_gpu(fake=fake) is fake
    assert isinstance(open_gpu(fake=True), FakeGPU)


# --- FakeGPU's own behaviour ---------------------------------------------------------------


def test_fake_energy_integrates_settable_power_over_virtual_time():
    gpu = FakeGPU(power_w=100.0, start_energy_mj=5_000)
    gpu.advance(2.0)  # 100 W x 2 s = 200 J
    gpu.set_power_w(350.0)
    gpu.advance(0.5)  # 350 W x 0.5 s = 175 J
    assert gpu.total_energy_mj() == 5_000 + 375_000
    assert gpu.power_w() == 350.0


def test_fake_replays_a_trace_with_sample_and_hold():
    # 100 W for 1 s, 300 W for 2 s, then 200 W held: energy to t=4 s is 100 + 600 + 200 = 900 J.
    gpu = FakeGPU.from_trace([(10.0, 100.0, 1980.0), (11.0, 300.0, 1500.0), (13.0, 200.0, 1400.0)])
    assert (gpu.power_w(), gpu.sm_clock_mhz()) == (100.0, 1980.0)
    gpu.advance(1.5)
    assert (gpu.power_w(), gpu.sm_clock_mhz()) == (300.0, 1500.0)
    assert gpu.total_energy_mj() == 250_000  # 100 + 300 x 0.5
    gpu.advance(2.5)
    assert gpu.total_energy_mj() == 900_000
    assert gpu.sm_clock_mhz() == 1400.0


def test_fake_replays_a_csv_recording(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("t_s,power_w,sm_clock_mhz\n0.0,690,1305\n0.1,692,1500\n")
    gpu = FakeGPU.from_csv(path)
    gpu.advance(0.2)  # 690 x 0.1 + 692 x 0.1 = 138.2 J
    assert gpu.total_energy_mj() == pytest.approx(138_200, abs=1)
    assert gpu.sm_clock_mhz() == 1500.0


def test_fake_trace_rejects_malformed_samples():
    with pytest.raises(MeasurementError, match="Expected a trace sample"):
        FakeGPU.from_trace([(0.0, 100.0)])
    with pytest.raises(MeasurementError, match="at least one"):
        FakeGPU.from_trace([])


def test_fake_setting_power_mid_trace_overrides_the_rest_of_the_trace():
    gpu = FakeGPU.from_trace([TraceSample(0.0, 100.0, 1980.0), TraceSample(1.0, 500.0, 1980.0)])
    gpu.advance(0.5)
    gpu.set_power_w(200.0)
    gpu.advance(1.5)  # 100 x 0.5 + 200 x 1.5 = 350 J; the 500 W sample is dropped
    assert gpu.total_energy_mj() == 350_000


def test_fake_energy_counter_advances_in_steps_like_nvml():
    gpu = FakeGPU(power_w=350.0, energy_update_period_s=0.1)
    gpu.advance(0.25)  # the counter shows the 0.2 s step: 70 J
    assert gpu.total_energy_mj() == 70_000
    assert gpu.energy_j_between(0.0, 0.25) == pytest.approx(87.5)


def test_fake_without_permission_changes_nothing_and_logs_the_attempt():
    gpu = FakeGPU(permission=False, power_limit_w=700.0)
    with pytest.raises(NoPermissionError):
        gpu.set_power_limit_w(500.0)
    with pytest.raises(NoPermissionError):
        gpu.lock_sm_clocks_mhz(1410, 1410)
    assert gpu.calls == []
    assert gpu.attempts == [("set_power_limit_w", (500.0,)), ("lock_sm_clocks_mhz", (1410, 1410))]
    assert (gpu.power_limit_w(), gpu.locked_sm_clocks_mhz) == (700.0, None)


def test_fake_locked_clocks_clamp_the_sm_clock_until_reset():
    gpu = FakeGPU(sm_clock_mhz=1980.0)
    gpu.lock_sm_clocks_mhz(1200, 1410)
    assert gpu.sm_clock_mhz() == 1410
    gpu.reset_sm_clocks()
    assert gpu.sm_clock_mhz() == 1980.0
    assert gpu.calls == [("lock_sm_clocks_mhz", (1200, 1410)), ("reset_sm_clocks", ())]


def test_fake_setters_reject_out_of_range_values():
    gpu = FakeGPU(power_limit_range_w=(200.0, 700.0))
    with pytest.raises(PowerError, match=r"\[200, 700\] W"):
        gpu.set_power_limit_w(800.0)
    with pytest.raises(PowerError, match="345 <= min_mhz"):
        gpu.lock_sm_clocks_mhz(3000, 3000)
    assert gpu.calls == []


def test_fake_on_a_real_clock_refuses_virtual_advance():
    gpu = FakeGPU(clock=time.perf_counter)
    with pytest.raises(PowerError, match="virtual time"):
        gpu.advance(1.0)
