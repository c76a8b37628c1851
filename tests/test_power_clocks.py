"""ClockController: restores on every exit path, refuses cleanly, and changes nothing when refusing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from carm_advisor.errors import NoPermissionError, PowerError
from carm_advisor.power import ENV_NO_CLOCK_CONTROL, ClockController, FakeGPU

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clock_control_not_disabled(monkeypatch):
    # A developer or CI may export the kill switch; these tests set it explicitly where they need it.
    monkeypatch.delenv(ENV_NO_CLOCK_CONTROL, raising=False)


@pytest.fixture
def gpu() -> FakeGPU:
    return FakeGPU(power_limit_w=700.0, power_limit_range_w=(200.0, 700.0))


def let_signal_handlers_run() -> None:
    # Python runs signal handlers between bytecodes of the main thread; give it a few.
    for _ in range(50):
        time.sleep(0.001)


def assert_untouched(gpu: FakeGPU) -> None:
    assert gpu.locked_sm_clocks_mhz is None
    assert gpu.power_limit_w() == 700.0


# --- restore on every exit path --------------------------------------------------------------


def test_normal_exit_restores_clocks_and_power_limit(gpu):
    with ClockController(gpu, allow_changes=True, sm_clocks_mhz=(1410, 1500), power_limit_w=500) as ctl:
        assert gpu.locked_sm_clocks_mhz == (1410, 1500)
        assert gpu.power_limit_w() == 500.0
        assert ctl.changed
    assert_untouched(gpu)
    assert not ctl.changed
    assert set(gpu.calls[-2:]) == {("set_power_limit_w", (700.0,)), ("reset_sm_clocks", ())}


def test_exception_in_the_block_restores_and_propagates(gpu):
    with pytest.raises(RuntimeError, match="kernel failed"):
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500):
            raise RuntimeError("kernel failed")
    assert_untouched(gpu)


def test_changes_inside_the_block_restore_the_value_from_before_the_first_change(gpu):
    with ClockController(gpu, allow_changes=True) as ctl:
        for watts in (600, 400, 300):
            ctl.set_power_limit_w(watts)
        for mhz in (1980, 1410, 990):
            ctl.lock_sm_clocks_mhz(mhz)
        assert (gpu.power_limit_w(), gpu.locked_sm_clocks_mhz) == (300.0, (990, 990))
    assert_untouched(gpu)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_restores_settings_before_the_previous_handler_runs(gpu, signum):
    seen = []

    class Interrupted(Exception):
        pass

    def previous_handler(sig, frame):
        seen.append((sig, gpu.locked_sm_clocks_mhz, gpu.power_limit_w()))
        raise Interrupted

    original = signal.signal(signum, previous_handler)
    try:
        with pytest.raises(Interrupted):
            with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500):
                os.kill(os.getpid(), signum)
                let_signal_handlers_run()
        assert seen == [(signum, None, 700.0)]
        assert signal.getsignal(signum) is previous_handler  # our handler is gone again
    finally:
        signal.signal(signum, original)


def test_sigint_with_pythons_default_handler_restores_then_raises_keyboard_interrupt(gpu):
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410):
                os.kill(os.getpid(), signal.SIGINT)
                let_signal_handlers_run()
        assert_untouched(gpu)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, original)


def test_a_signal_during_restore_waits_until_the_restore_is_complete(gpu):
    class SignalledDuringReset(FakeGPU):
        def reset_sm_clocks(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            let_signal_handlers_run()  # the handler runs here, inside the restore
            super().reset_sm_clocks()

    gpu = SignalledDuringReset(power_limit_w=700.0)
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500):
                pass
        assert_untouched(gpu)
    finally:
        signal.signal(signal.SIGINT, original)


def test_an_ignored_signal_is_left_ignored(gpu):
    original = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410):
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            let_signal_handlers_run()
            assert gpu.locked_sm_clocks_mhz == (1410, 1410)  # still inside: nothing restored yet
        assert_untouched(gpu)
    finally:
        signal.signal(signal.SIGTERM, original)


def test_handlers_are_the_original_ones_after_exit(gpu):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410):
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before


# Child processes skip carm_advisor/__init__ (it imports Keras): only the power package is needed.
CHILD = r"""
import os, signal, sys, time, types
pkg = types.ModuleType("carm_advisor")
pkg.__path__ = [os.path.join(sys.argv[1], "carm_advisor")]
sys.modules["carm_advisor"] = pkg
from carm_advisor.power.clocks import ClockController
from carm_advisor.power.fake import FakeGPU

class LoggingGPU(FakeGPU):
    def lock_sm_clocks_mhz(self, a, b):
        super().lock_sm_clocks_mhz(a, b); print("lock", a, b, flush=True)
    def reset_sm_clocks(self):
        super().reset_sm_clocks(); print("reset", flush=True)
    def set_power_limit_w(self, w):
        super().set_power_limit_w(w); print("power_limit", w, flush=True)

ctl = ClockController(LoggingGPU(power_limit_w=700.0), allow_changes=True,
                      sm_clocks_mhz=1410, power_limit_w=500)
