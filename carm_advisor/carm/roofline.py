"""The Cache-Aware Roofline Model: pure math, no hardware or framework import.

A CARM has one flat roof per compute path (FLOP/s) and one slope per memory level (bytes/s, as the
SMs see it). A kernel of arithmetic intensity AI (FLOP per byte requested by the SMs) run on path p
with its traffic served from level m can reach at most

    attainable(AI, p, m) = min(bandwidth[m] * AI, peak[p])

1 multiply-add counts as 2 FLOPs everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from carm_advisor.errors import ProfileError

# Compute paths: key -> label. Integer paths count operations (OP/s); they share the FLOP/s axis.
COMPUTE_PATHS: dict[str, str] = {
    "fp64": "FP64 (CUDA cores)",
    "fp32": "FP32 (CUDA cores)",
    "fp16x2": "FP16x2 (CUDA cores)",
    "tc_tf32": "TF32 Tensor Core",
    "tc_fp16": "FP16 Tensor Core (FP32 acc.)",
    "tc_fp16_f16acc": "FP16 Tensor Core (FP16 acc.)",
    "tc_bf16": "BF16 Tensor Core",
    "tc_fp8_e4m3": "FP8 e4m3 Tensor Core",
    "tc_fp8_e5m2": "FP8 e5m2 Tensor Core",
    "tc_int8": "INT8 Tensor Core",
}

# Memory levels, fastest first: key -> label.
MEMORY_LEVELS: dict[str, str] = {
    "shared": "Shared memory",
    "l1": "L1",
    "l2": "L2",
    "hbm": "HBM",
}


@dataclass(frozen=True)
class Placement:
    """Where one layer (or kernel) sits on the CARM."""

    ai: float                          # FLOP/byte
    path: str                          # compute roof key
    level: str                         # memory slope key
    attainable_flops_per_s: float      # min(slope * AI, roof)
    bound: str                         # "compute:<path>" or "memory:<level>"
    ridge_ai: float                    # AI where the slope meets the roof
    achieved_flops_per_s: float | None = None

    @property
    def efficiency(self) -> float | None:
        """Achieved / attainable, in [0, 1] for a sane measurement; None when nothing was measured."""
        if self.achieved_flops_per_s is None or self.attainable_flops_per_s <= 0:
            return None
        return self.achieved_flops_per_s / self.attainable_flops_per_s

    @property
    def headroom(self) -> float | None:
        """How many times faster the layer could run under its own roofs (attainable / achieved)."""
        if not self.achieved_flops_per_s:
            return None
        return self.attainable_flops_per_s / self.achieved_flops_per_s

    @property
    def memory_bound(self) -> bool:
        return self.bound.startswith("memory:")


class CARM:
    """Roofs in FLOP/s per compute path and slopes in bytes/s per memory level."""

    def __init__(self, peak_flops_per_s: dict[str, float], bandwidth_bytes_per_s: dict[str, float]):
        for table, what in ((peak_flops_per_s, "compute roof"), (bandwidth_bytes_per_s, "memory slope")):
            for key, value in table.items():
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                    raise ProfileError(f"{what} '{key}' must be a positive number, received: {value!r}")
        if not peak_flops_per_s or not bandwidth_bytes_per_s:
            raise ProfileError("a CARM needs at least one compute roof and one memory slope")
        self.peak_flops_per_s = dict(peak_flops_per_s)
        self.bandwidth_bytes_per_s = dict(bandwidth_bytes_per_s)

    def _peak(self, path: str) -> float:
        try:
            return self.peak_flops_per_s[path]
        except KeyError:
            raise ProfileError(
                f"the profile has no compute roof '{path}'; it has: {', '.join(sorted(self.peak_flops_per_s))}"
            ) from None

    def _bandwidth(self, level: str) -> float:
        try:
            return self.bandwidth_bytes_per_s[level]
        except KeyError:
            raise ProfileError(
                f"the profile has no memory slope '{level}'; it has: {', '.join(sorted(self.bandwidth_bytes_per_s))}"
            ) from None

    def attainable_flops_per_s(self, ai: float, path: str, level: str) -> float:
        return min(self._bandwidth(level) * ai, self._peak(path))

    def ridge_ai(self, path: str, level: str) -> float:
        """Arithmetic intensity at which `level`'s slope meets `path`'s roof (FLOP/byte)."""
        return self._peak(path) / self._bandwidth(level)

    def time_s(self, flops: float, bytes_: float, path: str, level: str) -> float:
        """Shortest time the roofs allow for `flops` on `path` with `bytes_` from `level`."""
        return max(flops / self._peak(path), bytes_ / self._bandwidth(level))

    def place(self, ai: float, path: str, level: str, achieved_flops_per_s: float | None = None) -> Placement:
        ridge = self.ridge_ai(path, level)
        bound = f"memory:{level}" if ai < ridge else f"compute:{path}"
        return Placement(
            ai=ai,
            path=path,
            level=level,
            attainable_flops_per_s=self.attainable_flops_per_s(ai, path, level),
            bound=bound,
            ridge_ai=ridge,
            achieved_flops_per_s=achieved_flops_per_s,
        )

    def nearest_roof_above(self, ai: float, flops_per_s: float) -> tuple[str, float] | None:
        """The lowest roof (compute or memory) that lies at or above a measured point.

        Returns (key, attainable FLOP/s), keys prefixed "compute:" or "memory:"; None if the point is
        above every roof (a profile or mapping bug that callers must flag, never hide).
        """
        roofs = [(f"compute:{p}", v) for p, v in self.peak_flops_per_s.items()]
        roofs += [(f"memory:{m}", b * ai) for m, b in self.bandwidth_bytes_per_s.items()]
        above = [(k, v) for k, v in roofs if v >= flops_per_s]
        return min(above, key=lambda kv: kv[1]) if above else None

