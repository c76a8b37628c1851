"""The GPU power/clock seam: what the rest of carm_advisor may ask of a GPU's management library.

`NvmlGPU` (power/nvml.py, the only module that imports pynvml) and `FakeGPU` (power/fake.py) both
implement it; tests/test_power_contract.py runs one contract suite against each.
Every method raises a carm_advisor.errors.PowerError child (NotSupportedError, NoPermissionError),
never a raw NVML error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class GPU(ABC):
    """One GPU as seen by its management library."""

    @abstractmethod
    def name(self) -> str:
        """Marketing name, e.g. 'NVIDIA H200'."""

    @abstractmethod
    def uuid(self) -> str:
        """Stable identifier, e.g. 'GPU-5c1d...'."""

    @abstractmethod
    def driver_version(self) -> str:
        """Driver version string, e.g. '580.159.04'."""

    @abstractmethod
    def total_energy_mj(self) -> int:
        """Energy drawn since the driver loaded. Units: mJ. Monotonic."""

    @abstractmethod
    def power_w(self) -> float:
        """Current board power draw. Units: W."""

    @abstractmethod
    def sm_clock_mhz(self) -> float:
        """Current SM clock. Units: MHz."""

    @abstractmethod
    def memory_clock_mhz(self) -> float:
        """Current memory clock. Units: MHz."""

    @abstractmethod
    def max_sm_clock_mhz(self) -> float:
        """Highest SM clock the GPU supports. Units: MHz."""

    @abstractmethod
    def supported_sm_clocks_mhz(self) -> list[float]:
        """SM clocks the GPU can be locked to, highest first. Units: MHz."""

    @abstractmethod
    def power_limit_w(self) -> float:
        """Enforced board power limit. Units: W."""

    def power_management_limit_w(self) -> float:
        """The settable power limit (what set_power_limit_w writes), which the enforced limit may
        undercut when another cap is lower; what a restore must put back. Units: W."""
        return self.power_limit_w()

    @abstractmethod
    def power_limit_range_w(self) -> tuple[float, float]:
        """(min, max) settable power limit. Units: W."""

    @abstractmethod
    def temperature_c(self) -> float:
        """GPU temperature. Units: degrees Celsius."""

    # Settings. Only power/clocks.py's ClockController calls these, and only when the user opted in.
    @abstractmethod
    def lock_sm_clocks_mhz(self, min_mhz: float, max_mhz: float) -> None:
        """Lock the SM clock into [min_mhz, max_mhz]. Needs root or admin rights."""

    @abstractmethod
    def reset_sm_clocks(self) -> None:
        """Undo lock_sm_clocks_mhz."""

    @abstractmethod
    def set_power_limit_w(self, watts: float) -> None:
        """Set the board power limit. Needs root or admin rights."""
