"""What a user reads: columns that carry the message at 80 columns, code never cut, units and plurals,
and the marker on recurrent layers' times."""

import io

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.report.render import print_report
from carm_advisor.units import named_list, plural, seconds, si


def small_cnn():
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(12, 3, name="rgb_conv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.ReLU(name="relu")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="predictions")(x), name="small_cnn")


def analyze(model, **kwargs):
    """analyze() of the model as TensorFlow runs it without XLA (compiled with jit_compile=False): the CARM figures
    these tests read stand alone there, with no calibration laid over them (under XLA, jax's records calibrate it)."""
    model.compile(jit_compile=False)
    return advisor.analyze(model, **kwargs)


@pytest.fixture(scope="module")
def report():
    return analyze(small_cnn(), measure=False)


def rendered(report, width):
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=width))
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_code_to_type_appears_whole_in_the_recommendations(report, width):
    text = rendered(report, width)
    assert "keras.mixed_precision.set_global_policy('mixed_bfloat16')" in text
    assert "model.compile(jit_compile=True)" in text
    assert "…" not in text


@pytest.mark.parametrize("width", [80, 120])
def test_the_layer_table_keeps_the_columns_that_carry_the_message(report, width):
    text = rendered(report, width)
    header = next(line for line in text.splitlines() if "layer" in line and "share" in line)
    for column in ("layer", "type", "bound", "attainable", "bound time", "calibrated", "share"):
        assert column in header, (column, header)
    assert all(len(line) <= width for line in text.splitlines())


def test_at_120_columns_the_lesser_columns_are_shown_too(report):
    header = next(line for line in rendered(report, 120).splitlines() if "layer" in line and "share" in line)
    assert "FLOPs" in header and "AI F/B" in header


@pytest.mark.parametrize("value, text", [(12.3e-6, "12.3 us"), (6.1e-6, "6.1 us"), (1.97e-9, "1.97 ns"),
                                         (70e-12, "70 ps"), (6.13e-3, "6.13 ms"), (2.5, "2.5 s")])
def test_times_take_the_unit_of_their_magnitude(value, text):
    assert seconds(value) == text


def test_small_quantities_take_milli_micro_prefixes():
    assert si(4.08e-5, "J") == "40.8 uJ"
    assert si(2.45e4) == "24.5 k"


def test_plurals():
    assert plural(1, "Tensor Core layer") == "1 Tensor Core layer"
    assert plural(3, "Tensor Core layer") == "3 Tensor Core layers"


def test_a_list_cut_short_says_by_how_much():
    assert named_list(["a", "b", "c"]) == "a, b, c"
    assert named_list(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert named_list(["a", "b", "c", "d", "e"], 4) == "a, b, c, d and 1 more"
    assert named_list(iter(["x", "y"]), 1, sep="; ") == "x and 1 more"
    assert named_list([]) == ""


def test_a_recurrent_models_predicted_time_is_marked_and_its_caution_is_in_the_warnings():
    inputs = keras.Input((20, 8))
    model = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.LSTM(32, name="lstm")(inputs)))
    report = analyze(model, batch_size=4, measure=False)
    assert [w for w in report.warnings if w.startswith("recurrent layers (lstm: 20 steps): each step waits")]
    text = " ".join(rendered(report, 240).split())
    assert "time " + seconds(report.totals()["time_s"]) + "\u2020 (CARM bound, per batch of 4)" in text
    assert text.count("each step waits for the one before") == 1     # the legend; not again as a warning

    # A small LSTM under two large Dense layers: top=1 shows a Dense row, and the header's mark is still explained.
    x = keras.layers.LSTM(4, name="lstm")(inputs)
    big = keras.Model(inputs, keras.layers.Dense(4096, name="wide2")(keras.layers.Dense(4096, name="wide")(x)))
    buf = io.StringIO()
    print_report(analyze(big, batch_size=4, measure=False), Console(file=buf, width=240), top=1)
    shown = buf.getvalue()
    assert "│lstm" not in shown and "\u2020 recurrent layers (lstm: 20 steps)" in shown


def test_unknown_layers_beyond_five_are_counted_not_hidden():
    # Seven layers without a cost model: the header names five and says how many more (it said ", ...").
    class Opaque(keras.layers.Layer):
        def call(self, x):
            return x * 2.0

    inputs = keras.Input(shape=(16,))
    x = keras.layers.Dense(16, name="fc")(inputs)
    for i in range(7):
        x = Opaque(name=f"opaque_{i}")(x)
    text = rendered(analyze(keras.Model(inputs, x), measure=False), 200)
    panel = " ".join(line.strip("│ ") for line in text[: text.index("╰")].splitlines())
    assert "opaque_4 (Opaque) and 2 more" in panel and "opaque_5" not in panel


def test_the_batch_advice_gives_per_sample_times_in_readable_units(report):
    rec = next(r for r in report.recommendations if r.title.startswith("Raise the batch size"))
    assert "0.000" not in rec.detail
    assert "per-sample time" in rec.detail and " ns -> " in rec.detail


