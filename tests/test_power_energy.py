"""measure_energy and PowerSampler on a FakeGPU with virtual time: every figure is hand-computed."""

from __future__ import annotations

import threading
import time

import pytest

from carm_advisor.errors import MeasurementError, NotSupportedError
from carm_advisor.power import FakeGPU, PowerSampler, measure_energy, relative_spread


def fake_at(power_w: float, **kwargs) -> FakeGPU:
    return FakeGPU(power_w=power_w, sm_clock_mhz=1755.0, **kwargs)


def test_joules_and_watts_per_call_match_hand_calculation():
    # 350 W for 10 ms per call: 3.5 J per call.
    gpu = fake_at(350.0)
    m = measure_energy(lambda: gpu.advance(0.010), gpu, clock=gpu.now_s)
    assert m.time_per_call_s == pytest.approx(0.010, rel=1e-9)
    assert m.energy_per_call_j == pytest.approx(3.5, rel=1e-4)  # 1 mJ counter resolution
    assert m.power_w == pytest.approx(350.0, rel=1e-4)
    assert m.sm_clock_mhz == 1755.0
    assert m.n_windows == 3 and len(m.windows) == 3


def test_every_window_lasts_at_least_min_window_s():
    gpu = fake_at(300.0)
    m = measure_energy(lambda: gpu.advance(0.003), gpu, min_window_s=0.5, repeats=4, clock=gpu.now_s)
    assert m.n_windows == 4
    assert all(w.time_s >= 0.5 for w in m.windows)
    assert m.min_window_s == 0.5


def test_a_window_that_runs_short_is_extended_with_more_calls():
    # The work gets 10x faster after the first 50 calls (e.g. a cache warms up): windows planned
    # from the slow calls (calibration: 12) run short and must be extended, not reported short. The
    # first window still holds slow calls; the median over three windows is that of the fast ones.
    gpu = fake_at(200.0)
    count = {"calls": 0}

    def fn():
        count["calls"] += 1
        gpu.advance(0.01 if count["calls"] <= 50 else 0.001)

    m = measure_energy(fn, gpu, min_window_s=1.0, repeats=3, warmup=0, clock=gpu.now_s)
    assert all(w.time_s >= 1.0 for w in m.windows)
    assert any(w.calls > m.calls_per_window for w in m.windows)
    assert m.time_per_call_s == pytest.approx(0.001, rel=1e-6)


def test_calibration_grows_a_short_batch_only_as_far_as_a_tenth_of_a_window():
    # 14 ms calls, 0.3 s windows: 1 call (14 ms) says 3 calls last the 30 ms tenth; growing tenfold
    # would run 10 more (0.14 s) before the first window.
    gpu = fake_at(400.0)
    count = {"calls": 0}

    def fn():
        count["calls"] += 1
        gpu.advance(0.014)

    m = measure_energy(fn, gpu, min_window_s=0.3, repeats=2, warmup=0, clock=gpu.now_s)
    calibration_calls = count["calls"] - sum(w.calls for w in m.windows)
    assert calibration_calls == 1 + 3
    assert m.calls_per_window == 23   # 0.3 s / 14 ms with 5% margin
    assert all(w.time_s >= 0.3 for w in m.windows)


def test_sync_drains_queued_work_before_each_window_end_is_read():
    # fn only queues 10 ms of GPU work; sync() runs it. Without sync at the window ends the window
    # would show no time and no energy.
    gpu = fake_at(350.0)
    queued = {"s": 0.0}
    sync_times = []

    def fn():
        queued["s"] += 0.010

    def sync():
        gpu.advance(queued["s"])
        queued["s"] = 0.0
        sync_times.append(gpu.now_s())

    m = measure_energy(fn, gpu, sync=sync, clock=gpu.now_s)
    assert m.time_per_call_s == pytest.approx(0.010, rel=1e-9)
    assert m.energy_per_call_j == pytest.approx(3.5, rel=1e-4)
    for w in m.windows:
        assert w.start_s in sync_times and w.end_s in sync_times
        assert w.time_s >= 1.0


