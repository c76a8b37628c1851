"""Power and energy-efficiency CARM: pure math.

    P(AI) = P_const + e_flop[path] * F(AI) + e_byte[level] * B(AI)      (Choi/Vuduc; Ilic et al.)

with F the FLOP rate and B = F / AI the byte rate at `level`. Energy of a piece of work is then
E = P_const * t + e_flop * flops + e_byte * bytes. A GPU at its board power limit slows down until
P = limit, so the time the roofs allow is stretched to t >= (e_flop * flops + e_byte * bytes) /
(limit - P_const): the power cap is a third roof.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from carm_advisor.errors import ProfileError


@dataclass(frozen=True)
class PowerModel:
    constant_w: float                                   # drawn whenever a kernel runs (static + uncore)
    joules_per_flop: dict[str, float] = field(default_factory=dict)   # per compute path
    joules_per_byte: dict[str, float] = field(default_factory=dict)   # per memory level
    power_limit_w: float | None = None

    def __post_init__(self):
        if not (math.isfinite(self.constant_w) and self.constant_w >= 0):
            raise ProfileError(f"power model constant_w must be >= 0, received: {self.constant_w!r}")
        for table, what in ((self.joules_per_flop, "joules_per_flop"), (self.joules_per_byte, "joules_per_byte")):
            for key, value in table.items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                    raise ProfileError(f"power model {what}['{key}'] must be >= 0, received: {value!r}")
        if self.power_limit_w is not None and self.power_limit_w <= self.constant_w:
            raise ProfileError(
                f"power limit ({self.power_limit_w} W) must exceed the constant power ({self.constant_w} W)"
            )

    def _e_flop(self, path: str) -> float:
        if path not in self.joules_per_flop:
            raise ProfileError(f"the power model has no energy per FLOP for '{path}'")
        return self.joules_per_flop[path]

    def _e_byte(self, level: str) -> float:
        if level not in self.joules_per_byte:
            raise ProfileError(f"the power model has no energy per byte for '{level}'")
        return self.joules_per_byte[level]

    def dynamic_energy_j(self, flops: float, bytes_: float, path: str, level: str) -> float:
        return self._e_flop(path) * flops + self._e_byte(level) * bytes_

    def power_w(self, flops_per_s: float, bytes_per_s: float, path: str, level: str) -> float:
        """Uncapped board power for a kernel running at these rates."""
        return self.constant_w + self._e_flop(path) * flops_per_s + self._e_byte(level) * bytes_per_s

    def capped_time_s(self, roof_time_s: float, flops: float, bytes_: float, path: str, level: str) -> float:
        """The roofs' time, stretched where the power limit forbids running that fast."""
        if self.power_limit_w is None:
            return roof_time_s
        power_time_s = self.dynamic_energy_j(flops, bytes_, path, level) / (self.power_limit_w - self.constant_w)
        return max(roof_time_s, power_time_s)

    def energy_j(self, time_s: float, flops: float, bytes_: float, path: str, level: str) -> float:
        return self.constant_w * time_s + self.dynamic_energy_j(flops, bytes_, path, level)


def gflops_per_watt(flops: float, energy_j: float) -> float:
    """Energy efficiency: GFLOP/s per W is GFLOP per J."""
    return flops / energy_j / 1e9 if energy_j > 0 else float("nan")
