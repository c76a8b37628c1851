"""analyze --verify: configuration changes measured by a (fake) child runner, beside the predicted gain."""

import json

import pytest

from carm_advisor.advise.verify import verify_recommendations
from carm_advisor.report.model import Report
from carm_advisor.report.render import verified_text
from carm_advisor.results import MeasurementInfo, ModelInfo, Recommendation


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
    assert "OFF by 33% in time" in verified_text(batch.verified)


def test_an_energy_gain_the_measurement_does_not_show_is_flagged_even_when_the_speedup_holds():
    # advice: 1.60x faster, 1.34x less energy; measured (fake_runner): 10 ms / 6 J -> 6.25 ms / 6 J:
    # 1.60x faster (0% off) and 1.00x less energy: 1 - 1/1.34 = 25.4% off, more than 25%
    recs = [Recommendation("graph", "d", "1.60x faster", speedup=1.6, energy_ratio=1.34, change={"compile": "cuda_graph"})]
    report = _report()
    report.recommendations = recs

    def runner(cfg):
        return {"config": cfg, "ok": True, "time_s": 0.010 if cfg.get("compile", "none") == "none" else 0.00625,
                "energy_j": 6.0}

    verify_recommendations(report, runner=runner, model_spec="vgg16")
    v = recs[0].verified
    assert v["off_by"] == pytest.approx(0.0)
    assert v["energy_off_by"] == pytest.approx(1 - 1 / 1.34)
    assert v["flagged"] and v["flagged_on"] == ["energy"]
    assert "OFF by 25% in energy" in verified_text(v)
    assert any("predicted 1.34x less energy, measured 1.00x" in w for w in report.warnings)


def test_a_failed_trial_is_reported_not_raised():
    report = _report()
    verify_recommendations(report, runner=lambda c: {"config": c, "ok": False, "error": "boom"}, model_spec="vgg16")
    assert report.recommendations[0].verified["error"] == "the unchanged configuration failed: boom"
    assert verified_text(report.recommendations[0].verified) == "verify failed: the unchanged configuration failed: boom"


def test_cli_verify_with_fake_trials_shows_measured_beside_predicted(tmp_path, monkeypatch, capsys):
    from carm_advisor.cli import main

    fake = tmp_path / "trials.json"
    fake.write_text(json.dumps([{"match": {"precision": "mixed_bfloat16"}, "time_s": 0.001, "energy_j": 1.0},
                                {"match": {"compile": "torch.compile"}, "time_s": 0.0005, "energy_j": 1.0},
                                {"match": {"compile": "xla"}, "time_s": 0.0005, "energy_j": 1.0},
                                {"match": {}, "time_s": 0.002, "energy_j": 4.0}]))
    monkeypatch.setenv("CARM_ADVISOR_FAKE_TRIALS", str(fake))
    out = tmp_path / "r.json"
    # the CARM bounds alone (--no-calibration): under tensorflow's calibration (XLA, from jax's records) this small
    # model is host-paced and no precision advice would be left to verify
    code = main(["analyze", "mobilenetv3small", "--input-shape", "96,96,3", "--batch-size", "8", "--no-measure",
                 "--no-calibration", "--verify", "--json", str(out)])
    assert code == 0
    recs = json.loads(out.read_text())["recommendations"]
    bf16 = next(r for r in recs if r["change"] == {"precision": "mixed_bfloat16"})
    assert bf16["verified"]["measured_speedup"] == pytest.approx(2.0)        # 2 ms -> 1 ms, same batch
    assert bf16["verified"]["measured_energy_ratio"] == pytest.approx(4.0)
    assert "measured:" in capsys.readouterr().out   # the verified gain is printed in the recommendations table
    compiled = [r for r in recs if (r["change"] or {}).get("compile") in ("torch.compile", "xla")]
    for rec in compiled:     # torch and tensorflow: the tuner's compiler against its uncompiled trial (jax: none)
        assert rec["verified"]["baseline"]["compile"] in ("eager", "graph")
        assert rec["verified"]["measured_speedup"] == pytest.approx(4.0)   # 2 ms -> 0.5 ms


