"""Comparing regenerated JSON with a shipped file: the same structure, strings and integers, floats to 1e-9.

A least-squares fit (carm/power_fit.py) is not bit-reproducible across BLAS builds and thread counts: its
last digits move with the summation order. Everything else must match exactly."""

from __future__ import annotations

import json
import math


def differences(a, b, path: str = "$", rel: float = 1e-9) -> list[str]:
    """Where `a` and `b` (parsed JSON) differ beyond a relative `rel` on floats; [] when they match."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and not isinstance(b, bool) and math.isclose(a, b, rel_tol=rel, abs_tol=0.0):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} != {type(b).__name__}"]
    if isinstance(a, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}", rel)]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]", rel)]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def assert_same_json(got: bytes | str, shipped: bytes | str) -> None:
    diffs = differences(json.loads(got), json.loads(shipped))
    assert not diffs, "; ".join(diffs[:5])
