"""Figures as text: SI prefixes and time units chosen by magnitude, and plurals. Pure functions."""

from __future__ import annotations

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u"),
             (1e-9, "n"), (1e-12, "p"))


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23e12 -> '1.23 T' + unit, 4.1e-5 -> '41 u' + unit; None -> '-'."""
    if value is None:
        return "-"
    if value == 0:
        return f"0 {unit}".rstrip()
    for factor, prefix in _PREFIXES:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}".rstrip()
    return f"{value:.{digits}g} {unit}".rstrip()


def count(value: float | None) -> str:
    """A count of things (samples/J, samples/s): 0.612, 45.3, 1.2 k, 90.5 M; no milli- or micro- prefix, which
    reads as a unit of its own ('612 m samples/J')."""
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1e3 else si(value)


def seconds(value: float | None) -> str:
    """A duration in s, ms, us or ns, whichever keeps 1 to 3 digits before the point."""
    if value is None:
        return "-"
    if value == 0:
        return "0 s"
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value / 1e-12:.3g} ps"


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """'1 layer', '2 layers'; plural_form for irregular nouns ('1 of them' style phrases stay with the caller)."""
    return f"{count} {singular if count == 1 else (plural_form or singular + 's')}"


def named_list(names, shown: int = 3, sep: str = ", ") -> str:
    """'a, b, c' for at most `shown` names, else 'a, b, c and 2 more': a list cut short says by how much."""
    names = list(names)
    more = len(names) - shown
    return sep.join(names[:shown]) + (f" and {more} more" if more > 0 else "")
