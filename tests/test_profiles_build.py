"""Measured profiles (measure/profile.py): re-selection from a recorded run, and the cache keyed by kernel
sources, against hand calculations."""

import pytest

from carm_advisor.carm import fitting as F
from carm_advisor.errors import MeasurementError
from carm_advisor.measure import profile as P


def test_cached_profiles_are_told_apart_by_kernel_source_hash(tmp_path, monkeypatch):
    from carm_advisor.profiles.cache import cached_profile_for, store_profile
    from carm_advisor.profiles.profile import SCHEMA, profile_from_dict

    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))

    def profile(hash_, value):
        return profile_from_dict({
            "schema": SCHEMA, "device": {"name": "G", "uuid": "GPU-1", "driver": "580", "sm_clock_max_mhz": 1980},
            "provenance": {"source": "measured", "kernel_source_hash": hash_},
            "ceilings": {"fp32": {"kind": "compute", "value": value, "provenance": {"source": "measured"}},
                         "hbm": {"kind": "memory", "value": 1e12, "provenance": {"source": "measured"}}}})

    store_profile(profile("aaaaaaaaaaaaaaaa", 1e13))
    store_profile(profile("bbbbbbbbbbbbbbbb", 2e13))
    device = {"uuid": "GPU-1", "driver": "580"}
    assert cached_profile_for(device, "aaaaaaaaaaaaaaaa").ceilings["fp32"].value == 1e13
    assert cached_profile_for(device, "bbbbbbbbbbbbbbbb").ceilings["fp32"].value == 2e13
    assert cached_profile_for(device, "cccccccccccccccc") is None
    assert cached_profile_for({"uuid": "GPU-2", "driver": "580"}) is None


def test_reselect_recorded_leaves_out_dropped_runs_and_keeps_every_figure_as_measured():
    run = lambda name, kind, key, rate, **kw: F.BenchmarkRun(name, kind, key, key if kind == "memory" else kw.pop("level", ""),  # noqa: E731
                                                             "v", rate, 0.01, 3, 500.0, 1980.0, 0.1, **kw).to_dict()
    doc = {"device": {"idle_power_w": 100.0, "power_limit_w": 700.0}, "provenance": {"created": "2026-12-02T23:00:00",
                                                                                     "flags": ["stale flag"]},
           "counter_check": [{"name": "x", "flops_ratio": 1.1, "bytes_ratio": None, "ok": False}],
           "benchmarks": [run("fp32_fma", "compute", "fp32", 60e12, flops_per_s=60e12),
                          run("hbm_read", "memory", "hbm", 4.6e12, bytes_per_s=4.6e12),
                          run("hbm_read_bulk", "memory", "hbm", 5.0e12, bytes_per_s=5.0e12),
                          run("mix_c8", "mixed", "fp32", 0, level="hbm", flops_per_s=17.5e12, bytes_per_s=4.375e12,
                              intensity=4.0)]}
    out = P.reselect_recorded(doc, {"hbm_read_bulk": "flawed walk"})
    assert out["ceilings"]["hbm"]["value"] == 4.6e12           # the next best HBM run, unchanged
    assert out["ceilings"]["hbm"]["provenance"]["date"] == "2026-12-02"
    # the sweep point against the new slope: 17.5e12 / (4.6e12 * 4) = 0.951 (0.875 against the 5e12 slope)
    assert out["sweep"]["points"][0]["ratio"] == pytest.approx(17.5 / 18.4)
    assert out["provenance"]["dropped"] == {"hbm_read_bulk": "flawed walk"}
    assert out["provenance"]["flags"][0].startswith("hbm_read_bulk: left out")
    assert "x: counters see flops x1.1, bytes xNone of what it declares" in out["provenance"]["flags"]
    assert "stale flag" not in out["provenance"]["flags"]        # flags are derived again, not carried
    assert out["power_model"]["joules_per_byte"]["hbm"] == pytest.approx(400 / 4.6e12)
    assert out["power_model"]["provenance"]["date"] == "2026-12-02"   # the run's day, not the day of re-selection
    assert P.reselect_recorded(doc, {})["ceilings"]["hbm"]["value"] == 5.0e12
    # the embedded reference is rebuilt from this: no carried curve (embed_profile.py --duty sets its own)
    assert not any(k in out["power_model"] for k in P.DUTY_KEYS)
    with pytest.raises(MeasurementError, match="does not hold"):
        P.reselect_recorded(doc, {"nope": "?"})


def _embedded_power_model() -> dict:
    import json
    from pathlib import Path

    import carm_advisor

    return json.loads((Path(carm_advisor.__file__).parent / "profiles" / "nvidia_h200.json").read_text())["power_model"]


def test_a_measured_power_model_without_duty_curves_takes_the_embedded_ones_and_says_so():
    # A ceilings run measures no layer: its profile carries the reference's layer-fitted curves, labelled
    ref = _embedded_power_model()
    pm = {"constant_w": 110.0, "joules_per_flop": {"fp32": 2e-12}, "joules_per_byte": {"hbm": 1e-10}}
    out = P.with_carried_duty(pm)
    carried = [k for k in P.DUTY_KEYS if ref.get(k)]
    assert carried and all(k in out for k in carried)
    for k in carried:
        assert {kk: v for kk, v in out[k].items() if kk != "source"} == {kk: v for kk, v in ref[k].items() if kk != "source"}
        assert out[k]["source"].startswith("carried from the embedded NVIDIA H200 profile")
        assert P.CARRIED_DUTY_CHECK in out[k]["source"]
    assert out["constant_w"] == 110.0 and "duty" not in pm          # the measured figures as they were, pm untouched
    own = {**pm, "duty": {"variable": "efficiency", "t_full_s": None, "gamma": 0.3, "source": "fitted here"}}
    assert P.with_carried_duty(own) is own                           # a model with its own curve keeps it


def test_the_carried_curves_check_is_a_committed_result():
    from pathlib import Path

    assert (Path(__file__).resolve().parent.parent / P.CARRIED_DUTY_CHECK).is_file()


def test_per_path_duty_curves_are_carried_each_labelled(monkeypatch):
    curve = {"variable": "efficiency", "t_full_s": None, "gamma": 0.2, "source": "fitted on G layers"}
    # measure/profile.py imports embedded_profile_doc by name: patched where with_carried_duty looks it up
    monkeypatch.setattr(P, "embedded_profile_doc", lambda name="x": {
        "device": {"name": "G"}, "power_model": {"duty": curve, "duty_by_path": {"tc_bf16": {**curve, "gamma": 0.5}}}})
    out = P.with_carried_duty({"constant_w": 100.0})
    assert out["duty"]["gamma"] == 0.2 and out["duty_by_path"]["tc_bf16"]["gamma"] == 0.5 and "duty_tensor_core" not in out
    assert out["duty_by_path"]["tc_bf16"]["source"] == (f"carried from the embedded G profile (fitted on G layers); "
                                                        f"checked on another GPU: {P.CARRIED_DUTY_CHECK}")
