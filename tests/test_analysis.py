import io
import json

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.errors import MappingError
from carm_advisor.models.loader import dtype_policy
from carm_advisor.profiles.profile import SCHEMA, profile_from_dict

DESIGN_LAYER_KEYS = {"name", "type", "flops", "bytes", "ai", "bound", "attainable_flops_per_s", "time_s", "energy_j", "measured"}


def round_profile(power=False):
    d = {
        "schema": SCHEMA,
        "device": {"name": "Round GPU", "l2_usable_bytes": 1000},
        "provenance": {"source": "recorded"},
        "ceilings": {
            "fp32": {"kind": "compute", "value": 1e12, "provenance": {"source": "datasheet"}},
            "tc_tf32": {"kind": "compute", "value": 1e13, "provenance": {"source": "datasheet"}},
            "tc_bf16": {"kind": "compute", "value": 2e13, "provenance": {"source": "datasheet"}},
            "l2": {"kind": "memory", "value": 1e12, "provenance": {"source": "datasheet"}},
            "hbm": {"kind": "memory", "value": 1e11, "provenance": {"source": "datasheet"}},
        },
    }
    if power:
        d["power_model"] = {"constant_w": 100, "power_limit_w": None,
                            "joules_per_flop": {"fp32": 1e-11, "tc_tf32": 1e-12, "tc_bf16": 5e-13},
                            "joules_per_byte": {"l2": 1e-11, "hbm": 1e-10}}
    return profile_from_dict(d)


def dense_model(dtype=None):
    inputs = keras.Input(shape=(1024,))
    outputs = keras.layers.Dense(1024, use_bias=False, name="fc", dtype=dtype)(inputs)
    return keras.Model(inputs, outputs, name="one_dense")


def test_dense_layer_lands_on_the_tf32_roof_by_hand_calculation():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("math mode differs per backend; this hand calculation assumes TensorFlow's TF32 default")
    report = advisor.analyze(dense_model(), batch_size=1024, profile=round_profile(), measure=False)
    (row,) = report.layers
    flops = 2 * 1024 * 1024 * 1024                 # 1024 samples x 1024x1024 multiply-adds
    bytes_ = 3 * 1024 * 1024 * 4                   # input, kernel and output, float32
    assert row.flops == flops and row.bytes == bytes_
    assert row.path == "tc_tf32" and row.level == "hbm"      # 12.6 MB > 1000 B of L2
    assert row.bound == "compute:tc_tf32"                    # AI 170.7 > ridge 1e13/1e11 = 100
    assert row.predicted_time_s == pytest.approx(flops / 1e13)
    assert report.totals()["flops_per_sample"] == pytest.approx(flops / 1024)


def test_energy_prediction_uses_the_power_model():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("assumes TensorFlow's TF32 default")
    report = advisor.analyze(dense_model(), batch_size=1024, profile=round_profile(power=True), measure=False)
    (row,) = report.layers
    t = 2 * 1024**3 / 1e13
    expected = 100 * t + 1e-12 * 2 * 1024**3 + 1e-10 * 3 * 1024 * 1024 * 4
    assert row.predicted_energy_j == pytest.approx(expected)


def test_mixed_precision_is_recommended_with_the_predicted_gain_of_the_bf16_roof():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("assumes TensorFlow's TF32 default")
    report = advisor.analyze(dense_model(), batch_size=1024, profile=round_profile(), measure=False)
    rec = next(r for r in report.recommendations if "bfloat16" in r.title)
    # bf16: 2^31 FLOPs at 2e13 -> 1.074e-4 s; 6.29 MB at 1e11 B/s -> 6.29e-5 s: compute-bound, 2x faster.
    assert rec.speedup == pytest.approx(2.0)


def test_precision_override_analyses_as_bfloat16():
    report = advisor.analyze(dense_model(), batch_size=1024, profile=round_profile(), precision="mixed_bfloat16", measure=False)
    (row,) = report.layers
    assert row.path == "tc_bf16" and row.bytes == 3 * 1024 * 1024 * 2


