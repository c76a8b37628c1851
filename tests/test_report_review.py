"""Review defects of the report layer: output file modes, errors that name the user's path, the width
of output that is not a terminal, and the marker on recurrent layers' times."""

from __future__ import annotations

import io
import os
import stat

import keras
import pytest
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.errors import CarmError
from carm_advisor.report.console import make_console
from carm_advisor.report.files import Outputs, check_output_path, write_text_atomic
from carm_advisor.report.render import print_report


@pytest.fixture
def umask():
    """Set a umask for one test and restore the previous one."""
    saved = os.umask(0o022)
    os.umask(saved)

    def set_(mask: int) -> None:
        os.umask(mask)

    yield set_
    os.umask(saved)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ---- 1. the mode a plain open() gives ----------------------------------------------------------------

@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    write_text_atomic(tmp_path / "r.json", "{}")
    with Outputs() as outs:
        outs.stage(tmp_path / "c.png", lambda tmp: tmp.write_bytes(b"png"))
        outs.commit()
    assert mode(tmp_path / "r.json") == expected
    assert mode(tmp_path / "c.png") == expected


def test_an_existing_file_keeps_its_own_mode_as_with_open(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, 0o640)   # open(target, "w") would truncate it and leave 0640 (not the umask's 0644)
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and mode(target) == 0o640


# ---- 2. errors name the user's path ------------------------------------------------------------------

def test_a_folder_where_no_file_can_be_created_is_refused_up_front():
    # /proc takes no new files, even for root (for whom os.access says yes)
    with pytest.raises(CarmError, match=r"^cannot write --plot-energy /proc/e\.png: ") as exc:
        check_output_path("/proc/e.png", "--plot-energy")
    assert ".tmp" not in str(exc.value)


def test_an_unwritable_folder_is_refused_through_os_access(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(CarmError, match=r"^cannot write --json .*r\.json: permission denied"):
        check_output_path(tmp_path / "r.json", "--json")


def test_a_failure_while_writing_names_the_users_path_not_the_temporary_file(tmp_path):
    target = tmp_path / "r.json"

    def disk_full(tmp):
        raise OSError(28, "No space left on device", str(tmp))

    with pytest.raises(CarmError) as exc:
        with Outputs() as outs:
            outs.plan(target, "JSON report", "--json")
            outs.stage(target, disk_full)
    assert str(exc.value) == f"cannot write --json {target}: No space left on device"
    assert list(tmp_path.iterdir()) == []


# ---- 3. output that is not a terminal ----------------------------------------------------------------

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


# ---- 6. recurrent layers' times are marked --------------------------------------------------------------

def test_recurrent_layer_times_carry_a_marker_and_a_legend_with_the_step_count():
    inputs = keras.Input(shape=(128, 32))           # 128 time steps
    x = keras.layers.LSTM(64, name="lstm")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, name="fc")(x))
    report = advisor.analyze(model, batch_size=8, measure=False)
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=200))
    lines = buf.getvalue().splitlines()
    lstm_row = next(line for line in lines if line.startswith("│lstm"))
    fc_row = next(line for line in lines if line.startswith("│fc"))
    assert "\u2020" in lstm_row and "\u2020" not in fc_row
    legend = next(line for line in lines if line.startswith("\u2020"))
    assert "lstm: 128 steps" in legend and "ignore" in legend
