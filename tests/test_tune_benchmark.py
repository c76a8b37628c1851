"""benchmarks/vgg16_tuning.py (its main(), in this process) in its --fake CPU mode: a grid run, a study compared with it, and a study
stopped by its budget that the same command resumes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).parent / "tune_support"
SCRIPT = REPO_ROOT / "benchmarks" / "vgg16_tuning.py"
SMALL = ["--model", "tiny_models:tiny_cnn", "--fake", "--backends", "torch", "--batch-sizes", "32",
         "--precisions", "float32,mixed_bfloat16"]


def _run(tmp_path, *extra):
    # In this process (Keras is imported once for the whole test run; three subprocesses would
    # each spend 15-30 s importing it on a loaded 2-core machine).
    sys.path.insert(0, str(SUPPORT))
    spec = importlib.util.spec_from_file_location("vgg16_tuning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([*SMALL, "--out", str(tmp_path), *extra]) == 0


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the dev extra installs its CPU build)")
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

    # --summarize: nothing runs; the same study and grid, plus a grid known only from a JSON whose one entry
    # (a configuration of the grid, spread 0 < the fake runs' 1%) then stands for that configuration.
    key = grid["grid"][0]["key"]
    old = tmp_path / "old-grid.json"
    old.write_text(json.dumps({"grid": [{"key": key, "value": 1e6, "spread": 0.0, "run": "old.db", "trial": 3}]}))
    out = tmp_path / "summary.json"
    _run(tmp_path, "--summarize", "--storage", str(study_db), "--grid-storage", str(grid_db), "--grid-json", str(old),
         "--out-json", str(out))
    s = json.loads(out.read_text())
    assert s["best"]["key"] == doc["best"]["key"] and s["gain_gflops_per_watt"] == doc["gain_gflops_per_watt"]
    assert s["grid_measured"] == 8 and s["grid_best"]["key"] == key and s["grid_best"]["value"] == 1e6
    merged = {r["key"]: r for r in s["grid"]}
    assert len(merged[key]["runs"]) == 2 and "old-grid.json" in merged[key]["run"]
    assert s["trials_to_within_2pct_of_grid_best"] is None          # nothing comes near 1e6
    # spreads 0 (grid best) and 0.01 (the fake study best): both under 2%, so the judgement is outside the noise
    assert s["within_2pct_noise"]["grid_best_spread"] == 0.0 and s["within_2pct_noise"]["study_best_spread"] == 0.01
    assert s["within_2pct_noise"]["judgement_inside_noise"] is False


def test_measurement_window_flags_reach_the_worker_settings():
    sys.path.insert(0, str(SUPPORT))
    spec = importlib.util.spec_from_file_location("vgg16_tuning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.parse(["--storage", "x.db", "--min-windows", "2", "--max-windows", "4", "--spread-target", "0.05",
                         "--idle-gap-s", "0", "--window-s", "1.5"])
    s = module.worker_settings(args)
    assert (s.window_s, s.min_windows, s.max_windows, s.spread_target, s.idle_gap_s) == (1.5, 2, 4, 0.05, 0.0)
    default = module.worker_settings(module.parse(["--storage", "x.db"]))
    assert default.min_windows == 3 and default.max_windows == 6   # the worker's own defaults (runner.py)
    import pytest

    with pytest.raises(SystemExit):
        module.worker_settings(module.parse(["--storage", "x.db", "--min-windows", "5", "--max-windows", "4"]))


def test_unmeasured_configurations_are_judged_by_their_carm_bound():
    sys.path.insert(0, str(SUPPORT))
    spec = importlib.util.spec_from_file_location("vgg16_tuning", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from types import SimpleNamespace

    from carm_advisor.tune.objectives import get_objective

    # Three configurations, "a" measured; the bounds of "b" and "c" are worked out below.
    cfgs = [SimpleNamespace(key=k) for k in ("a", "b", "c")]
    space = SimpleNamespace(grid=lambda: cfgs)
    # GFLOP/s per W = FLOPs / energy / 1e9: b = 300e9 / 1 J = 300, c = 500e9 / 1 J = 500.
    figures = {"b": SimpleNamespace(time_s=1.0, energy_j=1.0, flops=300e9, batch_size=1),
               "c": SimpleNamespace(time_s=1.0, energy_j=1.0, flops=500e9, batch_size=1)}
    predictor = SimpleNamespace(predict=lambda cfg: figures[cfg.key])
    objective = get_objective("gflops_per_watt")
    # The bound's energy is a power-model figure: it gets the margin (10%: 500 -> 550).
    out = module.unmeasured_bounds(space, {"a": {}}, predictor, objective, {"value": 600.0}, margin=0.10)
    assert out["n"] == 2 and out["best_bound"] == {"key": "c", "bound": 500.0} and out["cannot_beat_grid_best"] is True
    assert out["best_bound_with_margin"] == pytest.approx(550.0)
    out = module.unmeasured_bounds(space, {"a": {}}, predictor, objective, {"value": 540.0}, margin=0.10)
    assert out["cannot_beat_grid_best"] is False        # 550 with the margin could beat 540
    out = module.unmeasured_bounds(space, {"a": {}}, predictor, objective, {"value": 540.0}, margin=0.0)
    assert out["cannot_beat_grid_best"] is True
