"""benchmarks/launch_floor.py measures the launch floor; benchmarks/embed_profile.py merges it into the embedded
profile."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _same_json import assert_same_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
EMBEDDED = ROOT / "carm_advisor" / "profiles" / "nvidia_h200.json"


def embed_args(out, *extra):
    dropped = json.loads(EMBEDDED.read_text())["provenance"]["measured"]["dropped"]
    args = [sys.executable, str(ROOT / "benchmarks" / "embed_profile.py"),
            str(RESULTS / "nvidia-h200-measured-profile-2026-12-02.json"),
            str(RESULTS / "nvidia-h200-ceilings-2026-12-02.json"), str(out)]
    for name, why in dropped.items():
        args += ["--drop", f"{name}={why}"]
    # the shipped profile carries the sweep fit over the ceilings run and the power sweep (the fit the power model
    # validation validates) and the duty curve that validation fitted against it (embed_profile.py --duty)
    args += ["--power-fit", "sweep", "--power-sweep", str(RESULTS / "nvidia-h200-power-sweep-2026-12-03.json"),
             "--duty", str(RESULTS / "nvidia-h200-power-model-duty-per-unit-2026-12-05.json.xz")]
    return args + list(extra)


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def floor_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("floor")
    run([sys.executable, str(ROOT / "benchmarks" / "launch_floor.py"), "--dry", "--repeats", "50", "--out", str(out)])
    (path,) = out.glob("*.json")
    return path


def test_launch_floor_dry_run_writes_the_median_of_its_fake_calls(floor_file):
    doc = json.loads(floor_file.read_text())
    assert doc["launch_floor"]["value_s"] == pytest.approx(4e-6)   # the fake library's 4 us per call
    assert doc["launch_floor"]["provenance"]["gpu_time_s"] == pytest.approx(2e-6)


def test_the_embedded_profile_regenerates_byte_identical_without_a_floor_file(tmp_path):
    run(embed_args(tmp_path / "p.json"))
    assert_same_json((tmp_path / "p.json").read_bytes(), EMBEDDED.read_bytes())   # the sweep fit's floats to 1e-9


def test_a_floor_file_adds_the_launch_floor_and_changes_nothing_else(tmp_path, floor_file):
    run(embed_args(tmp_path / "p.json", "--launch-floor", str(floor_file)))
    merged = json.loads((tmp_path / "p.json").read_text())
    floor = merged.pop("launch_floor")
    assert floor["value_s"] == pytest.approx(4e-6)
    assert floor["provenance"]["from"] == f"benchmarks/results/{floor_file.name}"
    assert_same_json(json.dumps(merged), EMBEDDED.read_text())
    from carm_advisor.profiles.profile import load_profile

    assert load_profile(tmp_path / "p.json").launch_floor_s == pytest.approx(4e-6)