def test_one_misaligned_layer_is_said_in_the_singular():
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(16, 3, name="rgb_conv")(inputs)              # 3 input channels: off the multiple
    model = keras.Model(inputs, keras.layers.Conv2D(16, 3, name="conv2")(x))
    rec = next(r for r in analyze(model, measure=False).recommendations if r.title.startswith("Pad channel"))
    assert rec.detail.startswith("1 Tensor Core layer (") and " has channel counts" in rec.detail


def test_no_channel_padding_advice_for_the_class_count_of_an_output_dense():
    inputs = keras.Input(shape=(16,))
    x = keras.layers.Dense(64, name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, name="classes")(x))   # 10 classes: the task fixes it
    recs = analyze(model, batch_size=64, measure=False).recommendations
    assert not any(r.title.startswith("Pad channel") for r in recs)


def test_channel_padding_gain_is_bounded_by_the_empty_part_of_the_tiles():
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(16, 3, name="rgb_conv")(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(16, 3, name="conv2")(x))
    report = analyze(model, measure=False)   # float32 -> TF32 tiles: multiples of 4
    rec = next(r for r in report.recommendations if r.title.startswith("Pad channel"))
    # 3 input channels fill 3 of 4 tile columns: padding wins back at most 1/4 of rgb_conv's time.
    bound = report.time_shares()["rgb_conv"] * (1 - 3 / 4)
    assert rec.expected_gain.startswith(f"at most {bound:.0%} of the model's time")


def test_unknown_layers_are_named_in_the_header_panel():
    class Mystery(keras.layers.Layer):
        def call(self, x):
            return x * 2.0

    inputs = keras.Input(shape=(16,))
    x = Mystery(name="mystery")(keras.layers.Dense(16, name="fc")(inputs))
    report = analyze(keras.Model(inputs, x), measure=False)
    text = rendered(report, 100)
    panel = " ".join(line.strip("│ ") for line in text[: text.index("╰")].splitlines())   # header panel, unwrapped
    assert "mystery (Mystery)" in panel and "left out of every total" in panel


def _with_calibration(report, measured: bool):
    import dataclasses

    from carm_advisor.results import MeasurementInfo

    calibration = {"execution": "eager", "whole_time_s": 12e-3, "graph_time_s": 8e-3,
                   "whole_source": "eager: max(GPU as cuda_graph (9 records), host 60 us per call)"}
    measurement = MeasurementInfo({"time_s": 10e-3, "execution": "eager"}, None,
                                  {"time_s": 10e-3, "execution": "cuda_graph"}, "d", "c") if measured else None
    return dataclasses.replace(report, calibration=calibration, measurement=measurement)


def test_the_header_names_the_bound_and_the_calibrated_prediction_apart_with_its_source(report):
    text = " ".join(rendered(_with_calibration(report, measured=False), 200).split())
    assert "CARM bound" in text and "calibrated prediction 12 ms (eager), one CUDA graph 8 ms" in text
    assert "calibrated whole model: eager: max(GPU as cuda_graph (9 records), host 60 us per call)" in text
    assert "measured" not in text.split("calibrated prediction")[1].split("\n")[0]


def test_a_backend_without_calibration_says_so_instead_of_a_dash(report):
    import dataclasses

    text = " ".join(rendered(dataclasses.replace(report, calibration={}), 200).split())
    assert "calibrated prediction none (no recorded runs of this backend on this GPU)" in text
    assert "calibrated whole model:" not in text


def test_on_a_gpu_the_measurement_of_the_same_execution_stands_beside_the_calibrated_prediction(report):
    r = _with_calibration(report, measured=True)
    t = r.totals()
    # hand: (12 - 10) / 10 = +20% (eager); (8 - 10) / 10 = -20% (CUDA graph)
    assert t["calibrated_rel_err"] == pytest.approx(0.2) and t["calibrated_graph_rel_err"] == pytest.approx(-0.2)
    assert t["measured_whole_time_s"] == 10e-3 and t["calibrated_source"].startswith("eager: max(")
    text = " ".join(rendered(r, 240).split())
    assert "measured 10 ms (eager, calibrated +20%), one CUDA graph 10 ms (measured, calibrated -20%)" in text
    d = r.to_dict()
    assert d["totals"]["calibrated_time_s"] == 12e-3 and d["totals"]["bound_time_s"] == r.predicted_time_s
    assert d["calibration"]["whole_source"] == t["calibrated_source"]


def test_without_a_measurement_the_headline_is_the_calibrated_prediction_where_there_is_one(report):
    import dataclasses

    # calibrated whole model 12 ms at 500 W -> 6 J; without one, the CARM bound stands, labelled as such
    r = dataclasses.replace(_with_calibration(report, measured=False),
                            calibration={"execution": "eager", "whole_time_s": 12e-3, "whole_power_w": 500.0})
    t = r.totals()
    assert t["time_source"] == "calibrated prediction" and t["time_s"] == 12e-3
    assert t["energy_j"] == pytest.approx(6.0) and t["gflops_per_watt"] == pytest.approx(t["flops"] / 6.0 / 1e9)
    assert "time 12 ms (calibrated prediction, per batch of 1) energy 6 J per batch" in " ".join(rendered(r, 240).split())
    bare = dataclasses.replace(report, calibration={}, measurement=None).totals()
    assert bare["time_source"] == "CARM bound" and bare["time_s"] == report.predicted_time_s


