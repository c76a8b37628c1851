"""NVML behind the `GPU` seam: the only module in carm_advisor that imports pynvml.

pynvml (package nvidia-ml-py) is imported on first use, never at import time, so a machine without
NVML or without an NVIDIA driver can still import carm_advisor and run on a recorded profile.
NVML is initialised once per process and shut down at exit (zeus does the same): handles stay valid
for as long as any `NvmlGPU` lives, and there is no per-object shutdown to get wrong.
"""

from __future__ import annotations

import atexit
import functools
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from carm_advisor.errors import GPUUnavailableError, NoPermissionError, NotSupportedError, PowerError
from carm_advisor.power._base import GPU

_F = TypeVar("_F", bound=Callable[..., Any])

_PACKAGE_HINT = "pip install nvidia-ml-py"


class NVMLUnavailableError(GPUUnavailableError, PowerError):
    """NVML cannot be used here: pynvml missing, libnvidia-ml.so missing, driver not loaded, no GPU.

    Both a GPUUnavailableError (measurement code falls back to a recorded profile) and a PowerError
    (the GPU seam's contract: every failure is a PowerError child).
    """


# NVML error name -> why NVML as a whole is unusable here. Names, not classes, because pynvml is lazy.
_UNAVAILABLE_REASONS = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so not found): no NVIDIA driver on this machine",
    "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded): load the driver or use a recorded profile",
    "NVMLError_LibRmVersionMismatch": (
        "library and kernel driver versions differ): reboot or reload the NVIDIA driver"
    ),
    "NVMLError_GpuIsLost": "the GPU fell off the bus): the GPU needs a reset by its administrator",
    "NVMLError_Uninitialized": "NVML was shut down): this process already called nvmlShutdown",
}


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _translate(err: Exception, what: str) -> PowerError:
    """Map one pynvml.NVMLError onto the carm_advisor error a caller can act on."""
    kind = type(err).__name__
    detail = _one_line(err)
    if kind in _UNAVAILABLE_REASONS:
        return NVMLUnavailableError(f"NVML is not available ({_UNAVAILABLE_REASONS[kind]}")
    if kind in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound"):
        return NotSupportedError(f"{what} is not supported by this GPU or driver (NVML: {detail})")
    if kind == "NVMLError_NoPermission":
        return NoPermissionError(f"{what} needs root or admin rights (NVML: {detail})")
    if kind == "NVMLError_InvalidArgument":
        return PowerError(f"{what} was given a value NVML rejects (NVML: {detail})")
    return PowerError(f"{what} failed (NVML: {detail})")


def _nvml_errors(method: _F) -> _F:
    """Callers of a decorated method see carm_advisor errors only, never a raw NVMLError."""

    @functools.wraps(method)
    def wrapper(self: NvmlGPU, *args: Any, **kwargs: Any) -> Any:
        pynvml = _LIBRARY.module()
        try:
            return method(self, *args, **kwargs)
        except pynvml.NVMLError as err:
            raise _translate(err, f"{method.__name__} on GPU {self.index}") from err

    return wrapper  # type: ignore[return-value]


