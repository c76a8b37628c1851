"""benchmarks/record_layers.py (dry, CPU) and benchmarks/prediction_accuracy.py (synthetic records, hand errors)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from carm_advisor.errors import ProfileError
from carm_advisor.measure.records import LayerMeasurement, ModelMeasurement, RunMeasurement

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configs_put_batch_64_first_and_go_round_robin_over_models():
    mod = _load("record_layers")
    order = [(c["batch_size"], c["precision"], c["model"])
             for c in mod.ordered_configs(["a", "b"], ["f32", "bf16"], [32, 64], "torch")]
    assert order == [(64, "f32", "a"), (64, "f32", "b"), (64, "bf16", "a"), (64, "bf16", "b"),
                     (32, "f32", "a"), (32, "f32", "b"), (32, "bf16", "a"), (32, "bf16", "b")]


def test_configs_take_the_torch_layout_asked_for_and_leave_jax_in_channels_last():
    mod = _load("record_layers")
    assert {c["layout"] for c in mod.ordered_configs(["a"], ["f32"], [64], "torch")} == {"channels_first"}
    assert {c["layout"] for c in mod.ordered_configs(["a"], ["f32"], [64], "torch", "channels_last")} == {"channels_last"}
    assert {c["layout"] for c in mod.ordered_configs(["a"], ["f32"], [64], "jax", "channels_first")} == {"channels_last"}


def _record_layers_cmd(tmp_path, model: str, backend: str, *extra: str) -> list[str]:
    """A dry record_layers.py command: one model at float32, batch 64, on one backend."""
    return [sys.executable, str(BENCH / "record_layers.py"), "--models", model, "--precisions", "float32",
            "--batch-sizes", "64", "--backends", backend, *extra, "--out", str(tmp_path), "--dry"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the dev extra installs its CPU build)")
def test_record_layers_dry_records_one_file_per_config_and_resumes(tmp_path):
    cmd = _record_layers_cmd(tmp_path, "vgg16", "torch", "--torch-windows", "", "--budget-s", "120")
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    path = tmp_path / "vgg16-torch-float32-channels_first-b64.json"
    run = RunMeasurement.from_json(path)
    assert run.model_name == "vgg16" and run.settings["method"] == "profiled"
    assert {m.execution for m in run.layers} == {"profiled"} and len(run.layers) >= 20
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert "skip (recorded): vgg16-torch-float32-channels_first-b64.json" in again.stdout


def test_record_layers_records_a_model_that_refuses_channels_first_in_channels_last(tmp_path):
    # Keras' DenseNet raises for channels_first; torch records in channels_first by default
    proc = subprocess.run(_record_layers_cmd(tmp_path, "densenet121", "torch", "--torch-windows", "", "--budget-s", "120"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "densenet121 refuses channels_first: recorded in channels_last" in proc.stdout
    run = RunMeasurement.from_json(tmp_path / "densenet121-torch-float32-channels_last-b64.json")
    assert run.layout == "channels_last" and run.settings["config"]["layout"] == "channels_last"
    assert not list(tmp_path.glob("_failed-*"))
    # a re-run finds it under the layout it ran in: nothing re-recorded
    again = subprocess.run(_record_layers_cmd(tmp_path, "densenet121", "torch", "--torch-windows", "", "--budget-s", "120"),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "skip (recorded): densenet121-torch-float32-channels_last-b64.json" in again.stdout
    assert "refuses channels_first" not in again.stdout


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_record_layers_whole_only_records_the_jitted_model_and_no_layer(tmp_path):
    from carm_advisor.calibration import whole_from_run
    from carm_advisor.learn import rows_for_run

    proc = subprocess.run(_record_layers_cmd(tmp_path, "mobilenet", "jax", "--whole-only", "mobilenet", "--budget-s", "120"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = RunMeasurement.from_json(tmp_path / "mobilenet-jax-float32-channels_last-b64.json")
    assert run.layers == [] and run.settings["method"] == "whole-model-only"
    assert run.inference.execution == "jit" and run.inference.time_s > 0
    # a calibration still takes its whole-model time (against the CARM bounds; no layer sums)
    model = keras.applications.MobileNet(weights=None, input_shape=(32, 32, 3))
    (sample,) = whole_from_run(run, rows_for_run(run, model=model), "mobilenet")
    assert sample.execution == "jit" and not sample.has_layer_sums and sample.matmul_bound_s > 0


def _synthetic_run(model, name, efficiency):
    """Every layer measured at exactly `efficiency` of its CARM bound; the graph = the layers' sum. The models are
    channels_first: torch makes no layout copies around their layers (tests/test_layout_copies.py tests those)."""
    from carm_advisor.learn import rows_for_run

    base = RunMeasurement(device={"name": "Fake GPU"}, backend="torch", backend_version="x", keras_version="x",
                          batch_size=4, precision="float32", layout="channels_first",
                          math_mode={"conv": "tf32", "matmul": "fp32"}, date="2026-12-03", command="test",
                          model_name=name)
    rows = rows_for_run(base, model=model)
    base.layers = [LayerMeasurement(r.name, r.type, r.predicted_time_s / efficiency, 0.0, 1, execution="cuda_graph")
                   for r in rows if r.known and r.predicted_time_s]
    base.inference_graph = ModelMeasurement(sum(m.time_s for m in base.layers), 0.0, execution="cuda_graph")
    return base


def test_leave_one_model_out_errors_match_hand_computed_ratios(tmp_path):
    mod = _load("prediction_accuracy")
    keras.config.set_image_data_format("channels_first")
    models = {"mobilenet": keras.applications.MobileNet(weights=None, input_shape=(3, 64, 64)),
              "mobilenetv3small": keras.applications.MobileNetV3Small(weights=None, input_shape=(3, 64, 64))}
    # mobilenet at 50% of its bounds, mobilenetv3small at 25%. Predicted from the other model:
    # mobilenet 4b against 2b measured (error 1.0), mobilenetv3small 2b against 4b (error 0.5).
    runs = [_synthetic_run(models["mobilenet"], "mobilenet", 0.5),
            _synthetic_run(models["mobilenetv3small"], "mobilenetv3small", 0.25)]
    doc = mod.evaluate(runs, mod.rows_by_run(runs, build=lambda run: models[run.model_name]))
    by_model = doc["per_layer_median_abs_err_by_model"]
    assert by_model["mobilenet/torch"] == pytest.approx(1.0)
    assert by_model["mobilenetv3small/torch"] == pytest.approx(0.5)
    # whole model: one record per side, so the fit is time / layer sum = 1: the same ratios
    assert doc["whole_model_abs_err"]["torch/cuda_graph"] == pytest.approx((1.0 + 0.5) / 2)
    assert doc["models"] == ["mobilenet", "mobilenetv3small"]
    assert doc["n"]["records"] == 2
    # held out: fitted on mobilenet only, mobilenetv3small alone is evaluated (2b predicted, 4b measured)
    held = mod.evaluate(runs, mod.rows_by_run(runs, build=lambda run: models[run.model_name]), train_models=["mobilenet"])
    assert held["models"] == ["mobilenetv3small"] and held["train_models"] == ["mobilenet"]
    assert held["per_layer_median_abs_err"]["torch"] == pytest.approx(0.5)
    assert held["by_backend"]["torch"]["whole_model_abs_err"]["torch/cuda_graph"] == pytest.approx(0.5)
    assert held["n"]["records"] == 1


def test_held_out_classes_unseen_in_training_are_listed_with_their_fallback():
    mod = _load("prediction_accuracy")
    keras.config.set_image_data_format("channels_first")

    def net(*layers):
        x = inp = keras.Input((3, 16, 16))
        for layer in layers:
            x = layer(x)
        return keras.Model(inp, x)

    models = {"a": net(*[keras.layers.Conv2D(8, 3, padding="same") for _ in range(3)], keras.layers.ReLU()),
              "b": net(keras.layers.Conv2D(8, 3, padding="same"), keras.layers.BatchNormalization(axis=1))}
    runs = [_synthetic_run(models["a"], "a", 0.5), _synthetic_run(models["b"], "b", 0.5)]
    held = mod.evaluate(runs, mod.rows_by_run(runs, build=lambda run: models[run.model_name]), train_models=["a"])
    unseen = held["classes_not_in_training"]
    assert list(unseen) == ["torch/BatchNormalization"] and unseen["torch/BatchNormalization"]["layers"] == 1
    assert held["per_layer_median_abs_err"]["torch"] == pytest.approx(0.0)   # every layer at 0.5 of its bound


def test_records_accumulate_over_repeated_flags_and_each_file_counts_once(tmp_path):
    fit = _load("fit_calibration")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    run = RunMeasurement(device={"name": "Fake GPU"}, backend="torch", backend_version="x", keras_version="x",
                         batch_size=4, precision="float32", layout="channels_last", math_mode={}, date="d",
                         command="t", model_name="m")
    run.to_json(tmp_path / "a" / "r1.json")
    run.to_json(tmp_path / "b" / "r2.json")
    (tmp_path / "b" / "other.json").write_text(json.dumps({"schema": "something-else"}))
    argv = ["--records", str(tmp_path / "a"), "--records", str(tmp_path / "b"), str(tmp_path / "a" / "r1.json"),
            "--out", "x.json"]
    args = fit.parse_args(fit.build_parser(), argv)
    assert args.records == [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "a" / "r1.json")]
    assert [f.name for f in fit.record_files(args.records)] == ["r1.json", "r2.json"]
    with pytest.raises(SystemExit):
        fit.parse_args(fit.build_parser(), ["--records", str(tmp_path / "missing"), "--out", "x.json"])


def test_fit_calibration_places_the_layers_on_the_profile_it_is_given(tmp_path, monkeypatch, capsys):
    # Another GPU's records need that GPU's roofs: --profile reaches the fit; a bad one is a one-line error
    from carm_advisor import learn
    from carm_advisor.profiles.profile import load_profile

    fit = _load("fit_calibration")
    RunMeasurement(device={"name": "Fake GPU"}, backend="torch", backend_version="x", keras_version="x", batch_size=4,
                   precision="float32", layout="channels_last", math_mode={}, date="d", command="t",
                   model_name="m").to_json(tmp_path / "r1.json")
    other = load_profile().to_dict()
    other["device"]["name"] = "Other GPU"
    (tmp_path / "other.json").write_text(json.dumps(other))
    seen = []

    def fake_fit_runs(runs, profile=None):
        seen.append(profile.name)
        raise KeyboardInterrupt   # stop before anything is written

    monkeypatch.setattr(learn, "fit_runs", fake_fit_runs)
    with pytest.raises(KeyboardInterrupt):
        fit.main(["--records", str(tmp_path / "r1.json"), "--profile", str(tmp_path / "other.json"),
                  "--out", str(tmp_path / "cal.json")])
    assert seen == ["Other GPU"]
    assert fit.main(["--records", str(tmp_path / "r1.json"), "--profile", str(tmp_path / "missing.json"),
                     "--out", str(tmp_path / "cal.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.json" in err[0]
    assert not (tmp_path / "cal.json").exists()


def test_the_launch_floor_comes_from_the_newest_file_of_the_same_gpu(tmp_path):
    fit = _load("fit_calibration")

    def floor_file(name, gpu, gpu_time_s):
        (tmp_path / name).write_text(json.dumps({"device": {"name": gpu},
                                                 "launch_floor": {"value_s": 3e-5, "provenance": {"gpu_time_s": gpu_time_s}}}))

    floor_file("h200-launch-floor-2026-01-01.json", "H200", 9e-6)
    floor_file("h200-launch-floor-2026-02-01.json", "H200", 7e-6)       # newer: this one
    floor_file("a100-launch-floor-2026-03-01.json", "A100", 5e-6)       # another GPU
    (tmp_path / "h200-launch-floor-2026-04-01.json").write_text("{not json")   # unreadable: skipped
    assert fit.launch_floor("H200", tmp_path)["value_s"] == 7e-6
    assert fit.launch_floor("A100", tmp_path)["value_s"] == 5e-6
    assert fit.launch_floor("L4", tmp_path) is None


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_record_layers_dry_jax_records_back_to_back_windows_beside_the_dispatched_time(tmp_path):
    cmd = _record_layers_cmd(tmp_path, "vgg16", "jax", "--budget-s", "240", "--jax-back-to-back-calls", "2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = RunMeasurement.from_json(tmp_path / "vgg16-jax-float32-channels_last-b64.json")
    assert run.settings["back_to_back_calls"] == 2
    jitted = [m for m in run.layers if m.execution == "jit"]
    assert jitted and all(m.back_to_back and m.back_to_back["calls_per_dispatch"] == 2 and m.time_s > 0
                          for m in jitted)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the dev extra installs its CPU build)")
def test_record_layers_records_torch_in_channels_last_when_asked(tmp_path):
    # the layout copies of Keras' torch backend (calibration.layout_copy_passes) are only seen in channels_last records
    proc = subprocess.run(_record_layers_cmd(tmp_path, "vgg16", "torch", "--torch-windows", "vgg16",
                                             "--torch-layout", "channels_last", "--budget-s", "120"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("vgg16-torch-float32-channels_last-b64.json", "vgg16-torch-float32-channels_last-b64-windows.json"):
        run = RunMeasurement.from_json(tmp_path / name)
        assert run.layout == "channels_last" and run.settings["config"]["layout"] == "channels_last"
    assert not list(tmp_path.glob("*channels_first*")) and not list(tmp_path.glob("_failed-*"))


def test_another_gpus_profile_places_the_records_on_its_own_roofs(tmp_path):
    # The same records placed on two profiles, the second with every roof and slope twice as fast (neither with a
    # power model, whose cap would throttle the faster one): every layer's bound halves.
    import dataclasses

    from carm_advisor.profiles.profile import load_profile

    mod = _load("prediction_accuracy")
    keras.config.set_image_data_format("channels_first")
    model = keras.applications.MobileNet(weights=None, input_shape=(3, 64, 64))
    run = _synthetic_run(model, "mobilenet", 0.5)
    slow = dataclasses.replace(load_profile(), power_model=None)
    fast = dataclasses.replace(slow, ceilings={k: dataclasses.replace(c, value=2 * c.value) for k, c in slow.ceilings.items()})
    (on_slow,) = mod.rows_by_run([run], build=lambda r: model, profile=slow)
    (on_fast,) = mod.rows_by_run([run], build=lambda r: model, profile=fast)
    ratios = [f.predicted_time_s / s.predicted_time_s for f, s in zip(on_fast, on_slow) if s.measured and s.predicted_time_s]
    assert len(ratios) > 20 and all(r == pytest.approx(0.5) for r in ratios)
    assert mod.main(["--records", str(tmp_path), "--profile", str(tmp_path / "none.json")]) == 2


def test_study_samples_take_the_profile_the_records_are_placed_on(monkeypatch):
    # --studies beside --profile: the studies' whole-model bounds on the same GPU's roofs as the records' layers
    from carm_advisor.calibration import Calibration

    fit = _load("fit_calibration")
    studies_mod = _load("tuning_studies")
    monkeypatch.setitem(sys.modules, "tuning_studies", studies_mod)   # the module add_studies imports
    seen = []
    monkeypatch.setattr(studies_mod, "whole_from_studies", lambda studies, profile=None: seen.append(profile) or [])
    fit.add_studies(Calibration(), ["a.db"], profile="the H100 profile")
    fit.add_studies(Calibration(), [], profile="unused: no study")
    assert seen == ["the H100 profile"]


def test_eager_host_forms_score_the_torch_eager_models_with_each_host_time_per_call(monkeypatch):
    # evaluate() is faked: each form's held-out torch eager whole models (calibrated / measured), plus rows the
    # comparison must skip (jax; a torch model with no eager time; an eager time with no calibrated prediction).
    from carm_advisor.calibration import Calibration, WholeSample

    mod = _load("prediction_accuracy")
    full = Calibration([], [WholeSample("torch", "eager", 1.0, 0.1, 0.1, 10, "m")], {"records": ["r"]})
    monkeypatch.setattr(mod, "full_calibration", lambda *a, **k: full)
    ratios = {Calibration: [0.70, 0.80, 1.10], mod.MedianHostCalibration: [0.95, 1.20, 1.02],
              mod.CalibratedRowsHostCalibration: [0.60, 0.80, 1.00]}
    seen = []

    def evaluate(runs, rows, batch_size, train_models, studies, profile, full):
        seen.append(full)
        details = [{"backend": "torch", "whole": {"eager": {"calibrated_s": r, "measured_s": 1.0}}}
                   for r in ratios[type(full)]]
        details += [{"backend": "jax", "whole": {"eager": {"calibrated_s": 5.0, "measured_s": 1.0}}},
                    {"backend": "torch", "whole": {"cuda_graph": {"calibrated_s": 5.0, "measured_s": 1.0}}},
                    {"backend": "torch", "whole": {"eager": {"calibrated_s": None, "measured_s": 1.0}}}]
        return {"details": details}

    monkeypatch.setattr(mod, "evaluate", evaluate)
    out = mod.eager_host_forms([], [])
    assert seen[0] is full and type(seen[1]) is mod.MedianHostCalibration          # one fit, read three ways
    assert type(seen[2]) is mod.CalibratedRowsHostCalibration
    for other in seen[1:]:
        assert (other.samples, other.whole, other.provenance) == (full.samples, full.whole, full.provenance)
    c = out["forms"]
    # fastest: errors -0.30, -0.20, +0.10 -> median |err| 0.20, signed -0.20, 2 too fast, worst 0.30
    assert c["fastest"]["n"] == 3 and c["fastest"]["too_fast"] == 2
    assert c["fastest"]["time_median_abs_err"] == pytest.approx(0.20)
    assert c["fastest"]["time_median_signed_err"] == pytest.approx(-0.20)
    assert c["fastest"]["worst_abs_err"] == pytest.approx(0.30)
    # median_of_models: -0.05, +0.20, +0.02 -> 0.05, signed +0.02, 1 too fast
    assert c["median_of_models"]["time_median_abs_err"] == pytest.approx(0.05)
    assert c["median_of_models"]["time_median_signed_err"] == pytest.approx(0.02)
    assert c["median_of_models"]["too_fast"] == 1 and out["in_use"] == "fastest"
    # calibrated rows alone: -0.40, -0.20, 0.00 -> 0.20, signed -0.20, 2 too fast, worst 0.40
    assert c["fastest_calibrated_rows"]["time_median_abs_err"] == pytest.approx(0.20)
    assert c["fastest_calibrated_rows"]["too_fast"] == 2
    assert c["fastest_calibrated_rows"]["worst_abs_err"] == pytest.approx(0.40)


def test_the_median_host_form_takes_the_median_over_models_of_each_models_median_per_call():
    from carm_advisor.calibration import WholeSample

    mod = _load("prediction_accuracy")

    def eager(model, per_call_s, calls=100):
        return WholeSample("torch", "eager", per_call_s * calls, 1e-3, 1e-3, calls, model=model,
                           graph_time_s=per_call_s * calls / 10)

    host = [eager("a", 300e-6), eager("a", 500e-6), eager("b", 400e-6), eager("b", 600e-6), eager("b", 700e-6)]
    # a's median (300, 500) = 400 us, b's (400, 600, 700) = 600 us -> 500 us; the product's fastest: 300 us
    assert mod.MedianHostCalibration.host_per_call_s(host)[0] == pytest.approx(500e-6)
    assert mod.MedianHostCalibration.host_per_call_s([]) == (None, "no host-paced record")
    graph = [WholeSample("torch", "cuda_graph", 3.0, 2.0, 2.0, 10), WholeSample("torch", "cuda_graph", 5.0, 4.0, 2.0, 10)]
    fit = mod.MedianHostCalibration(whole=graph + host).without_model("x").whole_fit("torch", "eager")
    assert fit.dispatch_per_call_s == pytest.approx(500e-6)          # leave one model out keeps the form


def test_measured_tuning_trials_become_whole_model_samples_per_compiler(tmp_path):
    import sys
    from pathlib import Path

    optuna = pytest.importorskip("optuna")
    sys.path.insert(0, str(Path(__file__).parent / "tune_support"))
    from tiny_models import tiny_cnn

    whole_from_studies = _load("tuning_studies").whole_from_studies

    def study_file(name, trials):
        path = tmp_path / name
        study = optuna.create_study(study_name="s", storage=f"sqlite:///{path}")
        study.set_user_attr("run", {"model": "tiny", "mode": "inference"})
        for attrs in trials:
            t = optuna.trial.create_trial(value=1.0, user_attrs=attrs)
            study.add_trial(t)
        return path

    def trial(backend, compiler, batch, time_s, clock=None, **extra):
        cfg = {"backend": backend, "precision": "mixed_bfloat16", "batch_size": batch, "layout": "channels_last",
               "compiler": compiler, "sm_clock_mhz": clock}
        key = f"{backend}/{batch}/{compiler}/{clock}"
        return {"config": cfg, "config_key": key, "measurement": {"time_s": time_s, "source": "measured"}, **extra}

    a = study_file("a.db", [trial("torch", "torch.compile", 32, 1e-3), trial("jax", "xla", 64, 2e-3),
                            trial("torch", "eager", 32, 3e-3),
                            trial("torch", "eager", 32, 9e-3),                       # same key again: skipped
                            trial("jax", "xla", 32, 5e-3, repeat_of=1),             # a repeat: skipped
                            trial("jax", "xla", 128, 4e-3, clock=1200)])            # a locked clock: skipped
    b = study_file("b.db", [trial("jax", "xla", 64, 2e-3)])                         # the same trial copied: once
    found = whole_from_studies([a, b], builders={"tiny": tiny_cnn})
    got = sorted((w.backend, w.execution, w.batch_size, w.time_s) for w in found)
    assert got == [("jax", "jit", 64, 2e-3), ("torch", "eager", 32, 3e-3), ("torch", "torch.compile", 32, 1e-3)]
    assert all(w.model == "tiny" and w.matmul_bound_s > 0 and not w.has_layer_sums for w in found)
    assert {w.source for w in found} == {"study a.db#0", "study a.db#1", "study a.db#2"}
    with pytest.raises(ProfileError, match="Expected an Optuna SQLite study file"):
        whole_from_studies([tmp_path / "missing.db"])