def _compile_report():
    # the advice: measured model(x) eager 10 ms, 5 J; torch.compile predicted 2.5x faster, 2x less energy
    recs = [
        Recommendation("compile", "d", "2.50x faster", speedup=2.5, energy_ratio=2.0, change={"compile": "torch.compile"}),
        Recommendation("bf16", "d", "2.00x faster", speedup=2.0, change={"precision": "mixed_bfloat16"}),
    ]
    model = ModelInfo(name="vgg16", batch_size=64, precision="float32", layout="channels_first", backend="torch",
                      math_mode={})
    info = MeasurementInfo(inference={"time_s": 0.010, "energy_j": 5.0, "execution": "eager"}, training_step=None,
                           inference_graph=None, date=None, command=None)
    return Report(model=model, device={}, ceilings={}, layers=[], recommendations=recs, measurement=info)


def test_torch_compile_is_measured_against_the_tuners_eager_trial_not_model_x():
    # tuner worker: eager 12 ms, torch.compile 6 ms (compiled in 9 s); model(x) eager 10 ms; bf16 5 ms
    figures = {"eager": (0.012, None), "torch.compile": (0.006, 9.0), "none": (0.010, None)}
    seen = []

    def runner(cfg):
        seen.append((cfg["compile"], cfg["precision"]))
        t, compile_s = figures[cfg["compile"]]
        t = 0.005 if cfg["precision"] == "mixed_bfloat16" else t
        return {"config": cfg, "ok": True, "time_s": t, "energy_j": t * 500, "compile_s": compile_s}

    report = _compile_report()
    verify_recommendations(report, runner=runner, model_spec="vgg16")
    compiled, bf16 = report.recommendations
    assert seen == [("eager", "float32"), ("torch.compile", "float32"), ("none", "float32"), ("none", "mixed_bfloat16")]
    assert compiled.verified["measured_speedup"] == pytest.approx(12 / 6)        # 2.00x, not 10 / 6
    # the advised 2.5x is against model(x) 10 ms: predicted compiled 10 / 2.5 = 4 ms, 5 J / 2 = 2.5 J; on the
    # worker's eager 12 ms (6 J) that is 12 / 4 = 3.00x, 6 / 2.5 = 2.40x; measured 2.00x: |2 / 3 - 1| = 33% off
    assert compiled.verified["predicted_speedup"] == pytest.approx(3.0)
    assert compiled.verified["predicted_energy_ratio"] == pytest.approx(2.4)
    assert compiled.verified["advised_speedup"] == 2.5
    assert compiled.verified["off_by"] == pytest.approx(1 / 3)
    assert compiled.verified["flagged"]
    assert "tuner worker's uncompiled (eager) predict_on_batch, measured 12.00 ms" in compiled.verified["compared_against"]
    assert "predicted compiled 4.00 ms = model(x) 10.00 ms (measured) / the advised 2.50x" in \
        compiled.verified["compared_against"]
    assert any("'compile' predicted 3.00x, measured 2.00x (both against the tuner worker's" in w for w in report.warnings)
    assert "predicted 3.00x against the tuner worker's uncompiled (eager)" in verified_text(compiled.verified)
    assert "OFF by 33%" in verified_text(compiled.verified)
    assert compiled.verified["baseline"]["compile"] == "eager"
    assert compiled.verified["compile_s"] == 9.0
    assert "compiled in 9.0 s on the first call (paid once)" in verified_text(compiled.verified)
    assert bf16.verified["measured_speedup"] == pytest.approx(10 / 5)
    assert bf16.verified["compile_s"] is None
    assert bf16.verified["predicted_speedup"] == 2.0 and bf16.verified["compared_against"] is None   # model(x) both sides


def test_which_compilers_go_to_the_tuners_worker():
    from carm_advisor.advise.verify import tuner_compiler

    assert tuner_compiler({"backend": "torch", "compile": "torch.compile"})
    assert tuner_compiler({"backend": "tensorflow", "compile": "xla"})
    assert not tuner_compiler({"backend": "torch", "compile": "cuda_graph"})   # measure/trial.py's CUDA graph
    assert not tuner_compiler({"backend": "torch", "compile": "none"})
    assert not tuner_compiler({"backend": "jax", "compile": "none"})


