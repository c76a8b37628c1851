"""The one place that changes a GPU's SM clocks or power limit, and always puts them back.

Off by default: a shared GPU's settings must never change unasked, so a change needs
`allow_changes=True`, and the environment variable CARM_ADVISOR_NO_CLOCK_CONTROL=1 refuses it even then.
Whatever was changed is restored on every way out of the `with` block: normal exit, exception,
SIGINT, SIGTERM (handlers restore, then hand the signal to whoever had it before) and, as a last
resort, atexit. NVML cannot read back a clock lock, so "restore" means: reset locked clocks (which
also drops a lock someone else set before) and set the power-management limit back to the value
read before the first change (not the enforced limit, which another, lower cap may undercut).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from carm_advisor.errors import NoPermissionError, PowerError
from carm_advisor.power._base import GPU

ENV_NO_CLOCK_CONTROL = "CARM_ADVISOR_NO_CLOCK_CONTROL"
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def clock_control_disabled_by_env() -> bool:
    """True when CARM_ADVISOR_NO_CLOCK_CONTROL is set to anything but '', '0', 'false' or 'no'."""
    value = os.environ.get(ENV_NO_CLOCK_CONTROL, "").strip().lower()
    return value not in ("", "0", "false", "no")


class ClockController:
    """Context manager for SM clock locks and power limits, restoring the previous settings on exit.

    >>> with ClockController(gpu, allow_changes=True, sm_clocks_mhz=(1410, 1410)) as ctl:
    ...     run_sweep()
    ...     ctl.set_power_limit_w(500)   # more changes inside the block are restored too

    Without a requested change it does nothing at all (no handlers, no NVML writes), so code may
    always wrap a measurement in it.
    """

    def __init__(
        self,
        gpu: GPU,
        allow_changes: bool = False,
        *,
        sm_clocks_mhz: float | tuple[float, float] | None = None,
        power_limit_w: float | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.gpu = gpu
        self.allow_changes = allow_changes
        self.handle_signals = handle_signals
        self._requested_clocks_mhz = sm_clocks_mhz
        self._requested_power_limit_w = power_limit_w
        self._entered = False
        self._clocks_locked = False
        self._saved_power_limit_w: float | None = None
        self._previous_handlers: dict[int, Any] = {}
        self._armed = False
        self._restoring = False
        self._pending_signal: tuple[int, FrameType | None] | None = None

    # --- context ------------------------------------------------------------------------------

    def __enter__(self) -> ClockController:
        if self._entered:
            raise PowerError("Expected a ClockController not yet entered, Received: one already in use")
        self._entered = True
        try:
            if self._requested_power_limit_w is not None:
                self.set_power_limit_w(self._requested_power_limit_w)
            if self._requested_clocks_mhz is not None:
                if isinstance(self._requested_clocks_mhz, tuple):
                    self.lock_sm_clocks_mhz(*self._requested_clocks_mhz)
                else:
                    self.lock_sm_clocks_mhz(self._requested_clocks_mhz)
        except BaseException:
            # __exit__ will not run when __enter__ raises: undo a half-applied request here.
            self._entered = False
            self.restore()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered = False
        self.restore()

    @property
    def changed(self) -> bool:
        """Whether a setting is currently changed by this controller (and will be restored)."""
        return self._clocks_locked or self._saved_power_limit_w is not None

    # --- changes ------------------------------------------------------------------------------

    def lock_sm_clocks_mhz(self, min_mhz: float, max_mhz: float | None = None) -> None:
        """Lock the SM clock into [min_mhz, max_mhz] (one value: a fixed clock)."""
        max_mhz = min_mhz if max_mhz is None else max_mhz
        self._check_allowed()
        supported = self.gpu.supported_sm_clocks_mhz()
        low, high = min(supported), max(supported)
        if not low <= min_mhz <= max_mhz <= high:
            raise PowerError(
                f"Expected SM clocks in the supported {low:g}-{high:g} MHz ({len(supported)} steps) "
                f"with min_mhz <= max_mhz, Received: min_mhz={min_mhz}, max_mhz={max_mhz}"
            )
        self._arm()
        was_locked = self._clocks_locked
        # Marked before the call: a signal arriving during it must still reset the clocks.
        self._clocks_locked = True
        try:
            self.gpu.lock_sm_clocks_mhz(min_mhz, max_mhz)
        except NoPermissionError as err:
            self._clocks_locked = was_locked
            raise _no_permission("locking SM clocks", self.gpu, err) from err
        except PowerError:
            self._clocks_locked = was_locked
            raise

    def set_power_limit_w(self, watts: float) -> None:
        """Set the board power limit; the limit read before the first change comes back on exit."""
        self._check_allowed()
        low_w, high_w = self.gpu.power_limit_range_w()
        if not low_w <= watts <= high_w:
            raise PowerError(
                f"Expected a power limit in [{low_w:g}, {high_w:g}] W, Received: power_limit_w={watts}"
            )
        self._arm()
        first_change = self._saved_power_limit_w is None
        if first_change:
            self._saved_power_limit_w = self.gpu.power_management_limit_w()
        try:
            self.gpu.set_power_limit_w(watts)
        except PowerError as err:
            if first_change:
                self._saved_power_limit_w = None  # the setter failed: nothing to put back
            if isinstance(err, NoPermissionError):
                raise _no_permission("setting the power limit", self.gpu, err) from err
            raise

    def _check_allowed(self) -> None:
        if clock_control_disabled_by_env():
            raise NoPermissionError(
                "clock and power-limit changes are disabled by "
                f"{ENV_NO_CLOCK_CONTROL}={os.environ.get(ENV_NO_CLOCK_CONTROL)} in the environment "
                "(this GPU's settings must not change); unset it to allow them"
            )
        if not self.allow_changes:
            raise NoPermissionError(
                "clock and power-limit changes are disabled; pass allow_changes=True (needs root) "
                "to lock SM clocks or set the power limit"
            )
        if not self._entered:
            raise PowerError(
                "Expected changes inside `with ClockController(...)`, Received: a call outside it "
                "(nothing would restore the settings)"
            )

    # --- restore ------------------------------------------------------------------------------

    def restore(self) -> None:
        """Put back what this controller changed. Idempotent; safe from signal handlers and atexit."""
        if self._restoring:
            return
        self._restoring = True
        failures: list[str] = []
        try:
            if self._saved_power_limit_w is not None:
                try:
                    self.gpu.set_power_limit_w(self._saved_power_limit_w)
                    self._saved_power_limit_w = None
                except PowerError as err:
                    failures.append(f"power limit {self._saved_power_limit_w:g} W ({err})")
            if self._clocks_locked:
                try:
                    self.gpu.reset_sm_clocks()
                    self._clocks_locked = False
                except PowerError as err:
                    failures.append(f"SM clock reset ({err})")
        finally:
            previous_handlers = self._disarm(keep_atexit=bool(failures))
            self._restoring = False
        pending, self._pending_signal = self._pending_signal, None
        if pending is not None:
            _redispatch(pending[0], pending[1], previous_handlers.get(pending[0], signal.SIG_DFL))
        if failures:
            raise PowerError(f"could not restore GPU settings: {'; '.join(failures)}")

    def _arm(self) -> None:
        """Before the first change: signal handlers (main thread only) and an atexit restore."""
        if self._armed:
            return
        self._armed = True
        atexit.register(self.restore)
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for signum in _HANDLED_SIGNALS:
                # An ignored signal will not end the process: leave it ignored.
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous_handlers[signum] = signal.signal(signum, self._on_signal)

    def _disarm(self, keep_atexit: bool) -> dict[int, Any]:
        previous = dict(self._previous_handlers)
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous_handlers.clear()
        if not keep_atexit:
            atexit.unregister(self.restore)
        self._armed = False
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._restoring:
            # Interrupting a restore would leave it half done: finish it, then deliver the signal.
            self._pending_signal = (signum, frame)
            return
        previous = self._previous_handlers.get(signum, signal.SIG_DFL)
        try:
            self.restore()
        finally:
            _redispatch(signum, frame, previous)


def _redispatch(signum: int, frame: FrameType | None, handler: Any) -> None:
    """Deliver a signal as if this controller had never intercepted it."""
    if handler == signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt
        return
    # SIG_DFL (or a handler installed outside Python): let the OS default action happen.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _no_permission(action: str, gpu: GPU, err: PowerError) -> NoPermissionError:
    return NoPermissionError(
        f"{action} needs root or admin rights and was not applied on {_gpu_label(gpu)} ({err})"
    )


def _gpu_label(gpu: GPU) -> str:
    try:
        return gpu.name()
    except PowerError:
        return "the GPU"