def _mixed_with_float32_output():
    """Built under mixed_bfloat16, its output layer pinned to float32: two of three layers hold mixed_bfloat16."""
    with dtype_policy("mixed_bfloat16"):
        inputs = keras.Input(shape=(64,))
        x = keras.layers.Dense(64, name="h1")(inputs)
        x = keras.layers.Dense(64, name="h2")(x)
        return keras.Model(inputs, keras.layers.Dense(16, dtype="float32", name="out")(x), name="mixed")


def test_precision_on_a_built_model_keeps_the_layers_pinned_to_another_policy_and_names_them():
    report = advisor.analyze(_mixed_with_float32_output(), batch_size=8, profile=round_profile(),
                             precision="mixed_float16", measure=False)
    assert {r.name: r.dtype for r in report.layers} == {"h1": "float16", "h2": "float16", "out": "float32"}
    assert report.model.precision == "mixed_float16"
    assert any("1 layer(s) pinned" in w and "out (float32)" in w for w in report.warnings)


def test_precision_equal_to_the_models_own_changes_no_layer():
    report = advisor.analyze(_mixed_with_float32_output(), batch_size=8, profile=round_profile(),
                             precision="mixed_bfloat16", measure=False)
    assert {r.name: r.dtype for r in report.layers} == {"h1": "bfloat16", "h2": "bfloat16", "out": "float32"}
    assert not any("pinned" in w for w in report.warnings)


def test_precision_float32_on_a_mixed_model_moves_its_own_layers_only():
    # Every layer float32 here, but the warning still names the pinned one: it kept its policy, it did not move.
    report = advisor.analyze(_mixed_with_float32_output(), batch_size=8, profile=round_profile(),
                             precision="float32", measure=False)
    assert [r.dtype for r in report.layers] == ["float32"] * 3
    assert any("out (float32)" in w for w in report.warnings)
    # h1 at 4 bytes an element: reads its 8 x 64 input, 64 x 64 kernel and 64 biases, writes 8 x 64.
    assert report.layers[0].bytes == 4 * (8 * 64 + 64 * 64 + 64 + 8 * 64)


def test_a_keras_ops_node_moves_with_the_layers_that_feed_it():
    # h1 + h2 (a keras.ops add) is fed by layers under the model's policy: it moves with them. out * out is fed by
    # the float32 output layer: it stays float32, as the rebuilt model would run it.
    with dtype_policy("mixed_bfloat16"):
        inputs = keras.Input(shape=(64,))
        h1 = keras.layers.Dense(64, name="h1")(inputs)
        h2 = keras.layers.Dense(64, name="h2")(h1)
        out = keras.layers.Dense(16, dtype="float32", name="out")(h1 + h2)
        model = keras.Model(inputs, out * out)
    report = advisor.analyze(model, batch_size=8, profile=round_profile(), precision="mixed_float16", measure=False)
    dtypes = {r.type: r.dtype for r in report.layers if r.type in ("Add", "Multiply")}
    assert dtypes == {"Add": "float16", "Multiply": "float32"}
    add = next(r for r in report.layers if r.type == "Add")
    assert add.bytes == 2 * (2 * 8 * 64 + 8 * 64)       # reads two 8 x 64 tensors, writes one, 2 bytes each


def test_a_user_layer_made_of_sublayers_is_judged_by_its_sublayers_policies():
    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.a = keras.layers.Dense(32, dtype="mixed_bfloat16", name="ba")
            self.b = keras.layers.Dense(32, dtype="mixed_bfloat16", name="bb")

        def call(self, x):
            return self.b(self.a(x))

    with dtype_policy("mixed_bfloat16"):
        inputs = keras.Input(shape=(32,))
        x = keras.layers.Dense(32, name="h")(inputs)
        model = keras.Model(inputs, Block(dtype="float32", name="head")(x))
    report = advisor.analyze(model, batch_size=8, profile=round_profile(), precision="mixed_float16", measure=False)
    assert {r.name: r.dtype for r in report.layers} == {"h": "float16", "head/ba": "float16", "head/bb": "float16"}
    assert not any("pinned" in w for w in report.warnings)


