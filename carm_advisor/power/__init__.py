"""Power and clocks: the NVML seam, a fake for tests, energy windows and the clock controller.

Importing this package never imports pynvml; `open_gpu()` / `NvmlGPU` do, on first use.
"""

from carm_advisor.power._base import GPU
from carm_advisor.power.clocks import ENV_NO_CLOCK_CONTROL, ClockController, clock_control_disabled_by_env
from carm_advisor.power.energy import (
    EnergyMeasurement,
    EnergyWindow,
    PowerSample,
    PowerSampler,
    measure_energy,
    relative_spread,
)
from carm_advisor.power.fake import FakeGPU, TraceSample
from carm_advisor.power.nvml import NvmlGPU, NVMLUnavailableError, gpu_count, open_gpu

__all__ = [
    "ENV_NO_CLOCK_CONTROL",
    "GPU",
    "ClockController",
    "EnergyMeasurement",
    "EnergyWindow",
    "FakeGPU",
    "NVMLUnavailableError",
    "NvmlGPU",
    "PowerSample",
    "PowerSampler",
    "TraceSample",
    "clock_control_disabled_by_env",
    "gpu_count",
    "measure_energy",
    "open_gpu",
    "relative_spread",
]
