"""The check that a shipped profile's power model is the sweep fit a validation scored, figure for figure."""

from __future__ import annotations

import pytest


def assert_ships_the_fit(power_model, fit: dict, rows: int) -> None:
    """`power_model` (a profile's) has `fit`'s rows (`rows` of them, counted by hand from the ceilings and sweep the
    fit took), constant power and energy per FLOP of each path and per byte of each level (a validation file's
    "fit": its own record, not the code under test)."""
    assert power_model.fit["n"] == fit["fit"]["n"] == rows
    assert power_model.constant_w == pytest.approx(fit["constant_w"], rel=1e-9)
    for path, e in fit["joules_per_flop"].items():
        assert power_model.joules_per_flop[path] == pytest.approx(e, rel=1e-9)
    for level, e in fit["joules_per_byte"].items():
        assert power_model.joules_per_byte[level] == pytest.approx(e, rel=1e-9)
