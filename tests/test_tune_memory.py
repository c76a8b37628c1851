"""The memory LOWER BOUND (carm_advisor/mapping/memory.py) and what uses it: a predicted trial that cannot fit
in the profile's GPU memory is pruned "out_of_memory"; a calibrated value at a batch size outside the
calibration's whole-model records is flagged once. Every expected figure is worked out in the comments."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import keras
import optuna
import pytest

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

from carm_advisor.mapping import map_model  # noqa: E402
from carm_advisor.mapping.memory import footprint_lower_bound  # noqa: E402
from carm_advisor.models.builder import model_spec  # noqa: E402
from carm_advisor.profiles.profile import load_profile  # noqa: E402
from carm_advisor.trials.predicted import ConfigPredictor  # noqa: E402
from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.records import TrialRecord
from carm_advisor.tune.result import batch_range_warnings
from carm_advisor.tune.study import tune  # noqa: E402

H200_BYTES = 150109880320   # carm_advisor/profiles/nvidia_h200.json device.memory_bytes: "150.1 GB"


def three_dense(name="three_dense"):
    """100 -> Dense 50 -> Dense 20 -> Dense 10 (with biases).
    weights: 100*50+50 = 5050, 50*20+20 = 1020, 20*10+10 = 210: 6280 float32 = 25120 bytes.
    Per sample, float32: largest input + output: the first, 100 + 50 = 150 elements = 600 bytes;
    inputs kept for backward (distinct shapes 100, 50, 20): 170 elements = 680 bytes."""
    inputs = keras.Input(shape=(100,))
    x = keras.layers.Dense(50, name="d1")(inputs)
    x = keras.layers.Dense(20, name="d2")(x)
    outputs = keras.layers.Dense(10, name="d3")(x)
    return keras.Model(inputs, outputs, name=name)


def test_lower_bound_of_three_dense_layers_by_hand():
    model = three_dense()
    costs = map_model(model, batch_size=1000, compute_dtype="float32")
    infer = footprint_lower_bound(model, costs)
    # 25120 + 600 * 1000 = 625,120
    assert infer.weights_bytes == 25120 and infer.largest_layer == "d1" and infer.largest_layer_bytes == 600_000
    assert infer.total_bytes == 625_120
    train = footprint_lower_bound(model, costs, training=True, backend="torch")
    # gradients, kept activations and the largest layer need not be resident together (backward frees the
    # activations as the gradients appear): weights 25120 + max(gradients 25120, kept 680 * 1000 = 680,000,
    # largest 600,000) = 705,120
    assert train.gradient_bytes == 25120 and train.kept_bytes == 680_000 and train.total_bytes == 705_120
    # jax: XLA may rematerialise the kept inputs, so only the largest layer counts: 25120 + max(25120, 600,000)
    assert footprint_lower_bound(model, costs, training=True, backend="jax").total_bytes == 625_120
    # bfloat16 compute halves the activations, not the (float32) weights: 25120 + 300 * 1000
    half = footprint_lower_bound(model, map_model(model, batch_size=1000, compute_dtype="bfloat16"))
    assert half.total_bytes == 325_120


def test_a_frozen_layers_input_is_not_kept_for_backward():
    model = three_dense("frozen_first")
    model.get_layer("d1").trainable = False
    train = footprint_lower_bound(model, map_model(model, batch_size=1000), training=True, backend="torch")
    # kept: the inputs of d2 (50) and d3 (20) only: 70 * 4 * 1000 = 280,000 < the largest layer's 600,000;
    # gradients: d2 and d3's weights, 1020 + 210 = 1230 * 4 = 4920.  25120 + max(4920, 280,000, 600,000) = 625,120
    assert train.kept_bytes == 280_000 and train.gradient_bytes == 4920 and train.total_bytes == 625_120


def test_the_gradients_alone_can_set_the_training_bound():
    """Dense 1000 -> 1000 (no bias) at batch 10: weights 1,000,000 float32 = 4,000,000 bytes, gradients the same;
    the layer's input + output (1000 + 1000) * 4 * 10 = 80,000; kept input 1000 * 4 * 10 = 40,000.
    Bound: 4,000,000 + max(4,000,000, 40,000, 80,000) = 8,000,000 (the old sum would say 8,080,000)."""
    inputs = keras.Input(shape=(1000,))
    model = keras.Model(inputs, keras.layers.Dense(1000, use_bias=False, name="wide")(inputs))
    train = footprint_lower_bound(model, map_model(model, batch_size=10), training=True, backend="torch")
    assert (train.gradient_bytes, train.kept_bytes, train.largest_layer_bytes) == (4_000_000, 40_000, 80_000)
    assert train.total_bytes == 8_000_000


def test_a_file_whose_bfloat16_policy_stays_is_counted_at_16_bits(tmp_path):
    """A model saved under a pure bfloat16 policy (file_traits: its precision cannot be replaced, so tune() searches
    it at the float32 precisions only, but it still computes in bfloat16). Conv2D(4, 3x3, same) on 8x8x3, Flatten,
    Dense(5): weights 3*3*3*4+4 = 112 and 256*5+5 = 1285, 1397 bfloat16 variables = 2794 bytes; the largest matmul
    layer is the conv, 8*8*3 + 8*8*4 = 448 elements a sample in and out (the dense: 256 + 5 = 261), at 2 bytes.
    At batch 1000 under the float32 configuration: 2794 + 448 * 2 * 1000 = 898,794 (at 4 bytes it would say
    2794 + 1,792,000 = 1,794,794). On a GPU of 1,000,000 bytes it may fit: not pruned."""
    from carm_advisor.models.builder import file_traits

    keras.mixed_precision.set_global_policy("bfloat16")
    try:
        inputs = keras.Input((8, 8, 3))
        x = keras.layers.Flatten()(keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs))
        path = tmp_path / "bf16.keras"
        keras.Model(inputs, keras.layers.Dense(5)(x)).save(path)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    spec = model_spec(str(path))
    assert file_traits(spec).fixed_precision
    base = load_profile()
    small = dataclasses.replace(base, device={**base.device, "name": "Small GPU", "memory_bytes": 1_000_000})
    p = ConfigPredictor(spec, small, calibration=False)
    config = TrialConfig("torch", "float32", 1000, "channels_last", "eager")
    m = p.memory(config)
    assert m.weights_bytes == 2794 and m.largest_layer == "conv" and m.largest_layer_dtype == "bfloat16"
    assert m.largest_layer_bytes == 896_000 and m.total_bytes == 898_794
    assert p.does_not_fit(config) is None


@pytest.fixture(scope="module")
def vgg16():
    return keras.applications.VGG16(weights=None)


def test_vgg16_lower_bound_on_the_h200_by_hand(vgg16):
    """VGG16: 138,357,544 float32 weights = 553,430,176 bytes. Its largest matmul layer is block1_conv2:
    input and output 224 x 224 x 64 = 3,211,264 elements each, 6,422,528 a sample."""
    p = ConfigPredictor(model_spec(vgg16), load_profile(), model=vgg16, calibration=False)
    assert p.profile.device["memory_bytes"] == H200_BYTES
    fp32 = TrialConfig("jax", "float32", 32768, "channels_last", "xla")
    m = p.memory(fp32)
    # 553,430,176 + 6,422,528 * 4 * 32768 = 553,430,176 + 841,813,590,016 = 842,367,020,192
    assert m.weights_bytes == 553_430_176 and m.largest_layer == "block1_conv2"
    assert m.total_bytes == 842_367_020_192
    assert p.does_not_fit(fp32).startswith("predicted: needs at least 842.4 GB, the GPU has 150.1 GB")
    # bfloat16 at 8192: 553,430,176 + 6,422,528 * 2 * 8192 = 105,780,128,928 (105.8 GB): may fit
    assert p.memory(TrialConfig("jax", "mixed_bfloat16", 8192, "channels_last", "xla")).total_bytes == 105_780_128_928
    assert p.does_not_fit(TrialConfig("jax", "mixed_bfloat16", 8192, "channels_last", "xla")) is None
    # float32 at 8192: 553,430,176 + 6,422,528 * 4 * 8192 = 211,006,827,680 (211.0 GB): cannot
    assert "needs at least 211.0 GB" in p.does_not_fit(TrialConfig("jax", "float32", 8192, "channels_last", "xla"))


def test_the_reported_command_never_picks_a_batch_that_cannot_fit(vgg16, tmp_path):
    """`tune vgg16 --batch-sizes 32768 --backends jax --trials 3` picked b32768 (one 210 GB activation at 16
    bits). b32768 alone is now refused (tests/test_tune_user_errors.py); beside b32 it is never picked as a start, a
    trial of it is pruned out of memory, and the result names it, with the least it needs:
    mixed_bfloat16 b32768: 553,430,176 + 6,422,528 * 2 * 32768 = 421,460,225,184 bytes (421.5 GB)."""
    storage = str(tmp_path / "x.db")
    big = TrialConfig("jax", "mixed_bfloat16", 32768, "channels_last", "xla")
    study = optuna.create_study(storage=f"sqlite:///{storage}", study_name="s", direction="maximize")
    study.enqueue_trial(big.params())   # run it for sure (the sampler may not draw it in 3 trials)
    r = tune(vgg16, n_trials=3, storage=storage, study_name="s", predict=True, backends=("jax",),
             batch_sizes=(32, 32768), progress=False)
    pruned = [t for t in r.trials if t.config and t.config.key == big.key]
    assert pruned and pruned[0].state == "PRUNED" and pruned[0].pruned_reason == "out_of_memory"
    assert pruned[0].pruned_detail.startswith("predicted: needs at least 421.5 GB, the GPU has 150.1 GB")
    assert r.counts["pruned_out_of_memory"] >= 1
    assert r.best is not None and r.best.config.batch_size == 32
    assert all(t.config.batch_size == 32 for t in r.trials if t.state == "COMPLETE")
    assert not any(t.role == "carm_order" and t.config.batch_size == 32768 for t in r.trials)
    assert any(w.startswith("batch size 32768 asked for never fits the GPU's memory by the predicted memory lower "
                            "bound (batch 32768 needs at least 421.5 GB, the GPU has 150.1 GB") and
               w.endswith("the best comes from batch 32") for w in r.warnings)


def test_a_small_gpu_prunes_the_large_batch_and_keeps_the_one_that_fits(tmp_path):
    """tiny_cnn: Conv2D(4, 3x3, same) on 8x8x3, Flatten, Dense(5, dtype="float32"). Weights: 3*3*3*4+4 = 112,
    256*5+5 = 1285: 1397 float32 = 5588 bytes. Largest matmul layer, inputs and outputs a sample: float32, the
    conv, (8*8*3 + 8*8*4) * 4 = 1792 bytes; mixed_bfloat16, the Dense, which the builder pins to float32,
    (256 + 5) * 4 = 1044 bytes (the conv's 448 elements at 2 bytes are 896). A GPU of 1,200,000 bytes: float32
    b1024 needs 5588 + 1792*1024 = 1,840,596 (cannot); mixed_bfloat16 b1024 needs 5588 + 1044*1024 = 1,074,644
    (may fit)."""
    from tiny_models import tiny_cnn

    base = load_profile()
    small = dataclasses.replace(base, device={**base.device, "name": "Small GPU", "memory_bytes": 1_200_000})
    space = SearchSpace(backends=("torch",), precisions=("float32", "mixed_bfloat16"), batch_sizes=(32, 1024),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    storage = str(tmp_path / "t.db")
    study = optuna.create_study(storage=f"sqlite:///{storage}", study_name="t", direction="maximize")
    f32 = TrialConfig("torch", "float32", 1024, "channels_last", "eager")
    b16 = TrialConfig("torch", "mixed_bfloat16", 1024, "channels_last", "eager")
    for cfg in (f32, b16):
        study.enqueue_trial(cfg.params())
    r = tune(tiny_cnn, n_trials=4, storage=storage, study_name="t", space=space, predict=True, profile=small,
             calibration=False, carm_pruning=False, progress=False)
    by_key = {t.config.key: t for t in r.trials if t.config}
    assert by_key[f32.key].state == "PRUNED" and by_key[f32.key].pruned_reason == "out_of_memory"
    assert by_key[f32.key].pruned_detail.startswith("predicted: needs at least 0.00184 GB, the GPU has 0.0012 GB")
    assert by_key[b16.key].state == "COMPLETE"
    assert r.best.config.key != f32.key
    m = ConfigPredictor(model_spec(tiny_cnn), small, calibration=False).memory(b16)
    assert (m.total_bytes, m.largest_layer_dtype) == (1_074_644, "float32")


def test_one_warning_names_calibrated_values_outside_the_calibrated_batch_sizes():
    class Ranges:
        def calibrated_batch_range(self, backend, compiler):
            return {("torch", "eager"): (32, 256), ("jax", "xla"): (32, 256)}.get((backend, compiler))

    def rec(n, backend, compiler, batch, source="calibrated", state="COMPLETE", repeat_of=None):
        return TrialRecord(n, state, TrialConfig(backend, "float32", batch, "channels_last", compiler), [1.0], {}, None,
                           True, repeat_of=repeat_of, value_source=source)

    records = [rec(0, "torch", "eager", 32), rec(1, "torch", "eager", 512), rec(2, "torch", "eager", 1024),
               rec(3, "jax", "xla", 16), rec(4, "jax", "xla", 256),
               rec(5, "tensorflow", "graph", 4096, source="CARM bound"),         # a bound: no calibration to leave
               rec(6, "torch", "eager", 2048, state="PRUNED"),                  # never evaluated
               rec(7, "torch", "eager", 512, repeat_of=1)]                      # counted once
    warnings = batch_range_warnings(records, Ranges())
    assert warnings == ["calibrated values outside the batch sizes the calibration was fitted on are "
                        "extrapolations: jax xla at batch 16 (records: batch 32-256); torch eager at batch 512, "
                        "1024 (records: batch 32-256)"]
    assert batch_range_warnings(records[:1] + records[4:5], Ranges()) == []
    assert batch_range_warnings(records, object()) == []   # a predictor that cannot say: nothing


def test_the_shipped_h200_calibration_records_its_batch_sizes():
    """The whole-model records note their batch size: VGG16 was tuned at 32, 64, 128 and 256 on torch eager
    and jax jit (nvidia_h200_calibration.json; benchmarks/results), so that is the range."""
    from carm_advisor.calibration import load_calibration

    p = ConfigPredictor(model_spec("vgg16"), load_profile(), calibration=load_calibration(None, "NVIDIA H200"))
    assert p.calibrated_batch_range("torch", "eager") == (32, 256)
    assert p.calibrated_batch_range("jax", "xla") == (32, 256)
    assert p.calibrated_batch_range("tensorflow", "graph") is None


def test_a_predicted_study_carries_the_batch_range_warning_to_its_result_and_summary(tmp_path):
    import io

    from rich.console import Console
    from stubs import BackendTablePredictor

    class Ranged(BackendTablePredictor):
        def calibrated_batch_range(self, backend, compiler):
            return (32, 64) if (backend, compiler) == ("torch", "eager") else None

    space = SearchSpace(backends=("torch",), precisions=("float32",), batch_sizes=(32, 128),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    storage = str(tmp_path / "w.db")
    study = optuna.create_study(storage=f"sqlite:///{storage}", study_name="w", direction="maximize")
    study.enqueue_trial(TrialConfig("torch", "float32", 128, "channels_last", "eager").params())
    r = tune("vgg16", n_trials=2, storage=storage, study_name="w", space=space, predict=True, carm_pruning=False,
             baseline=TrialConfig("torch", "float32", 32, "channels_last", "eager"), progress=False,
             predictor=Ranged({"torch": (0.01, 1.0)}, {"torch": (0.03, 3.0)}))
    assert r.warnings == ["calibrated values outside the batch sizes the calibration was fitted on are "
                          "extrapolations: torch eager at batch 128 (records: batch 32-64)"]
    assert r.to_dict()["warnings"] == r.warnings
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(r)
    assert "warning: calibrated values outside the batch sizes" in out.getvalue()