def test_window_energy_is_the_power_integral_between_the_window_ends():
    # A replayed trace with power changing every 0.3 s: each window's joules must equal the exact
    # integral over [start_s, end_s] (to the counter's 1 mJ steps at each end).
    trace = [(0.3 * i, 250.0 if i % 2 else 450.0, 1500.0) for i in range(40)]
    gpu = FakeGPU.from_trace(trace)
    m = measure_energy(lambda: gpu.advance(0.007), gpu, min_window_s=1.0, clock=gpu.now_s)
    for w in m.windows:
        assert w.energy_j == pytest.approx(gpu.energy_j_between(w.start_s, w.end_s), abs=0.002)


def test_spread_is_max_minus_min_over_median():
    assert relative_spread([0.9, 1.0, 1.1]) == pytest.approx(0.2)
    assert relative_spread([1.0, 3.0]) == pytest.approx(1.0)  # median 2
    assert relative_spread([2.0, 2.0, 2.0]) == 0.0
    with pytest.raises(MeasurementError):
        relative_spread([])


def test_reported_spreads_are_those_of_the_windows():
    gpu = fake_at(350.0)
    m = measure_energy(lambda: gpu.advance(0.01), gpu, min_window_s=0.2, clock=gpu.now_s)
    assert m.time_spread_rel == relative_spread([w.time_per_call_s for w in m.windows])
    assert m.energy_spread_rel == relative_spread([w.energy_per_call_j for w in m.windows])
    assert m.time_spread_rel < 1e-6  # identical windows


def test_stepping_energy_counter_error_stays_within_one_step_per_window():
    # NVML's counter advances every ~0.1 s: at 350 W a window may be off by one 35 J step.
    gpu = fake_at(350.0, energy_update_period_s=0.1)
    m = measure_energy(lambda: gpu.advance(0.01), gpu, min_window_s=1.0, clock=gpu.now_s)
    for w in m.windows:
        assert abs(w.energy_j - 350.0 * w.time_s) <= 35.0 + 1e-6
    assert m.power_w == pytest.approx(350.0, rel=0.1)


def test_without_a_gpu_only_time_is_measured():
    t = {"s": 0.0}

    def fn():
        t["s"] += 0.02

    m = measure_energy(fn, None, min_window_s=0.5, repeats=2, clock=lambda: t["s"])
    assert m.time_per_call_s == pytest.approx(0.02)
    assert m.energy_per_call_j is None and m.power_w is None and m.sm_clock_mhz is None
    assert m.energy_spread_rel is None and m.samples == ()
    assert all(w.energy_j is None for w in m.windows)


def test_warmup_calls_run_before_any_window():
    gpu = fake_at(100.0)
    calls = []
    m = measure_energy(
        lambda: (calls.append(gpu.now_s()), gpu.advance(0.01)), gpu, warmup=5, min_window_s=0.1,
        repeats=1, clock=gpu.now_s,
    )
    assert len([c for c in calls if c < m.windows[0].start_s]) >= 5
    assert calls[:5] == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_window_s": 0.0}, "min_window_s > 0"),
        ({"repeats": 0}, "repeats >= 1"),
        ({"warmup": -1}, "warmup >= 0"),
    ],
)
def test_invalid_settings_say_expected_and_received(kwargs, message):
    gpu = fake_at(100.0)
    with pytest.raises(MeasurementError, match=message):
        measure_energy(lambda: gpu.advance(0.01), gpu, clock=gpu.now_s, **kwargs)


def test_a_clock_that_never_moves_fails_instead_of_looping_forever():
    gpu = fake_at(100.0)
    with pytest.raises(MeasurementError, match="measurable time"):
        measure_energy(lambda: None, gpu, clock=gpu.now_s)


def test_an_energy_counter_going_backwards_is_an_error():
    class Rewinding(FakeGPU):
        readings = iter([5_000, 1_000])

        def total_energy_mj(self) -> int:
            return next(self.readings)

    gpu = Rewinding(power_w=100.0)
    with pytest.raises(MeasurementError, match="monotonic"):
        measure_energy(lambda: gpu.advance(0.01), gpu, min_window_s=0.1, repeats=1, clock=gpu.now_s)


