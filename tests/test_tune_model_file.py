"""A user's .keras file in the tuner: searched at every precision (rebuilt from its config under the trial's
dtype policy, with its own weights); its layout stays its own, and what the space leaves out is said in one
line in the result's warnings and its rendered summary, with how to widen it (a builder "module:function")."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from rich.console import Console

from carm_advisor.models.builder import build, model_spec
from carm_advisor.models.loader import dtype_policy
from carm_advisor.profiles.profile import load_profile
from carm_advisor.trials.predicted import ConfigPredictor
from carm_advisor.trials.space import PRECISIONS, TrialConfig
from carm_advisor.tune.study import tune

SUPPORT = Path(__file__).parent / "tune_support"


def _small(fmt: str = "channels_last", output_dtype=None):
    shape = (16, 16, 3) if fmt == "channels_last" else (3, 16, 16)
    inputs = keras.Input(shape)
    x = keras.layers.Conv2D(8, 3, activation="relu", data_format=fmt, name="conv")(inputs)
    x = keras.layers.Flatten(name="flatten")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="fc", dtype=output_dtype)(x)
    return keras.Model(inputs, outputs, name="small")


def _mixed_small(policy: str):
    """_small built under a mixed `policy`, its output layer pinned to float32 (the mixed-precision guide's)."""
    with dtype_policy(policy):
        return _small(output_dtype="float32")


def _save(model, path: Path) -> str:
    model.save(path)
    return str(path)


def _tune(path: str, tmp_path: Path, **kwargs):
    return tune(path, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "s.db"),
                backends=("torch",), **kwargs)


def _rendered(result) -> str:
    buf = io.StringIO()
    Console(file=buf, width=400).print(result)
    return buf.getvalue()


def test_a_model_file_is_searched_at_mixed_precision_and_the_layout_left_out_is_said(tmp_path):
    path = _save(_small(), tmp_path / "small.keras")
    result = _tune(path, tmp_path)
    # The five precisions of the space (README: float32, TF32 on, TF32 off, mixed_float16, mixed_bfloat16).
    assert result.space.precisions == PRECISIONS
    assert result.space.layouts == ("channels_last",)
    # One line: what was left out (channels_first), why, and how to search it.
    assert len(result.warnings) == 1
    w = result.warnings[0]
    assert "\n" not in w and w.startswith("small.keras: channels_first not searched")
    assert "laid out" in w and "'module:function'" in w
    assert result.to_dict()["warnings"] == result.warnings
    assert "warning: small.keras: channels_first not searched" in _rendered(result)


def test_a_channels_first_file_keeps_its_own_layout_and_says_channels_last_is_left_out(tmp_path):
    path = _save(_small("channels_first"), tmp_path / "small.keras")
    result = _tune(path, tmp_path)
    assert result.space.layouts == ("channels_first",)
    assert result.baseline.config.layout == "channels_first"
    assert result.warnings[0].startswith("small.keras: channels_last not searched")


def test_a_file_without_a_layer_that_has_a_layout_has_nothing_left_out(tmp_path):
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc")(inputs), name="mlp")
    result = _tune(_save(model, tmp_path / "mlp.keras"), tmp_path)
    assert result.space.precisions == PRECISIONS and len(result.space.layouts) == 1
    assert result.warnings == []


def test_a_quantized_file_keeps_its_precision_and_the_warning_names_what_was_dropped(tmp_path):
    inputs = keras.Input((32,))
    x = keras.layers.Reshape((4, 4, 2), name="reshape")(inputs)
    x = keras.layers.Conv2D(4, 3, name="conv")(x)
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc")(keras.layers.Flatten()(x)), name="q")
    model.quantize("int8")   # Dense kernels to int8: a rebuild cannot give them another policy
    path = _save(model, tmp_path / "q.keras")
    from carm_advisor.models.builder import file_traits

    traits = file_traits(model_spec(path))
    assert traits.fixed_precision and "int8_from_float32" in traits.fixed_precision
    from carm_advisor.trials.space import SearchSpace
    from carm_advisor.tune.study_setup import narrow_to_file

    space, _, notes = narrow_to_file(SearchSpace(("torch",)), model_spec(path))
    assert space.precisions == ("float32", "float32_tf32", "float32_no_tf32")
    assert space.layouts == ("channels_last",)
    assert len(notes) == 1
    assert notes[0].startswith("q.keras: mixed_float16, mixed_bfloat16, int8, float8, channels_first not searched")
    assert "int8_from_float32" in notes[0] and "'module:function'" in notes[0]


def test_a_file_is_rebuilt_under_the_trials_policy_with_its_own_weights(tmp_path):
    model = _small()
    path = _save(model, tmp_path / "small.keras")
    spec = model_spec(path)
    f32 = build(spec, "float32")
    mixed = build(spec, "mixed_float16")
    assert [lay.dtype_policy.name for lay in f32.layers[1:]] == ["float32"] * 3
    assert [lay.dtype_policy.name for lay in mixed.layers[1:]] == ["mixed_float16"] * 3
    assert mixed.get_layer("conv").compute_dtype == "float16"
    for a, b in zip(mixed.get_weights(), model.get_weights()):   # the file's weights, variables in float32
        assert a.dtype == np.float32 and np.array_equal(a, b)


