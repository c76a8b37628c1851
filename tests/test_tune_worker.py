"""Trial workers: a child that crashes or hangs makes a failed trial and is started again, the study
goes on; the real worker measures a tiny Keras model on the CPU (times only: no NVML here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from carm_advisor.models.builder import model_spec
from carm_advisor.trials.runner import TrialFailed, WorkerRunner, WorkerSettings
from carm_advisor.trials.space import SearchSpace, TrialConfig
from carm_advisor.tune.study import tune

SUPPORT = Path(__file__).parent / "tune_support"
sys.path.insert(0, str(SUPPORT))
from stubs import TablePredictor  # noqa: E402


def test_a_crashing_or_hanging_worker_fails_its_trial_and_the_study_continues(tmp_path):
    runner = WorkerRunner("vgg16", TablePredictor({"float32": (0.01, 1.0), "mixed_float16": (0.01, 1.0)}),
                          trial_timeout_s=1.5, startup_timeout_s=30,
                          command=[sys.executable, str(SUPPORT / "fake_worker.py")], log_dir=str(tmp_path))
    space = SearchSpace(backends=("torch",), precisions=("float32", "mixed_float16"), batch_sizes=(32, 64),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    result = tune("vgg16", objective="samples_per_joule", n_trials=6, storage=str(tmp_path / "w.db"), space=space,
                  baseline=TrialConfig("torch"), runner=runner, predictor=runner.predictor, carm_pruning=False,
                  progress=False)
    errors = [t.error for t in result.trials if t.state == "FAIL"]
    assert any("died (exit code 139)" in e and "segmentation fault" in e for e in errors)   # batch 64
    assert any("timed out after 1.5 s" in e for e in errors)                                 # mixed_float16
    assert len(result.trials) == 6 and runner.restarts >= 1
    # The baseline (float32, batch 32) measured: 32 samples / 2 J.
    assert result.baseline.measurement["energy_j"] == 2.0 and result.best is not None


def test_a_worker_that_cannot_start_is_a_failed_trial(tmp_path):
    runner = WorkerRunner("vgg16", TablePredictor({"float32": (0.01, 1.0)}), startup_timeout_s=30,
                          command=[sys.executable, "-c", "import sys; sys.exit(3)"], log_dir=str(tmp_path))
    with pytest.raises(TrialFailed, match="exit code 3"):
        runner.run(TrialConfig("torch"))


def test_the_real_worker_measures_a_tiny_model_on_the_cpu(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("PYTHONPATH", str(SUPPORT))
    spec = model_spec("tiny_models:tiny_cnn")
    settings = WorkerSettings(window_s=0.05, min_windows=2, max_windows=3, warmup_calls=1, idle_gap_s=0,
                              accuracy_samples=4)
    runner = WorkerRunner(spec.portable(), TablePredictor({"float32": (1, 1), "mixed_bfloat16": (1, 1)}, 100.0),
                          settings, trial_timeout_s=300, log_dir=str(tmp_path))
    try:
        f32 = runner.run(TrialConfig("torch", "float32", 4, "channels_last", "eager"))
        bf16 = runner.run(TrialConfig("torch", "mixed_bfloat16", 4, "channels_first", "eager"))
    finally:
        runner.close()
    assert f32.source.startswith("measured") and f32.energy_j is None      # no NVML on this machine
    assert f32.time_s > 0 and f32.windows >= 2 and f32.compile_s >= 0 and f32.flops == 400.0
    # float32 on a CPU is the reference's own arithmetic; bfloat16 keeps ~3 significant digits.
    assert f32.output_error < 1e-5 and f32.top1_agreement == 1.0
    assert 1e-5 < bf16.output_error < 0.1
    assert runner.device.get("backend") == "torch"


def test_accuracy_figures_by_hand():
    import numpy as np

    from carm_advisor.trials.worker import _accuracy

    ref = np.array([[1.0, 2.0], [3.0, 5.0]])
    # max |y - ref| = 1 (last entry), max |ref| = 5: 0.2; arg-max of both rows agrees.
    assert _accuracy(np.array([[1.0, 2.0], [3.0, 4.0]]), ref) == (pytest.approx(0.2), 1.0)
    # first row's arg-max flips (class 0 vs 1): half the samples agree.
    assert _accuracy(np.array([[2.5, 2.0], [3.0, 5.0]]), ref)[1] == 0.5


@pytest.mark.parametrize("text, oom", [
    ("CUDA out of memory. Tried to allocate 3.06 GiB", True),
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 12884901888 bytes.", True),
    ("Exception: shapes (3,) and (4,) are incompatible", False),
])
def test_out_of_memory_errors_are_recognised(text, oom):
    from carm_advisor.measure.backends import is_out_of_memory

    assert is_out_of_memory(RuntimeError(text)) is oom


@pytest.mark.parametrize("builder", ["tokens_and_features", "subclassed_mlp", "dict_inputs", "subclassed_tokens"])
def test_the_worker_feeds_every_input_at_its_dtype_and_a_subclassed_model_its_build_shape(builder):
    """The worker used to feed model.inputs[0] alone, as standard-normal floats: a two-input model failed every
    trial, token ids came out negative, and a subclassed model (no model.inputs) could not be fed at all."""
    import numpy as np

    from carm_advisor.trials.worker import Worker

    worker = Worker({"model": f"tiny_models:{builder}", "settings": {
        "window_s": 0.02, "min_windows": 1, "max_windows": 1, "warmup_calls": 1, "idle_gap_s": 0,
        "accuracy_samples": 3}})
    host = worker.host_inputs("channels_last", 9)
    if builder == "tokens_and_features":
        tokens, features = host
        assert tokens.dtype == np.int32 and tokens.shape == (9, 6) and 0 <= tokens.min() and tokens.max() < 30
        assert len(np.unique(tokens)) > 2 and features.dtype == np.float32 and features.shape == (9, 3)
        # the first rows do not depend on the batch size (the accuracy reference is computed on 3 of them)
        assert np.array_equal(worker.host_inputs("channels_last", 3)[0], tokens[:3])
    elif builder == "dict_inputs":   # called with the dict it was built on
        assert set(host) == {"image", "extra"} and host["image"].shape == (9, 4) and host["extra"].shape == (9, 2)
    elif builder == "subclassed_tokens":   # whole numbers below 256 and the 300-word vocabulary
        assert host.shape == (9, 6) and host.min() >= 0 and host.max() < 256 and np.array_equal(host, np.round(host))
    else:
        assert host.shape == (9, 7) and host.dtype == np.float32
    m = worker.measure(TrialConfig(worker.backend, "float32", 9, "channels_last", "eager" if worker.backend == "torch"
                                   else {"tensorflow": "graph", "jax": "xla"}[worker.backend]).to_dict())
    assert m["time_s"] > 0 and m["output_error"] < 1e-5   # float32 on the CPU: the reference's own arithmetic
