"""The CARM chart: layer labels readable (no overlaps) and a legend that says what colours and dots mean."""

import itertools

import keras
import matplotlib
from matplotlib.text import Text

import carm_advisor as advisor
from carm_advisor.profiles.profile import SCHEMA, profile_from_dict
from carm_advisor.report.plot import draw_report

matplotlib.use("Agg")


def same_shaped_convs(n=6):
    """n identical convolutions: their dots coincide, the worst case for labels."""
    inputs = keras.Input(shape=(32, 32, 32))
    x = inputs
    for i in range(n):
        x = keras.layers.Conv2D(32, 3, padding="same", name=f"conv{i}")(x)
    return keras.Model(inputs, x)


def boxes(fig, gid):
    """The text boxes (display coordinates) of the labels with this gid, without their leader lines."""
    renderer = fig.canvas.get_renderer()
    return [Text.get_window_extent(t, renderer) for t in fig.axes[0].texts if t.get_gid() == gid]


def test_layer_labels_overlap_neither_each_other_nor_the_roof_labels():
    report = advisor.analyze(same_shaped_convs(), batch_size=8, measure=False)
    fig = draw_report(report, labelled=6)
    fig.canvas.draw()
    layers, roofs = boxes(fig, "layer-label"), boxes(fig, "roof-label")
    assert len(layers) == 6 and roofs
    for a, b in itertools.combinations(layers, 2):
        assert not a.overlaps(b), (a, b)
    for a in layers:
        for roof in roofs:
            assert not a.overlaps(roof), (a, roof)


def legend_texts(fig):
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_legend_says_what_green_and_orange_mean():
    inputs = keras.Input(shape=(32, 32, 32))
    x = keras.layers.Conv2D(64, 3, name="conv")(inputs)                  # compute-bound on the H200
    model = keras.Model(inputs, keras.layers.ReLU(name="relu")(x))        # memory-bound
    texts = legend_texts(draw_report(advisor.analyze(model, batch_size=64, measure=False)))
    assert any("compute-bound" in t for t in texts) and any("memory-bound" in t for t in texts)


def test_the_legend_does_not_put_power_capped_dots_on_their_roof():
    doc = {
        "schema": SCHEMA, "device": {"name": "Capped GPU", "l2_usable_bytes": 1000}, "provenance": {"source": "recorded"},
        "ceilings": {"tc_tf32": {"kind": "compute", "value": 1e13, "provenance": {"source": "datasheet"}},
                     "fp32": {"kind": "compute", "value": 1e12, "provenance": {"source": "datasheet"}},
                     "hbm": {"kind": "memory", "value": 1e11, "provenance": {"source": "datasheet"}}},
        # 100 W idle + 1 nJ/byte at 1e11 B/s = 200 W, above the 150 W limit: memory-bound layers slow down
        "power_model": {"constant_w": 100, "power_limit_w": 150, "joules_per_flop": {"tc_tf32": 1e-12, "fp32": 1e-11},
                        "joules_per_byte": {"hbm": 1e-9}},
    }
    inputs = keras.Input(shape=(1024,))
    report = advisor.analyze(keras.Model(inputs, keras.layers.Dense(1024, name="fc")(inputs)),
                             profile=profile_from_dict(doc), measure=False)
    assert "power limit" in report.layers[-1].notes   # the premise: the dot sits below its roof
    texts = legend_texts(draw_report(report))
    predicted = next(t for t in texts if t.startswith("predicted layer"))
    assert "below it where the power limit" in predicted
