"""SM clocks in a measured study (--apply-clocks): the GPU whose clocks trials may lock, the clocks searched by
default, and the lock around one trial, always through the ClockController (restored on every way out)."""

from __future__ import annotations

import contextlib

from carm_advisor.errors import NoPermissionError
from carm_advisor.power.clocks import ENV_NO_CLOCK_CONTROL, ClockController, clock_control_disabled_by_env
from carm_advisor.power.nvml import open_visible_gpu


def clock_gpu(apply_clocks: bool, gpu=None):
    """The GPU whose clocks trials may lock; refuses at once (NoPermissionError) where that is not allowed."""
    if not apply_clocks:
        return None
    if clock_control_disabled_by_env():
        raise NoPermissionError(f"--apply-clocks refused: {ENV_NO_CLOCK_CONTROL} is set (this GPU's settings must not change)")
    gpu = gpu or open_visible_gpu()   # the GPU this process measures on, whatever CUDA_VISIBLE_DEVICES says
    # Probe the permission now, not after an hour of trials: lock at the top clock and restore.
    with ClockController(gpu, allow_changes=True) as ctl:
        top = max(gpu.supported_sm_clocks_mhz())
        ctl.lock_sm_clocks_mhz(top, top)
    return gpu


def default_clocks(gpu) -> tuple[float, ...]:
    supported = sorted(gpu.supported_sm_clocks_mhz(), reverse=True)
    # The top clock and four steps down to about 55% of it: where DVFS savings usually lie.
    top = supported[0]
    targets = [top * f for f in (1.0, 0.9, 0.8, 0.7, 0.55)]
    return tuple(sorted({min(supported, key=lambda c: abs(c - t)) for t in targets}, reverse=True))


@contextlib.contextmanager
def clock_lock(gpu, sm_clock_mhz: float | None):
    """Lock the SM clock for one trial through the ClockController (restored on every way out)."""
    if gpu is None or sm_clock_mhz is None:
        yield
        return
    with ClockController(gpu, allow_changes=True, sm_clocks_mhz=(sm_clock_mhz, sm_clock_mhz)):
        yield