@pytest.mark.parametrize("dense, norms", [(3, 1), (1, 3)])
def test_a_quantized_layer_counts_under_its_source_policy_whatever_the_layer_count(dense, norms):
    inputs = keras.Input(shape=(32,))
    x = inputs
    for i in range(dense):
        x = keras.layers.Dense(32, name=f"d{i}")(x)
    for i in range(norms):
        x = keras.layers.LayerNormalization(name=f"ln{i}")(x)
    model = keras.Model(inputs, x)
    model.quantize("int8")
    report = advisor.analyze(model, batch_size=8, profile=round_profile(), precision="mixed_bfloat16", measure=False)
    # the int8 Dense layers carry their quantised dtype; the rest count under the model's own (bfloat16) policy
    assert {r.type: r.dtype for r in report.layers} == {"Dense": "int8", "LayerNormalization": "bfloat16"}
    assert not any("pinned" in w for w in report.warnings)


def test_a_what_if_precision_keeps_the_pinned_layers():
    # The mixed-precision what-if (recommend.py) re-predicts with ModelPredictor.rows(dtype=...): as a rebuild.
    from carm_advisor.predict import Predictor

    predictor = Predictor.for_backend(round_profile(), "torch")
    rows = predictor.for_model(_mixed_with_float32_output(), 8).rows(dtype="float16")
    assert {r.name: r.dtype for r in rows} == {"h1": "float16", "h2": "float16", "out": "float32"}


def test_report_json_has_the_design_keys(tmp_path):
    report = advisor.analyze(dense_model(), batch_size=8, profile=round_profile(), measure=False)
    path = tmp_path / "r.json"
    report.to_json(path)
    d = json.loads(path.read_text())
    assert d["schema"] == "carm-advisor/report/1"
    assert set(d["model"]) >= {"name", "batch_size", "precision", "layout", "backend"}
    assert d["device"]["source"] == "profile"
    assert set(d["layers"][0]) >= DESIGN_LAYER_KEYS
    assert d["layers"][0]["time_s"] is None and d["layers"][0]["measured"] is False
    assert set(d["totals"]) >= {"flops_per_sample", "flops", "bytes", "time_s", "energy_j"}
    assert all(set(r) >= {"title", "detail", "expected_gain"} for r in d["recommendations"])


def test_rendering_says_the_figures_are_predictions():
    report = advisor.analyze(dense_model(), batch_size=8, profile=round_profile(), measure=False)
    buf = io.StringIO()
    report.print(Console(file=buf, width=140))
    text = buf.getvalue()
    assert "PREDICTED" in text and "fc" in text and "Round GPU" in text


