"""A layout copy pass at the calibration's own data-movement efficiency (Calibration.copies_time_s), and a sample's
copies taken off at that time before its efficiency is learned. Figures by hand."""

from types import SimpleNamespace

import pytest

from carm_advisor.calibration import Calibration, Sample, samples_from_rows
from carm_advisor.predict import layout_copies_time_s

# three torch data-movement layers of bound 1 us measured at 4 us: efficiency 0.25, floor 4 us;
# a channels_last convolution of bound 10 us measured at 22 us whose copies' bound (2 passes) is 2 us: its sample
# holds 22 - 2 = 20 us and the 2 us it had taken off.
DM = [Sample("torch", "data-movement", "bfloat16", 1e-6, 4e-6, "m", f"pad{i}") for i in range(3)]
CONV = [Sample("torch", "Conv2D", "bfloat16", 10e-6, 20e-6, "m", f"conv{i}", layout_copy_s=2e-6) for i in range(3)]


def _cal() -> Calibration:
    return Calibration(DM + CONV)


def test_without_a_sample_free_of_copies_the_copies_take_their_bound():
    # every sample carries copies: nothing to learn the data movement from, so a pass takes its bound and the
    # convolution's cell keeps the 20 us its copies' bound was taken off: 10 / 20
    alone = Calibration(CONV)
    assert alone.copies_time_s("torch", "Conv2D", "bfloat16", 2e-6) == pytest.approx(2e-6)
    assert alone.estimate("torch", "Conv2D", "bfloat16", 10e-6).efficiency == pytest.approx(0.5)


def test_data_movement_form_counts_each_pass_at_the_data_movement_cell():
    dm = _cal()
    # a convolution: 2 passes of 1 us each at efficiency 0.25 -> 2 x 4 us; a pooling layer: 1 pass of 1 us -> 4 us
    assert dm.copies_time_s("torch", "Conv2D", "bfloat16", 2e-6) == pytest.approx(8e-6)
    assert dm.copies_time_s("torch", "MaxPooling2D", "bfloat16", 1e-6) == pytest.approx(4e-6)
    assert dm.copies_time_s("torch", "Conv2D", "bfloat16", 0.0) == 0.0
    # the convolution's own cell: 22 us less 8 us of copies = 14 us -> efficiency 10 / 14
    assert dm.estimate("torch", "Conv2D", "bfloat16", 10e-6).efficiency == pytest.approx(10 / 14)
    # the data-movement cell is learned from the samples without copies only (unchanged)
    assert dm.estimate("torch", "Permute", "bfloat16", 1e-6).efficiency == pytest.approx(0.25)


def test_a_work_time_never_goes_below_the_bound():
    big = [Sample("torch", "Conv2D", "bfloat16", 10e-6, 11e-6, "m", f"c{i}", layout_copy_s=2e-6) for i in range(3)]
    dm = Calibration(DM + big)
    # 11 us less (8 - 2) us of extra copies = 5 us < the 10 us bound -> at its bound: efficiency 1
    assert dm.estimate("torch", "Conv2D", "bfloat16", 10e-6).efficiency == pytest.approx(1.0)


def test_the_predictor_takes_the_calibrations_copies_and_the_bound_without_that_seam():
    row = SimpleNamespace(type="Conv2D", dtype="bfloat16", layout_copy_s=2e-6)
    assert layout_copies_time_s(row, _cal(), "torch") == pytest.approx(8e-6)
    assert layout_copies_time_s(row, object(), "torch") == pytest.approx(2e-6)
    assert layout_copies_time_s(SimpleNamespace(type="Dense", dtype="bfloat16"), _cal(), "torch") == 0.0