class _NvmlLibrary:
    """The lazily imported pynvml module and the process-wide nvmlInit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._initialized = False

    def module(self) -> Any:
        if self._module is None:
            try:
                import pynvml
            except ImportError as err:
                raise NVMLUnavailableError(
                    "NVML is not available (the Python package pynvml is missing): "
                    f"{_PACKAGE_HINT}"
                ) from err
            self._module = pynvml
        return self._module

    def init(self) -> Any:
        """nvmlInit once; returns the pynvml module ready for use."""
        pynvml = self.module()
        with self._lock:
            if not self._initialized:
                try:
                    pynvml.nvmlInit()
                except pynvml.NVMLError as err:
                    raise _translate(err, "nvmlInit") from err
                self._initialized = True
                atexit.register(self.shutdown)
        return pynvml

    def shutdown(self) -> None:
        with self._lock:
            if self._initialized:
                self._initialized = False
                try:
                    self._module.nvmlShutdown()
                except self._module.NVMLError:
                    pass  # at exit there is nobody left to tell


_LIBRARY = _NvmlLibrary()


class NvmlGPU(GPU):
    """One NVIDIA GPU through NVML. Opening it never changes any setting."""

    def __init__(self, index: int = 0) -> None:
        pynvml = _LIBRARY.init()
        self.index = index
        try:
            count = pynvml.nvmlDeviceGetCount()
            if not 0 <= index < count:
                raise NVMLUnavailableError(
                    f"Expected a GPU index in [0, {count}), Received: index={index}"
                )
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as err:
            raise _translate(err, f"opening GPU {index}") from err

    def __repr__(self) -> str:
        return f"NvmlGPU(index={self.index})"

    @staticmethod
    def _nvml() -> Any:
        return _LIBRARY.module()

    @_nvml_errors
    def name(self) -> str:
        return str(self._nvml().nvmlDeviceGetName(self._handle))

    @_nvml_errors
    def uuid(self) -> str:
        return str(self._nvml().nvmlDeviceGetUUID(self._handle))

    @_nvml_errors
    def driver_version(self) -> str:
        return str(self._nvml().nvmlSystemGetDriverVersion())

    @_nvml_errors
    def total_energy_mj(self) -> int:
        # NVML: millijoules since the driver loaded (Volta and newer).
        return int(self._nvml().nvmlDeviceGetTotalEnergyConsumption(self._handle))

    @_nvml_errors
    def power_w(self) -> float:
        # NVML reports milliwatts. On recent GPUs this reading is averaged over a short period by
        # the driver: use total_energy_mj over a window for energy, this for monitoring.
        return self._nvml().nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    @_nvml_errors
    def sm_clock_mhz(self) -> float:
        pynvml = self._nvml()
        return float(pynvml.nvmlDeviceGetClockInfo(self._handle, pynvml.NVML_CLOCK_SM))

    @_nvml_errors
    def memory_clock_mhz(self) -> float:
        pynvml = self._nvml()
        return float(pynvml.nvmlDeviceGetClockInfo(self._handle, pynvml.NVML_CLOCK_MEM))

    @_nvml_errors
    def max_sm_clock_mhz(self) -> float:
        pynvml = self._nvml()
        return float(pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM))

    @_nvml_errors
    def supported_sm_clocks_mhz(self) -> list[float]:
        # SM clocks are listed per memory clock; a lock may use any of them, so take the union.
        pynvml = self._nvml()
        clocks: set[float] = set()
        for mem_mhz in pynvml.nvmlDeviceGetSupportedMemoryClocks(self._handle):
            clocks.update(
                float(c) for c in pynvml.nvmlDeviceGetSupportedGraphicsClocks(self._handle, mem_mhz)
            )
        return sorted(clocks, reverse=True)

    @_nvml_errors
    def power_limit_w(self) -> float:
        return self._nvml().nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000.0

    @_nvml_errors
    def power_management_limit_w(self) -> float:
        return self._nvml().nvmlDeviceGetPowerManagementLimit(self._handle) / 1000.0

    @_nvml_errors
    def power_limit_range_w(self) -> tuple[float, float]:
        min_mw, max_mw = self._nvml().nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
        return (min_mw / 1000.0, max_mw / 1000.0)

    @_nvml_errors
    def temperature_c(self) -> float:
        pynvml = self._nvml()
        # nvmlDeviceGetTemperature is deprecated (gone in CUDA 14); older drivers lack the V form.
        if hasattr(pynvml, "nvmlDeviceGetTemperatureV"):
            try:
                return float(
                    pynvml.nvmlDeviceGetTemperatureV(self._handle, pynvml.NVML_TEMPERATURE_GPU)
                )
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported):
                pass
        return float(pynvml.nvmlDeviceGetTemperature(self._handle, pynvml.NVML_TEMPERATURE_GPU))

    @_nvml_errors
    def lock_sm_clocks_mhz(self, min_mhz: float, max_mhz: float) -> None:
        self._nvml().nvmlDeviceSetGpuLockedClocks(self._handle, int(min_mhz), int(max_mhz))

    @_nvml_errors
    def reset_sm_clocks(self) -> None:
        self._nvml().nvmlDeviceResetGpuLockedClocks(self._handle)

    @_nvml_errors
    def set_power_limit_w(self, watts: float) -> None:
        self._nvml().nvmlDeviceSetPowerManagementLimit(self._handle, int(round(watts * 1000.0)))


def gpu_count() -> int:
    """Number of NVIDIA GPUs NVML sees; 0 where NVML, the driver or pynvml is missing."""
    try:
        pynvml = _LIBRARY.init()
    except NVMLUnavailableError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as err:
        raise _translate(err, "nvmlDeviceGetCount") from err


def open_gpu(index: int = 0, fake: GPU | bool | None = None) -> GPU:
    """The GPU to measure: `fake` itself when it is a GPU, a default FakeGPU for True, else NVML.

    Raises NVMLUnavailableError (one line) where there is no usable NVIDIA GPU.
    """
    if isinstance(fake, GPU):
        return fake
    if fake:
        from carm_advisor.power.fake import FakeGPU

        return FakeGPU()
    return NvmlGPU(index)


# ---- which NVML device a CUDA process sees --------------------------------------------------------
#
# CUDA_VISIBLE_DEVICES renumbers the devices a CUDA process sees, but NVML still enumerates every GPU
# of the machine: opening NVML index 0 in a process pinned to GPU 2 would read GPU 0's energy. The
# visible device is found by its UUID (CUDA accepts a unique UUID prefix) or, for a plain index, by
# position in NVML's own order (PCI bus id), which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID
# (the tuner's launcher sets it; CUDA's default "fastest first" agrees on a machine of identical GPUs).


def visible_nvml_index(visible: str | None, uuids: list[str]) -> int:
    """NVML index of the first CUDA-visible device. `visible`: CUDA_VISIBLE_DEVICES (None: unset);
    `uuids`: the UUIDs of NVML's devices in NVML index order."""
    if visible is None:
        if not uuids:
            raise NVMLUnavailableError("Expected at least one NVIDIA GPU, Received: NVML lists none")
        return 0
    first = visible.split(",")[0].strip()
    if not first or first.startswith("-"):
        raise NVMLUnavailableError(f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process")
    if first.isdigit():
        index = int(first)
        if index >= len(uuids):
            raise NVMLUnavailableError(f"Expected a GPU index in [0, {len(uuids)}), Received: CUDA_VISIBLE_DEVICES={visible!r}")
        return index
    if first.startswith("MIG-"):
        raise NotSupportedError(f"energy of a MIG slice ({first}) is not measurable through NVML: give whole GPUs")
    prefix = first if first.startswith("GPU-") else "GPU-" + first
    matches = [i for i, u in enumerate(uuids) if u.startswith(prefix)]
    if len(matches) != 1:
        found = "no GPU" if not matches else f"{len(matches)} GPUs"
        raise NVMLUnavailableError(f"CUDA_VISIBLE_DEVICES={visible!r} names {found} among NVML's {uuids}")
    return matches[0]


def nvml_uuids() -> list[str]:
    """UUIDs of every GPU NVML enumerates, in NVML index order (empty where there is no NVML)."""
    return [NvmlGPU(i).uuid() for i in range(gpu_count())]


def open_visible_gpu(env: dict[str, str] | None = None, gpus: list[GPU] | None = None) -> GPU:
    """The GPU this process's CUDA device 0 is, as a `GPU` (NVML, or one of `gpus` in tests).

    env: the environment to read CUDA_VISIBLE_DEVICES from (default os.environ); gpus: the machine's
    GPUs in NVML index order (default NVML's own)."""
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if gpus is not None:
        return gpus[visible_nvml_index(visible, [g.uuid() for g in gpus])]
    return NvmlGPU(visible_nvml_index(visible, nvml_uuids()))


def gpu_identity(gpu: GPU, index: int | None = None) -> dict[str, Any]:
    """What a result records of the GPU that measured it: NVML index, UUID, name and host."""
    return {"index": getattr(gpu, "index", index) if index is None else index, "uuid": gpu.uuid(),
            "name": gpu.name(), "host": socket.gethostname()}
