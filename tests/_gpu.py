"""The suite's one answer to "is there an NVIDIA GPU here?": what NVML counts (the product's own check)."""

from __future__ import annotations

import functools

from carm_advisor.errors import CarmError
from carm_advisor.power.nvml import gpu_count

NO_GPU_REASON = "no NVIDIA GPU: NVML counts none here (carm_advisor.power.nvml.gpu_count() == 0)"


@functools.cache
def gpu_present() -> bool:
    try:
        return gpu_count() > 0
    except CarmError:   # NVML present but failing: as good as no GPU for the tests
        return False