if sys.argv[2] == "sigterm":
    with ctl:
        print("inside", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("not reached", flush=True)
else:  # atexit: leave the block open and exit the interpreter
    ctl.__enter__()
    print("inside", flush=True)
    sys.exit(0)
"""


def run_child(mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV_NO_CLOCK_CONTROL}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO_ROOT), mode],
        capture_output=True, text=True, timeout=60, env=env,
    )


def test_sigterm_with_the_default_action_restores_then_terminates_the_process():
    done = run_child("sigterm")
    assert done.returncode == -signal.SIGTERM, done.stderr
    lines = done.stdout.split("\n")
    assert lines[:3] == ["power_limit 500", "lock 1410 1410", "inside"]
    assert set(lines[3:5]) == {"power_limit 700.0", "reset"}
    assert "not reached" not in done.stdout


def test_atexit_restores_settings_left_changed_at_interpreter_exit():
    done = run_child("atexit")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[2] == "inside"
    assert set(lines[3:5]) == {"power_limit 700.0", "reset"}


# --- refusals change nothing -----------------------------------------------------------------


def test_without_allow_changes_any_change_is_refused_and_nothing_is_touched(gpu):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(NoPermissionError, match="pass allow_changes=True") as info:
        with ClockController(gpu, sm_clocks_mhz=1410):
            pass
    assert "\n" not in str(info.value)
    assert gpu.attempts == [] and gpu.calls == []
    assert_untouched(gpu)
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_without_allow_changes_methods_inside_the_block_are_refused(gpu):
    with ClockController(gpu) as ctl:
        with pytest.raises(NoPermissionError):
            ctl.set_power_limit_w(500)
        with pytest.raises(NoPermissionError):
            ctl.lock_sm_clocks_mhz(1410)
    assert gpu.attempts == []


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_environment_kill_switch_refuses_even_with_allow_changes(gpu, monkeypatch, value):
    monkeypatch.setenv(ENV_NO_CLOCK_CONTROL, value)
    with pytest.raises(NoPermissionError, match=ENV_NO_CLOCK_CONTROL) as info:
        with ClockController(gpu, allow_changes=True, power_limit_w=500):
            pass
    assert "\n" not in str(info.value)
    assert gpu.attempts == [] and gpu.calls == []
    assert_untouched(gpu)


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_environment_kill_switch_off_values_allow_changes(gpu, monkeypatch, value):
    monkeypatch.setenv(ENV_NO_CLOCK_CONTROL, value)
    with ClockController(gpu, allow_changes=True, power_limit_w=500):
        assert gpu.power_limit_w() == 500.0
    assert_untouched(gpu)


def test_without_nvml_permission_raises_one_line_and_changes_nothing():
    gpu = FakeGPU(power_limit_w=700.0, permission=False)
    with pytest.raises(NoPermissionError, match="needs root") as info:
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500):
            pass
    assert "\n" not in str(info.value)
    assert gpu.calls == []
    assert gpu.attempts == [("set_power_limit_w", (500,))]  # the first refusal stops everything
    assert_untouched(gpu)


def test_a_failure_half_way_through_entering_undoes_the_part_applied():
    class ClocksLocked(FakeGPU):
        def lock_sm_clocks_mhz(self, min_mhz, max_mhz):
            raise NoPermissionError("lock_sm_clocks_mhz needs root (fake)")

    gpu = ClocksLocked(power_limit_w=700.0)
    with pytest.raises(NoPermissionError):
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500):
            pass
    assert gpu.calls == [("set_power_limit_w", (500,)), ("set_power_limit_w", (700.0,))]
    assert_untouched(gpu)


def test_unsupported_clock_is_refused_with_the_valid_range(gpu):
    with pytest.raises(PowerError, match=r"345-1980 MHz \(110 steps\).*Received: min_mhz=3000"):
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=3000):
            pass
    with pytest.raises(PowerError, match="min_mhz <= max_mhz"):
        with ClockController(gpu, allow_changes=True, sm_clocks_mhz=(1500, 1410)):
            pass
    assert gpu.attempts == []


def test_power_limit_outside_the_range_is_refused_with_the_valid_range(gpu):
    with pytest.raises(PowerError, match=r"\[200, 700\] W, Received: power_limit_w=800"):
        with ClockController(gpu, allow_changes=True, power_limit_w=800):
            pass
    assert gpu.attempts == []


def test_no_requested_change_means_no_handlers_and_no_calls(gpu):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with ClockController(gpu):
        assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert gpu.attempts == []


def test_changes_outside_the_with_block_are_refused(gpu):
    ctl = ClockController(gpu, allow_changes=True)
    with pytest.raises(PowerError, match="inside `with ClockController"):
        ctl.lock_sm_clocks_mhz(1410)
    assert gpu.attempts == []


def test_a_failed_restore_is_reported_and_retried_later(gpu):
    class StuckLimit(FakeGPU):
        stuck = True

        def set_power_limit_w(self, watts):
            if watts == 700.0 and self.stuck:
                raise PowerError("set_power_limit_w failed (fake)")
            super().set_power_limit_w(watts)

    gpu = StuckLimit(power_limit_w=700.0)
    ctl = ClockController(gpu, allow_changes=True, sm_clocks_mhz=1410, power_limit_w=500)
    with pytest.raises(PowerError, match="could not restore GPU settings: power limit 700 W"):
        with ctl:
            pass
    assert gpu.locked_sm_clocks_mhz is None  # the clock reset still ran
    assert ctl.changed  # the power limit is still owed (atexit will try again)
    gpu.stuck = False
    ctl.restore()
    assert_untouched(gpu)
    assert not ctl.changed


def test_restore_puts_back_the_management_limit_not_the_enforced_one():
    # Enforced 600 W (another cap binds) under a 700 W management limit: restoring 600 would
    # silently lower the user's limit.
    class OtherCapBinds(FakeGPU):
        def power_limit_w(self) -> float:
            return min(600.0, super().power_limit_w())

    gpu = OtherCapBinds(power_limit_w=700.0)
    with ClockController(gpu, allow_changes=True, power_limit_w=500):
        pass
    assert gpu.calls == [("set_power_limit_w", (500,)), ("set_power_limit_w", (700.0,))]
