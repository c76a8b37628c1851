"""The layer table on a narrow terminal: the columns left out are named with how to see them, and a layer name
is never broken across lines."""

from __future__ import annotations

import io

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.report.render import print_report

NAMES = ("conv5_block3_3_conv", "conv5_block3_3_bn", "conv5_block3_out", "avg_pool", "predictions")
TYPES = ("Conv2D", "BatchNormalization", "Activation", "GlobalAveragePooling2D", "Dense")


def long_names():
    """ResNet50's longest layer names and its widest layer class (GlobalAveragePooling2D, 22 characters)."""
    inputs = keras.Input(shape=(32, 32, 3))
    x = keras.layers.Conv2D(16, 3, name=NAMES[0])(inputs)
    x = keras.layers.BatchNormalization(name=NAMES[1])(x)
    x = keras.layers.Activation("relu", name=NAMES[2])(x)
    x = keras.layers.GlobalAveragePooling2D(name=NAMES[3])(x)
    return keras.Model(inputs, keras.layers.Dense(10, name=NAMES[4])(x), name="long_names")


@pytest.fixture(scope="module")
def report():
    return advisor.analyze(long_names(), batch_size=64, measure=False)


def rendered(report, width):
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=width))
    return buf.getvalue()


def table_header(text):
    return next(line for line in text.splitlines() if "layer" in line and "share" in line)


@pytest.mark.parametrize("width", [80, 100])
def test_no_layer_name_or_class_is_broken_across_lines(report, width):
    lines = rendered(report, width).splitlines()
    assert all(len(line) <= width for line in lines)
    for name in (*NAMES, *TYPES):
        assert any(name in line for line in lines), name


@pytest.mark.parametrize("width", [80, 100])
def test_the_columns_left_out_are_named_with_how_to_see_them(report, width):
    text = rendered(report, width)
    header = table_header(text)
    left_out = [c for c in ("FLOPs", "AI F/B", "cal. power", "roof power") if c not in header]
    assert left_out, header   # at this width some are left out: the case under test
    said = " ".join(text.split())
    note = said.split("columns left out at this width: ")[1].split(";")[0]
    assert all(c in note for c in left_out), (left_out, note)
    assert "COLUMNS=" in said and "--json" in said


def test_at_full_width_nothing_is_left_out_and_nothing_is_said(report):
    text = rendered(report, 250)
    header = table_header(text)
    assert all(c in header for c in ("FLOPs", "AI F/B", "cal. power", "roof power"))
    assert "left out at this width" not in text