def test_plot_writes_a_png(tmp_path):
    report = advisor.analyze(dense_model(), batch_size=8, profile=round_profile(), measure=False)
    path = report.plot(tmp_path / "carm.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_layers_are_reported_not_counted_as_zero():
    class Mystery(keras.layers.Layer):
        def call(self, x):
            return x * 2

    inputs = keras.Input(shape=(16,))
    model = keras.Model(inputs, Mystery(name="mystery")(keras.layers.Dense(16, name="d")(inputs)))
    report = advisor.analyze(model, batch_size=4, profile=round_profile(), measure=False)
    assert [r.name for r in report.unknown_layers] == ["mystery"]
    assert report.totals()["unknown_layers"] == 1
    assert any("mystery" in w for w in report.warnings)
    with pytest.raises(advisor.CarmError, match="mystery"):
        advisor.analyze(model, batch_size=4, profile=round_profile(), measure=False, strict=True)


def test_measure_true_without_a_gpu_is_a_clear_error():
    from carm_advisor.errors import GPUUnavailableError

    with pytest.raises(GPUUnavailableError):
        advisor.analyze(dense_model(), batch_size=2, profile=round_profile(), measure=True)


def test_bad_batch_size_is_rejected():
    with pytest.raises(ValueError, match="batch_size"):
        advisor.analyze(dense_model(), batch_size=0, profile=round_profile(), measure=False)


def test_without_a_power_model_energy_is_unknown_not_zero():
    # round_profile() has no power model: no energy can be predicted, so none is claimed.
    report = advisor.analyze(dense_model(), batch_size=8, profile=round_profile(), measure=False)
    totals = report.totals()
    assert totals["energy_j"] is None and totals["predicted_energy_j"] is None
    assert totals["samples_per_j"] is None and totals["gflops_per_watt"] is None
    buf = io.StringIO()
    report.print(Console(file=buf, width=140))
    text = " ".join(buf.getvalue().replace("│", " ").split())   # the header line may wrap
    assert "energy 0 J" not in text and "energy none (the profile has no power model)" in text
    assert "samples/J" not in text.split("Layers on the CARM")[0]   # no figure of dashes, the reason instead


def test_torch_channels_last_layout_advice_counts_the_transpose_traffic(monkeypatch):
    import carm_advisor.advise.analyze as analysis

    inputs = keras.Input(shape=(64, 64, 32))
    conv = keras.layers.Conv2D(32, 3, padding="same", use_bias=False, name="conv")(inputs)
    model = keras.Model(inputs, conv)
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    report = analysis.analyze(model, batch_size=16, profile=round_profile(), measure=False)
    rec = next(r for r in report.recommendations if "channels_first" in r.title)
    # input 16x64x64x32 float32 = 8,388,608 B, copied twice (read+write each): 4 x 8.39 MB at HBM 1e11 B/s
    extra_s = 4 * 16 * 64 * 64 * 32 * 4 / 1e11
    (row,) = report.layers
    assert row.input_bytes == 16 * 64 * 64 * 32 * 4
    assert rec.speedup == pytest.approx((row.predicted_time_s + extra_s) / row.predicted_time_s)


def test_fusion_of_memory_bound_elementwise_layers_saves_their_predicted_time():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("assumes TensorFlow's TF32 default")
    inputs = keras.Input(shape=(32, 32, 16))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False, name="conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(name="relu")(x)
    report = advisor.analyze(keras.Model(inputs, x), batch_size=8, profile=round_profile(), measure=False)
    rec = next(r for r in report.recommendations if "elementwise layer" in r.detail)
    assert rec.layers == ["bn", "relu"]
    tensor = 8 * 32 * 32 * 16 * 4                      # one float32 activation tensor, bytes
    conv_s = (tensor + 3 * 3 * 16 * 16 * 4 + tensor) / 1e11   # memory-bound on HBM (37.7 MFLOP at 1e13 is faster)
    bn_s = (2 * tensor + 4 * 16 * 4) / 1e11                    # gamma, beta, mean, variance read once
    relu_s = 2 * tensor / 1e11
    assert rec.speedup == pytest.approx((conv_s + bn_s + relu_s) / conv_s)


def test_a_weight_bound_dense_layer_gets_the_larger_batch_advice_with_its_per_sample_gain():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("assumes TensorFlow's TF32 default")
    report = advisor.analyze(dense_model(), batch_size=1, profile=round_profile(), measure=False)
    rec = next(r for r in report.recommendations if r.title.startswith("Raise the batch size"))
    assert "from 1 to 32" in rec.title
    weights = 1024 * 1024 * 4
    per_sample_now = (4096 + weights + 4096) / 1e11              # HBM-bound: the weights dominate
    per_sample_new = (32 * 4096 + weights + 32 * 4096) / 1e11 / 32
    assert rec.speedup == pytest.approx(per_sample_now / per_sample_new)


def test_channel_counts_off_the_tensor_core_multiple_are_flagged():
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(12, 3, name="rgb_conv")(inputs)          # 3 and 12 channels
    x = keras.layers.Conv2D(16, 3, name="aligned_conv")(x)           # 12 -> 16
    report = advisor.analyze(keras.Model(inputs, x), batch_size=4, profile=round_profile(),
                             precision="mixed_bfloat16", measure=False)
    rec = next(r for r in report.recommendations if r.title.startswith("Pad channel counts"))
    # BF16 tiles need multiples of 8: 3 and 12 are not; 12 -> 16 still has 12 inputs
    assert rec.layers == ["rgb_conv", "aligned_conv"]
    assert "multiple of 8" in rec.detail


def _row(name, bound_s, notes=""):
    from carm_advisor.results import LayerRow

    return LayerRow(name=name, type="SeparableConv2D", dtype="float32", flops=1000, bytes=1000, ai=1.0,
                    ai_source="analytic", path="fp32", level="hbm", bound="memory:hbm", attainable_flops_per_s=1e11,
                    predicted_time_s=bound_s, predicted_energy_j=None, tensor_core=False, known=True, notes=notes)


def test_a_separable_conv_measured_as_one_call_is_split_over_its_parts_by_bound_time():
    from types import SimpleNamespace

    from carm_advisor.learn import merge_measurements
    from carm_advisor.measure.records import LayerMeasurement

    rows = [_row("sep:depthwise", 1e-6, "depthwise half"), _row("sep:pointwise", 3e-6), _row("other", 2e-6)]
    run = SimpleNamespace(layers=[LayerMeasurement("sep", "SeparableConv2D", 8e-6, 0.1, 10, energy_j=4e-3)])
    merge_measurements(rows, run, round_profile())
    dw, pw, other = rows
    # bound shares 1/(1+3) and 3/(1+3) of the one measured 8 us and 4 mJ
    assert dw.measured and pw.measured and not other.measured
    assert dw.time_s == pytest.approx(2e-6) and pw.time_s == pytest.approx(6e-6)
    assert dw.energy_j == pytest.approx(1e-3) and pw.energy_j == pytest.approx(3e-3)
    assert dw.notes.startswith("depthwise half; measured as one call 'sep'") and "0.250" in dw.notes
    assert "0.750" in pw.notes


def test_a_separable_conv_model_gets_both_parts_measured():
    from types import SimpleNamespace

    from carm_advisor.learn import merge_measurements
    from carm_advisor.measure.records import LayerMeasurement
    from carm_advisor.predict import Predictor

    inputs = keras.Input(shape=(16, 16, 8))
    outputs = keras.layers.SeparableConv2D(16, 3, name="sep")(inputs)
    rows = Predictor(round_profile(), {}).rows(keras.Model(inputs, outputs), batch_size=4)
    names = sorted(r.name for r in rows)
    assert names == ["sep:depthwise", "sep:pointwise"]
    run = SimpleNamespace(layers=[LayerMeasurement("sep", "SeparableConv2D", 1e-3, 0.0, 3)])
    merge_measurements(rows, run, round_profile())
    assert all(r.measured for r in rows)
    assert sum(r.time_s for r in rows) == pytest.approx(1e-3)


def mixed_model_with_a_float32_output(tmp_path, policy="mixed_bfloat16"):
    """Saved under `policy` with its output layer pinned to float32 (Keras' advice), loaded under float32: the
    loaded Model object's own policy says float32, two of its three layers hold `policy`."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        inputs = keras.Input(shape=(1024,))
        x = keras.layers.Dense(1024, name="h1")(inputs)
        x = keras.layers.Dense(1024, name="h2")(x)
        outputs = keras.layers.Dense(1024, dtype="float32", name="out")(x)
        keras.Model(inputs, outputs, name="mixed").save(tmp_path / f"{policy}.keras")
    finally:
        keras.config.set_dtype_policy(previous)
    return keras.saving.load_model(tmp_path / f"{policy}.keras")


def test_a_mixed_model_with_a_pinned_float32_output_is_labelled_by_the_policy_most_layers_hold(tmp_path):
    model = mixed_model_with_a_float32_output(tmp_path)
    assert model.dtype_policy.name == "float32"          # what the label used to be read from
    report = advisor.analyze(model, batch_size=1024, profile=round_profile(), measure=False)
    assert report.model.precision == "mixed_bfloat16"
    assert [r.dtype for r in report.layers] == ["bfloat16", "bfloat16", "float32"]


def test_a_model_already_under_mixed_bfloat16_is_not_told_to_use_it(tmp_path):
    # The pinned float32 output (1024x1024 at batch 1024) sits on the TF32 roof, 2x slower than BF16: the old
    # advice recommended mixed_bfloat16 for it, the policy the model already uses.
    report = advisor.analyze(mixed_model_with_a_float32_output(tmp_path), batch_size=1024, profile=round_profile(),
                             measure=False)
    assert not any("mixed_bfloat16" in r.title for r in report.recommendations)
    half = advisor.analyze(mixed_model_with_a_float32_output(tmp_path, "mixed_float16"), batch_size=1024,
                           profile=round_profile(), measure=False)
    assert half.model.precision == "mixed_float16"
    assert not any("mixed_bfloat16" in r.title for r in half.recommendations)


def test_a_model_that_fixes_its_batch_is_costed_at_the_requested_batch_with_a_warning():
    inputs = keras.Input(shape=(256,), batch_size=3)
    model = keras.Model(inputs, keras.layers.Dense(256, name="d")(inputs), name="fixedb")
    report = advisor.analyze(model, batch_size=64, profile=round_profile(), measure=False)
    (row,) = report.layers
    assert report.model.batch_size == 64
    assert row.flops == 2 * 64 * 256 * 256 + 64 * 256                       # not batch 3's 394,752
    assert report.totals()["flops_per_sample"] == pytest.approx(2 * 256 * 256 + 256)   # 131,328
    assert any("fix the batch size at 3" in w and "batch size 64" in w for w in report.warnings)


def test_a_model_analysed_at_its_own_fixed_batch_gets_no_batch_warning():
    inputs = keras.Input(shape=(8,), batch_size=4)
    model = keras.Model(inputs, keras.layers.Dense(8, name="d")(inputs))
    report = advisor.analyze(model, batch_size=4, profile=round_profile(), measure=False)
    assert not any("fix the batch size" in w for w in report.warnings)


def test_subclassed_model_per_sample_figures_count_a_layer_called_twice():
    class Twice(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(64, name="shared")
            self.drop = keras.layers.Dropout(0.1)
            self.o = keras.layers.Dense(64, name="o")

        def call(self, x):
            return self.o(self.drop(self.d(self.d(x))))

    model = Twice()
    model(keras.ops.zeros((2, 64)))
    report = advisor.analyze(model, batch_size=8, profile=round_profile(), measure=False)
    assert [r.name for r in report.layers][:2] == ["shared", "shared#1"]
    # three 64x64 Dense calls with bias per sample: 3 * (2*64*64 + 64) = 24,768 (16.5 k before)
    assert report.totals()["flops_per_sample"] == pytest.approx(3 * (2 * 64 * 64 + 64))


def test_input_shapes_let_analyze_trace_a_call_of_two_tensors_whole():
    class TwoTensors(keras.Model):
        def __init__(self):
            super().__init__()
            self.da, self.db = keras.layers.Dense(64, name="da"), keras.layers.Dense(64, name="db")

        def call(self, a, b):
            return keras.ops.relu(self.da(a) + self.db(b))

    model = TwoTensors()
    model(keras.ops.zeros((2, 32)), keras.ops.zeros((2, 16)))
    lower = advisor.analyze(model, batch_size=8, profile=round_profile(), measure=False, progress=False)
    assert any("pass input_shapes for (a, b)" in w for w in lower.warnings)

    report = advisor.analyze(model, batch_size=8, profile=round_profile(), measure=False, progress=False,
                             input_shapes=[(None, 32), (None, 16)])
    assert not [w for w in report.warnings if "lower bound" in w]
    # Per sample: da 2*32*64 + 64, db 2*16*64 + 64, the add and the relu 64 each.
    assert report.totals()["flops_per_sample"] == pytest.approx(2 * 32 * 64 + 64 + 2 * 16 * 64 + 64 + 64 + 64)
    with pytest.raises(MappingError, match="at most 2 input shape"):
        advisor.analyze(model, batch_size=8, measure=False, progress=False, input_shapes=[(None, 32)] * 3)


def test_an_untraceable_subclassed_model_says_in_the_reports_warnings_that_its_totals_are_a_lower_bound(recwarn):
    import keras

    import carm_advisor as advisor

    class Untraceable(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(4, name="d")

        def call(self, x):
            scale = float(keras.ops.convert_to_numpy(keras.ops.max(x)))  # needs values: no symbolic trace
            return self.d(x) * scale

    model = Untraceable()
    model(keras.ops.zeros((2, 6)))
    report = advisor.analyze(model, batch_size=3, measure=False, progress=False)
    said = [w for w in report.warnings if "could not be traced" in w]
    assert len(said) == 1 and said[0].startswith("the call() of subclassed model") and "lower bound" in said[0]
    assert not [w for w in recwarn.list if "could not be traced" in str(w.message)]   # the report says it, not stderr


def test_an_untraceable_model_is_said_once_per_analysis_whatever_its_what_if_passes_traced():
    class ListToDense(keras.Model):   # Dense given two tensors: Keras' message carries the KerasTensors' reprs
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(4, name="d")

        def call(self, x):
            return self.d([x, x]) if isinstance(x, keras.KerasTensor) else self.d(x)

    model = ListToDense()
    model(keras.ops.zeros((2, 6)))
    report = advisor.analyze(model, batch_size=2, measure=False, progress=False)
    said = [w for w in report.warnings if "could not be traced" in w]
    assert len(said) == 1, said                      # the batch and precision what-ifs map it again
    assert "keras_tensor" not in said[0] and "KerasTensor(shape=(2, 6), dtype=float32)" in said[0]


def test_every_analysis_of_an_untraceable_model_says_so_not_only_the_first():
    import keras

    import carm_advisor as advisor

    class Untraceable(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(4, name="d")

        def call(self, x):
            return self.d(x) * float(keras.ops.convert_to_numpy(keras.ops.max(x)))

    model = Untraceable()
    model(keras.ops.zeros((2, 6)))
    for _ in range(2):
        report = advisor.analyze(model, batch_size=3, measure=False, progress=False)
        assert sum("could not be traced" in w for w in report.warnings) == 1


def test_other_warnings_are_shown_once_per_process_as_before_not_once_per_analysis(monkeypatch):
    """analyze() diverts only the mapping's own line: a warning given from one place inside an analysis, which
    Python's default filter shows once per process, is not repeated by each analysis."""
    import warnings

    import keras

    import carm_advisor as advisor
    from carm_advisor.advise import analyze as analysis
    original = analysis.calibration_range_warnings

    def noisy(*args, **kwargs):
        warnings.warn("noisy step says this once", UserWarning)
        return original(*args, **kwargs)

    monkeypatch.setattr(analysis, "calibration_range_warnings", noisy)
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(4, name="d")(inputs))
    with warnings.catch_warnings(record=True) as shown:   # what would be shown (pytest's own capture aside)
        warnings.simplefilter("default")
        for batch in (1, 2, 3):
            advisor.analyze(model, batch_size=batch, measure=False, progress=False)
    assert [str(w.message) for w in shown].count("noisy step says this once") == 1