def test_samples_keep_the_copies_bound_they_had_taken_off_and_files_round_trip():
    def row(name, time_s):
        return SimpleNamespace(known=True, measured=True, type="Conv2D", dtype="bfloat16", name=name,
                               predicted_time_s=10e-6, time_s=time_s, layout_copy_s=2e-6)

    full, clamped = samples_from_rows([row("a", 22e-6), row("b", 11e-6)], "torch", "m")
    assert (full.measured_time_s, full.layout_copy_s) == (pytest.approx(20e-6), pytest.approx(2e-6))
    # 11 us less 2 us would be under the 10 us bound: 10 us kept, 1 us taken off
    assert (clamped.measured_time_s, clamped.layout_copy_s) == (pytest.approx(10e-6), pytest.approx(1e-6))
    doc = Calibration(DM + CONV).to_dict()
    assert "layout_copy_s" not in doc["samples"][0] and doc["samples"][3]["layout_copy_s"] == 2e-6
    assert Calibration.from_dict(doc).samples == DM + CONV


def test_the_layout_advice_takes_the_copies_as_the_calibration_counts_them(monkeypatch):
    import keras
    from test_analysis import round_profile

    import carm_advisor.advise.analyze as analysis

    # convolutions at half their bound; pure data movement at a quarter (floor 0.4 ms)
    cal = Calibration(samples=[Sample("torch", "Conv2D", "float32", 1e-3, 2e-3)] * 3
                      + [Sample("torch", "data-movement", "float32", 1e-4, 4e-4)] * 3)
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    inputs = keras.Input(shape=(64, 64, 32))
    x = keras.layers.Conv2D(32, 3, padding="same", use_bias=False, name="conv")(inputs)
    report = analysis.analyze(keras.Model(inputs, x), batch_size=16, profile=round_profile(), measure=False,
                              calibration=cal)
    (conv,) = report.layers
    tensor = 16 * 64 * 64 * 32 * 4                      # its float32 input, bytes
    pass_bound_s = 2 * tensor / 1e11                   # one pass reads and writes it at the 1e11 B/s HBM slope
    assert conv.layout_copy_s == pytest.approx(2 * pass_bound_s)
    assert conv.layout_copy_calibrated_s == pytest.approx(2 * pass_bound_s / 0.25)    # 1.34 ms: above the floor
    assert conv.calibrated_time_s == pytest.approx(2 * conv.predicted_time_s + 2 * pass_bound_s / 0.25)
    rec = next(r for r in report.recommendations if "channels_first" in r.title)
    assert rec.speedup == pytest.approx(conv.calibrated_time_s / (2 * conv.predicted_time_s))
    assert rec.basis.startswith("calibrated prediction of the copies")
    assert conv.to_dict()["layout_copy_calibrated_s"] == pytest.approx(2 * pass_bound_s / 0.25)


def test_one_pass_count_serves_the_layer_type_and_the_samples_layer_class():
    from carm_advisor.calibration import copy_passes_of, layout_copy_passes

    # a convolution reads+writes its input twice (to channels_first and back), a pooling layer once; a sample of a
    # pooling layer carries the class "pooling", of a convolution its Keras type
    assert [copy_passes_of(t) for t in ("Conv2D", "DepthwiseConv2D", "MaxPooling2D", "pooling")] == [2, 2, 1, 1]
    assert [layout_copy_passes("torch", t, "channels_last") for t in ("Conv2D", "AveragePooling2D",
                                                                      "GlobalAveragePooling2D", "Dense")] == [2, 1, 0, 0]
    assert layout_copy_passes("jax", "Conv2D", "channels_last") == 0 == layout_copy_passes("torch", "Conv2D", "channels_first")
    # a pooling sample (class "pooling") and a pooling layer (its Keras type) count one pass of 1 us at the
    # data-movement cell (0.25 at 1 us): 4 us each; a convolution's 2 us are two such passes: 8 us
    dm = _cal()
    assert dm.copies_time_s("torch", "pooling", "bfloat16", 1e-6) == pytest.approx(4e-6)
    assert dm.copies_time_s("torch", "AveragePooling2D", "bfloat16", 1e-6) == pytest.approx(4e-6)
    assert dm.copies_time_s("torch", "Conv2D", "bfloat16", 2e-6) == pytest.approx(8e-6)