def test_a_file_saved_mixed_keeps_its_float32_output_layer_and_runs_its_own_policy_as_baseline(tmp_path):
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = _small(output_dtype="float32")   # the mixed-precision guide's float32 output layer
    finally:
        keras.config.set_dtype_policy("float32")
    path = _save(model, tmp_path / "small.keras")
    spec = model_spec(path)
    bf16 = build(spec, "mixed_bfloat16")
    assert [bf16.get_layer(n).dtype_policy.name for n in ("conv", "flatten", "fc")] == \
        ["mixed_bfloat16", "mixed_bfloat16", "float32"]
    assert all(lay.dtype_policy.name == "float32" for lay in build(spec, "float32").layers[1:])
    result = _tune(path, tmp_path)
    assert result.baseline.config.precision == "mixed_float16"


def test_the_real_worker_runs_a_model_file_at_mixed_precision(tmp_path, monkeypatch):
    """Before, the worker ran the file as saved for every precision: mixed_bfloat16 had float32's zero error."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(SUPPORT))
    from stubs import TablePredictor
    from tiny_models import tiny_cnn

    from carm_advisor.trials.runner import WorkerRunner, WorkerSettings
    from carm_advisor.trials.space import TrialConfig

    path = _save(tiny_cnn(), tmp_path / "tiny_cnn.keras")
    settings = WorkerSettings(window_s=0.05, min_windows=2, max_windows=3, warmup_calls=1, idle_gap_s=0,
                              accuracy_samples=4)
    runner = WorkerRunner(path, TablePredictor({"float32": (1, 1), "mixed_bfloat16": (1, 1)}, 100.0),
                          settings, trial_timeout_s=300, log_dir=str(tmp_path))
    try:
        f32 = runner.run(TrialConfig("torch", "float32", 4, "channels_last", "eager"))
        bf16 = runner.run(TrialConfig("torch", "mixed_bfloat16", 4, "channels_last", "eager"))
    finally:
        runner.close()
    assert f32.output_error < 1e-5
    assert 1e-5 < bf16.output_error < 0.1   # bfloat16 keeps ~3 significant digits


# ---- a built keras.Model passed to tune(): the same narrowing as its saved copy -----------------------


def _tune_built(model, tmp_path: Path, **kwargs):
    return tune(model, n_trials=4, predict=True, progress=False, storage=str(tmp_path / "b.db"),
                backends=("torch",), **kwargs)


@pytest.mark.parametrize("fmt,other", [("channels_last", "channels_first"), ("channels_first", "channels_last")])
def test_a_built_model_keeps_its_own_layout_and_says_the_other_is_left_out(tmp_path, fmt, other):
    result = _tune_built(_small(fmt), tmp_path)
    assert result.space.layouts == (fmt,)
    assert result.baseline.config.layout == fmt
    assert all(t.config.layout == fmt for t in result.trials)
    assert result.space.precisions == PRECISIONS   # a predicted study sets the compute dtype
    assert len(result.warnings) == 1
    w = result.warnings[0]
    assert "\n" not in w and w.startswith(f"the model 'small': {other} not searched")
    assert f"its layout stays {fmt} (a built model's" in w


def test_a_built_models_layout_is_found_in_a_nested_model(tmp_path):
    inner = keras.Sequential([keras.Input((3, 16, 16)), keras.layers.Conv2D(4, 3, data_format="channels_first"),
                              keras.layers.GlobalAveragePooling2D(data_format="channels_first")], name="inner")
    inputs = keras.Input((3, 16, 16))
    model = keras.Model(inputs, keras.layers.Dense(2, name="fc")(inner(inputs)), name="outer")
    from carm_advisor.models.builder import file_traits

    assert file_traits(model_spec(model)).layout == "channels_first"
    assert _tune_built(model, tmp_path).space.layouts == ("channels_first",)


def test_a_built_model_without_a_layout_has_nothing_left_out(tmp_path):
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="fc")(inputs), name="mlp")
    result = _tune_built(model, tmp_path)
    assert len(result.space.layouts) == 1 and result.warnings == []


def test_a_tie_between_policies_goes_to_the_mixed_one_whatever_the_hash_seed():
    """One mixed_bfloat16 layer and one float32 output layer: the file's own policy is the mixed one, in every
    process (set order varies with PYTHONHASHSEED, so the choice is checked under several seeds)."""
    import json
    import subprocess

    config = {"class_name": "Functional", "config": {"layers": [
        {"class_name": "Dense", "config": {"name": "h", "dtype": {"class_name": "DTypePolicy",
                                                                  "config": {"name": "mixed_bfloat16"}}}},
        {"class_name": "Dense", "config": {"name": "out", "dtype": {"class_name": "DTypePolicy",
                                                                    "config": {"name": "float32"}}}}]}}
    code = ("import json, sys; from carm_advisor.models.builder import config_traits; "
            f"print(config_traits(json.loads({json.dumps(json.dumps(config))})).policy)")
    for seed in ("0", "1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == "mixed_bfloat16", (seed, out.stdout, out.stderr)


def test_a_built_mixed_models_pinned_output_keeps_its_dtype_in_the_predicted_costs():
    # As analyze(model, precision=...) does: the layers under the model's own policy take the trial's compute dtype,
    # the float32 output layer keeps float32.
    model = _mixed_small("mixed_bfloat16")
    p = ConfigPredictor(model_spec(model), load_profile(), model=model, calibration=False)
    dtypes = {c.name: c.compute_dtype for c in p._costs(TrialConfig("torch", "mixed_float16", 8, "channels_last", "eager"))}
    assert dtypes["conv"] == "float16" and dtypes["fc"] == "float32"
    dtypes = {c.name: c.compute_dtype for c in p._costs(TrialConfig("torch", "float32", 8, "channels_last", "eager"))}
    assert dtypes["conv"] == "float32" and dtypes["fc"] == "float32"


def test_a_mixed_files_float32_output_keeps_its_dtype_in_the_predicted_costs(tmp_path):
    model = _mixed_small("mixed_float16")
    p = ConfigPredictor(model_spec(_save(model, tmp_path / "small.keras")), load_profile(), calibration=False)
    for precision, conv in (("mixed_bfloat16", "bfloat16"), ("float32", "float32"), ("mixed_float16", "float16")):
        dtypes = {c.name: c.compute_dtype for c in p._costs(TrialConfig("torch", precision, 8, "channels_last", "eager"))}
        assert (dtypes["conv"], dtypes["fc"]) == (conv, "float32"), precision


def test_a_rebuildable_mixed_model_at_float32_counts_float32_activations_in_its_memory_bound():
    # conv: 16 x 16 x 3 in, 14 x 14 x 8 out; fc: 1568 in, 10 out. The largest matmul layer is conv: (768 + 1568)
    # elements a sample, 4 bytes at float32 (a rebuild under float32 computes at 4, not at the saved 2).
    model = _mixed_small("mixed_float16")
    p = ConfigPredictor(model_spec(model), load_profile(), model=model, calibration=False)
    m = p.memory(TrialConfig("torch", "float32", 10, "channels_last", "eager"))
    assert (m.largest_layer, m.largest_layer_dtype) == ("conv", "float32")
    assert m.largest_layer_bytes == 10 * (16 * 16 * 3 + 14 * 14 * 8) * 4


def test_a_file_whose_policies_cannot_be_replaced_is_costed_at_its_own_dtypes(tmp_path):
    # bfloat16 variables: no rebuild keeps its weights, so every trial runs it at bfloat16 (a float32 trial too).
    inputs = keras.Input(shape=(64,))
    x = keras.layers.Dense(64, dtype="bfloat16", name="h")(inputs)
    path = _save(keras.Model(inputs, keras.layers.Dense(16, dtype="bfloat16", name="out")(x)), tmp_path / "bf16.keras")
    p = ConfigPredictor(model_spec(path), load_profile(), calibration=False)
    costs = p._costs(TrialConfig("torch", "float32", 8, "channels_last", "eager"))
    assert {c.name: c.compute_dtype for c in costs} == {"h": "bfloat16", "out": "bfloat16"}


def test_a_tune_of_a_file_reads_its_traits_once(tmp_path, monkeypatch):
    # tune() reads what the file fixes to narrow its space; its predictor takes that answer instead of reading the
    # file's config a second time. A file whose policies cannot be replaced is still costed at its own dtypes.
    from carm_advisor.models import builder
    inputs = keras.Input(shape=(64,))
    path = _save(keras.Model(inputs, keras.layers.Dense(16, dtype="bfloat16", name="out")(inputs)), tmp_path / "f.keras")
    reads = []
    real = builder.file_traits
    counted = lambda spec: reads.append(spec) or real(spec)  # noqa: E731
    monkeypatch.setattr(builder, "file_traits", counted)   # where the predictor reads it
    monkeypatch.setattr("carm_advisor.tune.study_setup.file_traits", counted)   # where tune() reads it
    result = _tune(path, tmp_path, batch_sizes=(8,))
    assert len(reads) == 1
    ran = [t.config.precision for t in result.trials if t.config is not None]
    assert ran and set(ran) <= {"float32", "float32_tf32", "float32_no_tf32"}


def test_a_sequentials_own_dtype_does_not_vote_for_its_policy():
    # Built under float32, a mixed_bfloat16 layer and its float32 output layer: the layers tie, and a tie goes to
    # the mixed policy. The Sequential's config also carries the global float32; counted, float32 would win 2-1.
    from carm_advisor.models.builder import config_traits, model_policy

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, dtype="mixed_bfloat16", name="a"),
                              keras.layers.Dense(8, dtype="float32", name="b")])
    assert config_traits(keras.saving.serialize_keras_object(model)).policy == "mixed_bfloat16"
    assert model_policy(model) == "mixed_bfloat16"
