import json
from pathlib import Path

import pytest

from carm_advisor.errors import ProfileError
from carm_advisor.profiles.profile import SCHEMA, load_profile, profile_from_dict


def _minimal():
    return {
        "schema": SCHEMA,
        "device": {"name": "Test GPU", "l2_usable_bytes": 1000},
        "provenance": {"source": "recorded"},
        "ceilings": {
            "fp32": {"kind": "compute", "value": 1e12, "provenance": {"source": "datasheet"}},
            "hbm": {"kind": "memory", "value": 1e11, "provenance": {"source": "measured"}, "repeats": 5, "spread": 0.01},
        },
    }


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_embedded_h200_profile_is_the_recorded_measurement_with_provenance():
    p = load_profile()
    assert p.name == "NVIDIA H200"
    assert p.source == "recorded"
    measured = json.loads((RESULTS / "nvidia-h200-measured-profile-2026-12-02.json").read_text())
    rates = {b["name"]: b["rate"] for b in measured["benchmarks"]}
    dropped = p.provenance["measured"].get("dropped") or {}
    for key in ("fp32", "tc_tf32", "tc_bf16", "tc_fp16", "tc_fp8_e4m3", "shared", "l2", "hbm"):
        assert p.ceilings[key].provenance["source"] == "measured", key
        name = p.ceilings[key].provenance["method"].split()[2]   # "carm micro-benchmark NAME (variant)"
        assert p.ceilings[key].value == rates[name] and name not in dropped, key   # a recorded figure, as measured
        assert p.ceilings[key].sm_clock_mhz, key
    # A roof below the library kernel measured beside it would be wrong (the references of
    # nvidia-h200-ceilings-2026-12-02.json, measured in the same run).
    side = json.loads((RESULTS / "nvidia-h200-ceilings-2026-12-02.json").read_text())
    assert p.ceilings["tc_bf16"].value >= side["references"]["cublas_bf16"]["value"]
    assert p.ceilings["hbm"].value >= side["references"]["torch_copy_4gib"]["value"]


def test_profile_round_trips_through_json(tmp_path):
    p = profile_from_dict(_minimal())
    path = tmp_path / "p.json"
    p.save(path)
    q = load_profile(path)
    assert q.ceilings["hbm"].value == 1e11 and q.ceilings["hbm"].repeats == 5
    assert q.carm().ridge_ai("fp32", "hbm") == pytest.approx(10.0)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="other/1"), "expected schema"),
        (lambda d: d.pop("ceilings"), "'ceilings' must be an object"),
        (lambda d: d["ceilings"]["fp32"].update(value=-3), "must be > 0"),
        (lambda d: d["ceilings"]["fp32"].update(value="fast"), "must be a number"),
        (lambda d: d["ceilings"]["fp32"].update(kind="speed"), "kind must be"),
        (lambda d: d["ceilings"].update(tc_magic={"kind": "compute", "value": 1, "provenance": {"source": "datasheet"}}), "unknown compute key"),
        (lambda d: d["ceilings"]["fp32"].update(provenance={}), "provenance.source"),
        (lambda d: d["ceilings"].pop("hbm"), "at least one compute and one memory"),
        (lambda d: d["ceilings"]["hbm"].update(repeats=0), "repeats"),
    ],
)
def test_malformed_profiles_are_one_line_errors(mutate, message):
    d = _minimal()
    mutate(d)
    with pytest.raises(ProfileError, match=message) as info:
        profile_from_dict(d)
    assert "\n" not in str(info.value)


def test_profile_file_that_is_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(path)


def test_missing_profile_file(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "nope.json")


def test_profile_path_that_is_a_directory_says_so(tmp_path):
    with pytest.raises(ProfileError, match="directory"):
        load_profile(tmp_path)


def test_power_model_is_validated():
    d = _minimal()
    d["power_model"] = {"constant_w": 100, "power_limit_w": 50, "joules_per_flop": {}, "joules_per_byte": {}}
    with pytest.raises(ProfileError, match="power limit"):
        profile_from_dict(d)
    d["power_model"] = {"constant_w": 100, "joules_per_flop": {"fp32": -1}, "joules_per_byte": {}}
    with pytest.raises(ProfileError, match="joules_per_flop"):
        profile_from_dict(d)
