"""One-pass profiler: kernel-to-layer attribution on hand-made event lists, and the layer ranges."""

import contextlib
import warnings

import keras
import pytest

from carm_advisor.mapping.walker import iter_layer_calls
from carm_advisor.measure.profiled import (
    RANGE_PREFIX,
    Launch,
    Range,
    attribute_kernels,
    layer_times_s,
    named_layer_ranges,
    share_energy,
)


def test_kernels_go_to_the_innermost_range_of_their_thread_and_the_rest_is_outside():
    ranges = [Range("outer", 1, 0.0, 100.0), Range("inner", 1, 20.0, 30.0), Range("other", 2, 200.0, 300.0)]
    launches = [
        Launch(1, 5.0, 3.0),     # outer only
        Launch(1, 25.0, 7.0),    # inside inner, which sits inside outer: inner
        Launch(1, 50.0, 2.0),    # outer again, after inner closed
        Launch(1, 150.0, 4.0),   # after every range of thread 1: outside
        Launch(3, 25.0, 1.0),    # a thread with no ranges: outside
        Launch(2, 250.0, 6.0),   # thread 2's range
    ]
    per_range, outside = attribute_kernels(ranges, launches)
    assert per_range == [5.0, 7.0, 6.0]
    assert outside == 5.0


def test_a_launch_on_a_boundary_belongs_to_the_range_that_starts_there():
    per_range, outside = attribute_kernels([Range("a", 0, 0.0, 10.0), Range("b", 0, 10.0, 20.0)], [Launch(0, 10.0, 1.5)])
    assert per_range == [0.0, 1.5] and outside == 0.0


def test_layer_time_is_the_median_over_iterations_in_seconds_with_its_spread():
    ranges = [Range("a", 0, 0, 1), Range("b", 0, 1, 2)] * 3
    times = layer_times_s(ranges, [10.0, 1.0, 20.0, 1.0, 40.0, 1.0], iterations=3)
    assert times["a"][0] == pytest.approx(20e-6)
    assert times["a"][1] == pytest.approx((40 - 10) / 20)
    assert times["b"] == (pytest.approx(1e-6), 0.0)


def test_energy_is_shared_in_proportion_to_time():
    assert share_energy({"a": 1.0, "b": 3.0}, 8.0) == {"a": pytest.approx(2.0), "b": pytest.approx(6.0)}
    assert share_energy({"a": 1.0}, None) == {"a": None}


def test_every_call_of_a_shared_layer_gets_its_own_walker_name_each_model_call():
    inp = keras.Input((3,))
    shared = keras.layers.Dense(3, name="shared")
    out = keras.layers.Dense(2, name="head")(shared(shared(inp)))
    model = keras.Model(inp, out)
    calls = list(iter_layer_calls(model, 2))
    opened = []

    @contextlib.contextmanager
    def record(name):
        opened.append(name)
        yield

    x = keras.ops.ones((2, 3))
    with named_layer_ranges(calls, record) as ctl:
        for _ in range(2):
            ctl.reset()
            model(x)
    once = [RANGE_PREFIX + "shared", RANGE_PREFIX + "shared#1", RANGE_PREFIX + "head"]
    assert opened == once * 2
    assert "call" not in vars(shared)  # the wrapper is gone afterwards


def test_identical_layer_calls_are_measured_once_and_mapped_back():
    from carm_advisor.measure.profiled import unique_calls

    inp = keras.Input((8, 8, 4))
    a = keras.layers.Conv2D(4, 3, padding="same", name="a")(inp)
    b = keras.layers.Conv2D(4, 3, padding="same", name="b")(a)      # same config and shapes as a
    c = keras.layers.Conv2D(4, 1, padding="same", name="c")(b)      # another kernel size
    model = keras.Model(inp, c)
    reps, mapping = unique_calls(list(iter_layer_calls(model, 2)))
    assert [r.path for r in reps] == ["a", "c"]
    assert mapping == {"a": "a", "b": "a", "c": "c"}


@pytest.mark.parametrize("method, failing, expected", [
    ("profiled", False, "profile_run"), ("layers", False, "measure_run"), ("profiled", True, "measure_run"),
])
def test_analyze_measures_torch_with_one_profiled_pass_unless_asked_or_it_fails(monkeypatch, method, failing, expected):
    import carm_advisor.advise.analyze as analysis
    from carm_advisor.errors import MeasurementError
    from carm_advisor.measure import backends, profiled

    def fake_profile_run(*a, **k):
        if failing:
            raise MeasurementError("no kernels")
        return "profile_run"

    monkeypatch.setattr(analysis, "gpu_count", lambda: 1)   # analyze looks both up in its own namespace
    monkeypatch.setattr(analysis, "measure_run", lambda *a, **k: "measure_run")
    monkeypatch.setattr(backends, "active_backend", lambda: "torch")
    monkeypatch.setattr(backends.get("torch"), "has_gpu", lambda: True)
    monkeypatch.setattr(profiled, "profile_run", fake_profile_run)
    options = {"gpu": object(), "training_step": False, "method": method}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = analysis._load_or_measure(None, 4, "auto", None, False, False, options)
    assert got == expected
    assert any("one-pass profile failed" in str(w.message) for w in caught) == failing
