"""Tests of carm_advisor/report/console.py: output that is not a terminal is rendered wide (200 columns)
so that no column or layer name is cut, COLUMNS set by the user still wins, and a terminal keeps its own
width."""

import io

import keras
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.report.console import make_console
from carm_advisor.report.render import print_report

# ---- output that is not a terminal -------------------------------------------------------------------

class _Pipe(io.StringIO):
    def isatty(self):
        return False


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_pipe_without_columns_is_rendered_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console(file=_Pipe()).width == 200


def test_columns_set_by_the_user_wins_over_the_pipe_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert make_console(file=_Pipe()).width == 90


def test_a_terminal_keeps_its_own_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert make_console(file=_Tty()).width == Console(file=_Tty()).width


def test_a_layer_table_wider_than_the_pipe_width_is_printed_whole(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    name = "a_layer_name_of_one_hundred_and_twenty_characters_" + "x" * 70   # 120 characters
    inputs = keras.Input(shape=(64,))
    model = keras.Model(inputs, keras.layers.Dense(64, name=name)(inputs))
    report = advisor.analyze(model, measure=False)
    out = _Pipe()
    print_report(report, make_console(file=out))
    text = out.getvalue()
    assert name in text   # on one line, not folded
    header = next(line for line in text.splitlines() if "layer" in line and "share" in line)
    for column in ("FLOPs", "AI F/B", "cal. power", "roof power"):
        assert column in header