# ---- recurrent layers' times are marked -----------------------------------------------------------------

def test_recurrent_layer_times_carry_a_marker_and_a_legend_with_the_step_count():
    inputs = keras.Input(shape=(128, 32))           # 128 time steps
    x = keras.layers.LSTM(64, name="lstm")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, name="fc")(x))
    report = analyze(model, batch_size=8, measure=False)
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=200))
    lines = buf.getvalue().splitlines()
    lstm_row = next(line for line in lines if line.startswith("│lstm"))
    fc_row = next(line for line in lines if line.startswith("│fc"))
    assert "\u2020" in lstm_row and "\u2020" not in fc_row
    start = next(i for i, line in enumerate(lines) if line.startswith("\u2020"))
    legend = " ".join(" ".join(lines[start:start + 2]).split())   # it may wrap
    assert "lstm: 128 steps" in legend and "ignore that dependence" in legend


def two_in_two_out():
    """Two inputs, two task-fixed output heads: Dense(1) (a regression target) and Dense(3) (three classes)."""
    a, b = keras.Input((20,), name="a"), keras.Input((10,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(32, name="da")(a), keras.layers.Dense(32, name="db")(b)])
    o1 = keras.layers.Dense(1, name="o1")(h)
    o2 = keras.layers.Dense(3, activation="softmax", name="o2")(h)
    return keras.Model([a, b], [o1, o2], name="twoio")


def test_a_list_of_layers_cut_short_says_how_many_more():
    report = analyze(two_in_two_out(), batch_size=4, measure=False)
    rec = next(r for r in report.recommendations if r.title.startswith("Raise the batch size"))
    # da, db, o1 and o2 all re-read their weights at batch 4; three are named, the fourth counted
    assert "4 of them re-read their weights for every batch (da, db, o1 and 1 more)" in rec.detail


def test_no_channel_padding_advice_for_any_output_head_of_a_multi_output_model():
    report = analyze(two_in_two_out(), batch_size=4, precision="mixed_bfloat16", measure=False)
    rec = next(r for r in report.recommendations if r.title.startswith("Pad channel"))
    # BF16 tiles need multiples of 8: da's 20 and db's 10 input features are off it (their 32 outputs are on it);
    # o1's 1 and o2's 3 outputs are the task's, their 64 inputs on the multiple
    assert rec.layers == ["da", "db"]


def test_the_fuse_advice_names_the_layers_real_class_and_folds_only_batch_normalization():
    inputs = keras.Input(shape=(32, 32, 16))
    x = keras.layers.Conv2D(32, 3, padding="same", name="conv")(inputs)
    model = keras.Model(inputs, keras.layers.GroupNormalization(groups=4, name="gn")(x))
    rec = next(r for r in analyze(model, batch_size=64, measure=False).recommendations
               if "elementwise layer" in r.detail)
    assert "1 elementwise layer (1 GroupNormalization;" in rec.detail
    assert "BatchNormalization" not in rec.detail


def test_the_fuse_advice_still_folds_a_batch_normalization(report):
    if keras.backend.backend() == "jax":
        pytest.skip("jax: XLA fuses it already; no folding advice")
    rec = next(r for r in report.recommendations if "elementwise layer" in r.detail)
    assert "BatchNormalization" in rec.detail and "fold BatchNormalization into the preceding convolution" in rec.detail


def test_recurrent_layers_are_named_as_such_in_the_precision_advice():
    inputs = keras.Input((50, 32))
    x = keras.layers.LSTM(64, return_sequences=True, name="lstm")(inputs)
    x = keras.layers.GRU(48, name="gru")(x)
    model = keras.Model(inputs, keras.layers.Dense(5, name="out")(x))
    rec = next(r for r in analyze(model, batch_size=4, measure=False).recommendations
               if "mixed_bfloat16" in r.title)
    assert rec.detail.startswith("3 matrix-multiply layers (1 LSTM, 1 GRU, 1 Dense;")
    assert "conv/dense" not in rec.detail


def test_a_model_no_layer_of_which_could_be_costed_says_so():
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: t + 1.0, name="lam")(inputs), name="onlylambda")
    text = rendered(analyze(model, batch_size=4, measure=False), 120)
    assert "No recommendation: no layer could be costed; 1 layer has no cost model: lam (Lambda)." in text
    assert "close to its best roof" not in text


def test_a_model_of_views_alone_says_nothing_was_there_to_place():
    inputs = keras.Input((8, 2))
    model = keras.Model(inputs, keras.layers.Flatten()(keras.layers.Reshape((2, 8))(inputs)))
    text = rendered(analyze(model, batch_size=4, measure=False), 120)
    assert "no layer computes or moves data" in text and "close to its best roof" not in text
