"""The one place the CLI's rich Console is made.

A terminal keeps its own width, and COLUMNS set by the user wins (rich reads it). Output that is not a
terminal (a pipe, a file, a CI log), where rich would fall back to 80 columns, drop the lesser table
columns, cut labels and split layer names, is rendered at PIPE_WIDTH columns, and a layer table wider
than that widens it (print_report): the full tables come out whole.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 200   # the ceilings table and most predicted layer tables of keras.applications fit


def _columns_set() -> bool:
    return (os.environ.get("COLUMNS") or "").strip().isdigit()


def make_console(**kwargs) -> Console:
    """A rich Console for the CLI's output (kwargs as for rich.console.Console)."""
    console = Console(**kwargs)
    if kwargs.get("width") is None and not console.is_terminal and not console.is_jupyter and not _columns_set():
        console.width = PIPE_WIDTH
        console.carm_full_width = True
    return console


def wants_full_width(console: Console) -> bool:
    """True for a console make_console widened for output that is not a terminal."""
    return bool(getattr(console, "carm_full_width", False))