# --- PowerSampler ----------------------------------------------------------------------------


def test_sampler_records_about_ten_readings_a_second_and_its_thread_stops():
    gpu = FakeGPU(power_w=250.0, sm_clock_mhz=1410.0, clock=time.perf_counter)
    before = threading.active_count()
    with PowerSampler(gpu, interval_s=0.02) as sampler:
        assert sampler.running
        time.sleep(0.15)
    assert not sampler.running and threading.active_count() == before
    # 0.15 s at 50 Hz: ~7 periodic readings, plus one on entry and one on exit.
    assert 3 <= len(sampler.samples) <= 11  # lower bound loose: a busy CI core may delay the thread
    assert sampler.mean_power_w() == 250.0 and sampler.mean_sm_clock_mhz() == 1410.0
    n = len(sampler.samples)
    time.sleep(0.05)
    assert len(sampler.samples) == n  # nothing more after exit
    times = [s.t_s for s in sampler.samples]
    assert times == sorted(times)


def test_sampler_stops_when_the_block_raises():
    gpu = FakeGPU(clock=time.perf_counter)
    with pytest.raises(RuntimeError):
        with PowerSampler(gpu, interval_s=0.01) as sampler:
            raise RuntimeError("boom")
    assert not sampler.running


def test_sampler_keeps_a_reading_error_and_stops_sampling():
    class NoClocks(FakeGPU):
        def sm_clock_mhz(self) -> float:
            raise NotSupportedError("sm_clock_mhz is not supported (fake)")

    with PowerSampler(NoClocks(), interval_s=0.01) as sampler:
        time.sleep(0.03)
    assert isinstance(sampler.error, NotSupportedError)
    assert sampler.samples == [] and sampler.mean_sm_clock_mhz() is None
    assert not sampler.running


def test_fixed_calls_per_window_skip_calibration_and_warmup():
    # 4 calls of 0.3 s per window: 1.2 s >= 1 s, so no window is extended; 2 windows -> 8 calls in all.
    gpu = fake_at(200.0)
    calls = []
    m = measure_energy(lambda: (calls.append(1), gpu.advance(0.3)), gpu, min_window_s=1.0, repeats=2, warmup=0,
                       calls_per_window=4, clock=gpu.now_s)
    assert len(calls) == 8 and [w.calls for w in m.windows] == [4, 4]
    assert m.windows[0].time_s == pytest.approx(1.2) and m.energy_per_call_j == pytest.approx(60.0, rel=1e-4)


def test_fixed_calls_that_fall_short_of_the_window_get_more_calls():
    # 2 planned calls of 0.3 s = 0.6 s < 1 s: the window grows by ceil(0.4 / 0.3 * 1.05) = 2 calls to 1.2 s.
    gpu = fake_at(200.0)
    m = measure_energy(lambda: gpu.advance(0.3), gpu, min_window_s=1.0, repeats=1, warmup=0, calls_per_window=2,
                       clock=gpu.now_s)
    assert m.windows[0].calls == 4 and m.windows[0].time_s == pytest.approx(1.2)


def test_calls_per_window_below_one_is_refused():
    with pytest.raises(MeasurementError, match="calls_per_window >= 1"):
        measure_energy(lambda: None, None, calls_per_window=0)


def test_idle_power_is_the_energy_over_one_sleep_window():
    # 85 W idle over a 0.5 s window: 42.5 J / 0.5 s
    from carm_advisor.power.energy import idle_power_w

    gpu = fake_at(85.0)
    assert idle_power_w(gpu, 0.5, clock=gpu.now_s, sleep=gpu.advance) == pytest.approx(85.0, rel=1e-4)


def test_idle_power_is_none_when_the_gpu_has_no_energy_counter():
    from carm_advisor.power.energy import idle_power_w

    class NoCounter(FakeGPU):
        def total_energy_mj(self) -> int:
            raise NotSupportedError("total_energy_mj is not supported (fake)")

    gpu = NoCounter()
    assert idle_power_w(gpu, 0.5, clock=gpu.now_s, sleep=gpu.advance) is None
