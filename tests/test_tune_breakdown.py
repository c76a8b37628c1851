"""Where the best configuration's time goes, class by class on the CARM, and the best held against a reference."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from _cli import assert_one_line_error, run_cli

from carm_advisor.tune.breakdown import (
    HOST_HINT,
    MATMUL_HINT,
    SMALL_HINT,
    parse_reference,
    reference_gap,
    time_by_class,
)
from carm_advisor.tune.objectives import OBJECTIVES

SUPPORT = Path(__file__).parent / "tune_support"


def row(kind, bound_s, calibrated_s=None, known=True):
    return SimpleNamespace(type=kind, known=known, predicted_time_s=bound_s, calibrated_time_s=calibrated_s)


def test_classes_sum_their_rows_and_the_rest_of_a_measured_batch_is_outside_the_layers():
    rows = [row("Dense", 1e-3, 2e-3), row("Dense", 1e-3, 1e-3), row("LayerNormalization", 0.5e-3),
            row("Lambda", None, known=False)]
    b = time_by_class(rows, whole_s=5e-3, whole_source="measured")
    dense, norm = b["classes"]
    # Dense: 2 + 1 ms against a bound of 1 + 1 ms: 1.5x below its roofs, 60% of the 5 ms batch
    assert (dense["class"], dense["layers"]) == ("Dense", 2)
    assert dense["time_s"] == pytest.approx(3e-3) and dense["bound_s"] == pytest.approx(2e-3)
    assert dense["below_roof"] == pytest.approx(1.5) and dense["share"] == pytest.approx(0.6)
    assert dense["hint"] == MATMUL_HINT and dense["source"] == "calibrated prediction"
    # LayerNormalization: no calibrated time, its bound stands (at its roofs: no hint)
    assert norm["class"] == "normalization" and norm["time_s"] == pytest.approx(0.5e-3)
    assert norm["source"] == "CARM bound" and norm["hint"] is None
    # 5 - 3.5 ms outside the layers: 30%
    assert b["outside_layers_s"] == pytest.approx(1.5e-3) and b["outside_share"] == pytest.approx(0.3)
    assert b["hint_outside"] == HOST_HINT


def test_without_a_whole_time_the_batch_is_the_layers_sum():
    b = time_by_class([row("Conv2D", 2e-3, 2e-3), row("Add", 1e-3, 3e-3)])
    assert b["whole_s"] == pytest.approx(5e-3) and b["outside_layers_s"] == 0.0
    assert [c["class"] for c in b["classes"]] == ["elementwise", "Conv2D"]
    assert b["classes"][0]["below_roof"] == pytest.approx(3.0) and "fused" in b["classes"][0]["hint"]
    # 20x below its bound: too small a call for its work to set its time, whatever its class
    (tiny,) = time_by_class([row("GetItem", 1e-6, 2e-5)])["classes"]
    assert tiny["below_roof"] == pytest.approx(20.0) and tiny["hint"] == SMALL_HINT
    assert time_by_class([row("Lambda", None, known=False)]) is None


def test_a_reference_is_a_name_and_a_positive_number():
    assert parse_reference("hf-bert=25.7") == ("hf-bert", 25.7)
    assert parse_reference("a=b=3") == ("a=b", 3.0)
    for bad in ("25.7", "x=", "=3", "x=-1", "x=nan", "x=abc"):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            parse_reference(bad)


def test_the_gap_reads_in_the_objectives_direction():
    per_joule = OBJECTIVES["samples_per_joule"]
    assert reference_gap(18.0, ("hf", 25.0), per_joule)["ratio"] == pytest.approx(0.72)
    assert reference_gap(18.0, ("hf", 25.0), per_joule)["short"] is True
    latency = next(o for o in OBJECTIVES.values() if o.direction == "minimize")
    gap = reference_gap(2.0, ("hf", 3.0), latency)        # 2 s against 3 s: the best is 1.5x better
    assert gap["ratio"] == pytest.approx(1.5) and gap["short"] is False


def test_a_predicted_transformer_study_says_where_the_best_falls_short(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(SUPPORT))
    monkeypatch.syspath_prepend(str(SUPPORT.parent.parent))
    out = tmp_path / "r.json"
    code, text, err = run_cli(capsys, "tune", "small_transformers:tiny_bert", "--predict", "--trials", "4",
                              "--objective", "samples_per_joule", "--backends", "jax", "--batch-sizes", "8",
                              "--reference", "by-hand=1e12", "--storage", str(tmp_path / "s.db"), "--json", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    best, ref, b = doc["best"], doc["reference"], doc["best_breakdown"]
    assert ref["name"] == "by-hand" and ref["short"] is True
    assert ref["ratio"] == pytest.approx(best["values"][0] / 1e12)
    assert sum(c["share"] for c in b["classes"]) + b["outside_share"] == pytest.approx(1.0)
    assert "attention" in {c["class"] for c in b["classes"]}
    assert "the reference by-hand" in text and "where the best's time per batch goes" in text


def test_a_bad_reference_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "tune", "vgg16", "--predict", "--reference", "fast", "--storage",
                           str(tmp_path / "s.db"))
    assert_one_line_error(code, err, "NAME=VALUE")
    assert not (tmp_path / "s.db").exists()