def _conv_stack(hw: int, channels: int):
    x = inputs = keras.Input((hw, hw, channels))
    for k in range(20):
        x = keras.layers.Conv2D(channels, 3, padding="same", name=f"c{k}")(x)
    return keras.Model(inputs, x)


@pytest.mark.parametrize("hw, channels", [(16, 16), (64, 64)])
def test_precision_advice_on_torch_agrees_with_the_report_at_that_precision(monkeypatch, hw, channels):
    """torch eager: a host that sets the pace of each call is not sped up by faster layers. The advice took the
    layers' sum (1.3x for a model whose rerun at mixed_bfloat16 predicts the same time); it now takes the whole
    model as the report predicts it, so the advice and a rerun at the advised precision say the same thing:
    20 small convs are host-paced (no faster, less energy), 20 larger ones are not."""
    import carm_advisor.advise.analyze as analysis

    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    now = analysis.analyze(_conv_stack(hw, channels), batch_size=64, measure=False)
    bf16 = analysis.analyze(_conv_stack(hw, channels), batch_size=64, measure=False, precision="mixed_bfloat16")
    rec = next(r for r in now.recommendations if "mixed_bfloat16" in r.title)
    t_now, t_bf16 = now.calibration["whole_time_s"], bf16.calibration["whole_time_s"]
    e_now, e_bf16 = t_now * now.calibration["whole_power_w"], t_bf16 * bf16.calibration["whole_power_w"]
    assert rec.speedup == pytest.approx(t_now / t_bf16) and rec.energy_ratio == pytest.approx(e_now / e_bf16)
    assert "whole model" in rec.expected_gain
    assert (rec.speedup > 1.2) == (hw == 64)


def test_a_padding_gain_below_half_a_percent_is_not_printed_as_at_most_zero_percent():
    inputs = keras.Input((64, 64, 64))
    x = keras.layers.Conv2D(64, 3, padding="same", name="big")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(5, name="odd")(keras.layers.Dense(3, name="three")(x)))
    # at bfloat16 the Dense layers run on Tensor Cores on every backend (torch's float32 matmul is not TF32)
    report = advisor.analyze(model, batch_size=32, measure=False, precision="mixed_bfloat16", calibration=False)
    rec = next(r for r in report.recommendations if r.title.startswith("Pad channel counts"))
    assert rec.expected_gain.startswith("under 0.5% of the model's time")