def test_the_default_runner_hands_compilers_to_the_tuners_worker_runner(monkeypatch):
    import carm_advisor.advise.verify as tuner  # where verify looks WorkerRunner up
    from carm_advisor.advise.verify import TrialRunners
    from carm_advisor.trials.runner import Measurement, TrialFailed

    made = []

    class StubWorkerRunner:
        def __init__(self, spec, predictor, settings=None, trial_timeout_s=600.0, **kw):
            made.append(spec)
            self.closed = False

        def run(self, config):
            if config.compiler == "eager":
                raise TrialFailed("worker died")
            assert (config.backend, config.precision, config.batch_size, config.layout) == \
                ("torch", "float32", 64, "channels_first")
            return Measurement(time_s=0.006, energy_j=3.0, flops=0.0, batch_size=64, source="measured", compile_s=9.5)

        def close(self):
            made.append("closed")

    monkeypatch.setattr(tuner, "WorkerRunner", StubWorkerRunner)
    monkeypatch.delenv("CARM_ADVISOR_FAKE_TRIALS", raising=False)
    runners = TrialRunners()
    cfg = {"model": "vgg16", "precision": "float32", "layout": "channels_first", "batch_size": 64,
           "backend": "torch", "compile": "torch.compile"}
    r = runners(cfg)
    assert r["ok"] and r["time_s"] == 0.006 and r["energy_j"] == 3.0 and r["compile_s"] == 9.5
    assert runners(cfg) is r                                   # measured once per configuration
    failed = runners({**cfg, "compile": "eager"})
    assert not failed["ok"] and "worker died" in failed["error"]
    runners.close()
    assert made == ["vgg16", "closed"]                         # one worker for both trials, then closed


def test_advice_the_gpu_measured_slower_and_costlier_sinks_below_the_rest_and_says_so():
    # advised: compile 3.00x (first), bf16 2.00x, batch 1.50x; measured: compile 10 ms -> 20 ms and 6 J -> 9 J
    # (0.50x, 0.67x), bf16 2.22x / 2.00x, batch 1.00x / 2.00x (fake_runner): bf16, batch, pad (advised 1x), compile
    report = _report()
    compile_rec = Recommendation("compile", "d", "3.00x faster", speedup=3.0, change={"compile": "cuda_graph"})
    report.recommendations = [compile_rec, *report.recommendations]

    def runner(cfg):
        if cfg.get("compile", "none") != "none":
            return {"config": cfg, "ok": True, "time_s": 0.020, "energy_j": 9.0}
        return fake_runner(cfg)

    verify_recommendations(report, runner=runner, model_spec="vgg16")
    assert [r.title for r in report.recommendations] == ["bf16", "batch", "pad", "compile"]
    assert compile_rec.verified["measured_speedup"] == pytest.approx(0.5)
    text = verified_text(compile_rec.verified)
    assert "OFF by 83% in time" in text and "not advised here" in text
    assert "not advised" not in verified_text(report.recommendations[1].verified)    # batch: 1.00x, 2.00x energy
    # one measured gain only (no energy reading): the same ordering ranks and words it
    only_time = {"measured_speedup": 0.5, "measured_energy_ratio": None, "error": None}
    assert "not advised here" in verified_text(only_time)


def test_verify_without_a_gpu_measures_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    """It timed each change on this CPU, for minutes, and printed the CPU's times as 'measured' gains."""
    from carm_advisor.cli import main

    monkeypatch.delenv("CARM_ADVISOR_FAKE_TRIALS", raising=False)
    out = tmp_path / "r.json"
    code = main(["analyze", "mobilenetv3small", "--input-shape", "96,96,3", "--batch-size", "2", "--verify",
                 "--measure-method", "layers", "--json", str(out)])
    assert code == 0
    d = json.loads(out.read_text())
    assert all(r.get("verified") is None for r in d["recommendations"])
    assert any(w.startswith("verify ignored: no NVIDIA GPU is usable here") for w in d["warnings"])
    assert any(w.startswith("--measure-method layers ignored: no NVIDIA GPU is usable here") for w in d["warnings"])
    assert "measured:" not in capsys.readouterr().out
