"""benchmarks/vgg16_tuning.py (its main(), in this process) in its --fake CPU mode: a grid run, a study compared with it, and a study
stopped by its budget that the same command resumes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).parent / "tune_support"
SCRIPT = REPO_ROOT / "benchmarks" / "vgg16_tuning.py"
SMALL = ["--model", "tiny_models:tiny_cnn", "--fake", "--backends", "torch", "--batch-sizes", "32",
         "--precisions", "float32,mixed_bfloat16"]


def _run(tmp_path, *extra):
    # In this process (Keras is imported once for the whole test session; three subprocesses would
    # each spend 15-30 s importing it on a loaded 2-core machine).
    sys.path.insert(0, str(SUPPORT))
    spec = importlib.util.spec_from_file_location("vgg16_tuning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([*SMALL, "--out", str(tmp_path), *extra]) == 0


def test_grid_then_study_then_budget_stop_and_resume(tmp_path):
    grid_db, study_db = tmp_path / "grid.db", tmp_path / "study.db"
    _run(tmp_path, "--grid", "--storage", str(grid_db))
    grid = json.loads(next(tmp_path.glob("*-vgg16-grid-*.json")).read_text())
    # 2 precisions x 1 batch x 2 layouts x (eager, torch.compile): 8 configurations, all measured.
    assert grid["grid_size"] == 8 and grid["grid_measured"] == 8
    assert all(r["run"] == str(grid_db) and r["spread"] is not None for r in grid["grid"])

    _run(tmp_path, "--trials", "6", "--storage", str(study_db), "--grid-storage", str(grid_db), "--budget-s", "1")
    stopped = json.loads(next(tmp_path.glob("*-vgg16-tuning-*.json")).read_text())
    assert stopped["budget_stopped"] and len(stopped["trials"]) < 6

    _run(tmp_path, "--trials", "6", "--storage", str(study_db), "--grid-storage", str(grid_db))
    doc = json.loads(next(tmp_path.glob("*-vgg16-tuning-*.json")).read_text())
    for key in ("device", "baseline", "best", "gain_gflops_per_watt", "gain_samples_per_joule", "trials", "grid_best",
                "trials_to_within_2pct_of_grid_best", "pruned_by_carm", "wall_s", "command"):
        assert key in doc
    assert len(doc["trials"]) == 6 and not doc["budget_stopped"]
    kept = {t["number"]: t for t in stopped["trials"] if t["state"] == "COMPLETE"}
    for t in doc["trials"]:
        if t["number"] in kept:
            assert t["value"] == kept[t["number"]]["value"]
    assert doc["grid_best"]["key"] == grid["best"]["key"]
    assert doc["trials_to_within_2pct_of_grid_best"] is not None and doc["source"] == "fake"
