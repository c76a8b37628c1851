"""analyze --verify: configuration changes measured by a (fake) child runner, beside the predicted gain."""

import json

import pytest

from carm_advisor.report.model import ModelInfo, Recommendation, Report
from carm_advisor.verify_recommendations import verified_text, verify_recommendations


def _report():
    recs = [
        Recommendation("bf16", "d", "2.00x faster", speedup=2.0, change={"precision": "mixed_bfloat16"}),
        Recommendation("batch", "d", "1.50x faster", speedup=1.5, change={"batch_size": 256}),
        Recommendation("pad", "d", "at most 3%"),
    ]
    model = ModelInfo(name="vgg16", batch_size=64, precision="float32", layout="channels_first", backend="torch",
                      math_mode={})
    return Report(model=model, device={}, ceilings={}, layers=[], recommendations=recs)


def fake_runner(cfg):
    # base: 10 ms and 6 J per batch of 64; bf16: 4.5 ms; batch 256: 40 ms, 12 J per batch
    figures = {("float32", 64): (0.010, 6.0), ("mixed_bfloat16", 64): (0.0045, 3.0), ("float32", 256): (0.040, 12.0)}
    t, e = figures[(cfg["precision"], cfg["batch_size"])]
    return {"config": cfg, "ok": True, "time_s": t, "energy_j": e}


def test_measured_gain_is_per_sample_and_off_by_more_than_25_percent_is_flagged():
    report = _report()
    seen = []
    verify_recommendations(report, runner=lambda c: seen.append(c) or fake_runner(c), model_spec="vgg16")
    bf16, batch, pad = report.recommendations
    assert bf16.verified["measured_speedup"] == pytest.approx(0.010 / 0.0045)   # 2.22x
    assert bf16.verified["measured_energy_ratio"] == pytest.approx(2.0)
    assert bf16.verified["off_by"] == pytest.approx(0.010 / 0.0045 / 2.0 - 1)    # 11%
    assert not bf16.verified["flagged"]
    # per sample: 10 ms / 64 = 40 ms / 256 -> 1.00x measured against 1.50x predicted: 33% off
    assert batch.verified["measured_speedup"] == pytest.approx(1.0)
    assert batch.verified["measured_energy_ratio"] == pytest.approx((6.0 / 64) / (12.0 / 256))  # 2.0
    assert batch.verified["flagged"]
    assert pad.verified is None
    assert [c.get("precision") for c in seen] == ["float32", "mixed_bfloat16", "float32"]  # base measured once
    assert any("'batch' predicted 1.50x, measured 1.00x" in w for w in report.warnings)
    assert "OFF by 33%" in verified_text(batch.verified)


def test_a_failed_trial_is_reported_not_raised():
    report = _report()
    verify_recommendations(report, runner=lambda c: {"config": c, "ok": False, "error": "boom"}, model_spec="vgg16")
    assert report.recommendations[0].verified["error"] == "the unchanged configuration failed: boom"
    assert verified_text(report.recommendations[0].verified) == "verify failed: the unchanged configuration failed: boom"


def test_cli_verify_with_fake_trials_shows_measured_beside_predicted(tmp_path, monkeypatch, capsys):
    from carm_advisor.cli import main

    fake = tmp_path / "trials.json"
    fake.write_text(json.dumps([{"match": {"precision": "mixed_bfloat16"}, "time_s": 0.001, "energy_j": 1.0},
                                {"match": {}, "time_s": 0.002, "energy_j": 4.0}]))
    monkeypatch.setenv("CARM_ADVISOR_FAKE_TRIALS", str(fake))
    out = tmp_path / "r.json"
    code = main(["analyze", "mobilenetv3small", "--input-shape", "96,96,3", "--batch-size", "8", "--no-measure",
                 "--verify", "--json", str(out)])
    assert code == 0
    recs = json.loads(out.read_text())["recommendations"]
    bf16 = next(r for r in recs if r["change"] == {"precision": "mixed_bfloat16"})
    assert bf16["verified"]["measured_speedup"] == pytest.approx(2.0)        # 2 ms -> 1 ms, same batch
    assert bf16["verified"]["measured_energy_ratio"] == pytest.approx(4.0)
    assert "measured:" in capsys.readouterr().out   # the verified gain is printed in the recommendations table
