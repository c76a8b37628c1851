"""Rich rendering of a TuneResult: one panel (baseline vs best, gain, slowdown, error), the next best,
the layers that moved roof, the CARM pruning, the predicted clock recommendation."""

from __future__ import annotations

import math
from collections.abc import Iterator

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from carm_advisor.report.render import POWER_LEGEND, POWER_MARK, bound_label
from carm_advisor.trials.space import TrialConfig
from carm_advisor.tune.breakdown import AT_ROOF
from carm_advisor.tune.objectives import OBJECTIVES
from carm_advisor.tune.records import TOP1_CAVEAT, throughput, value_of
from carm_advisor.units import count, plural, seconds


def _fmt(value, digits: int = 4) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}g}"


def _pct(value) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 100:.1f}%"


def _label(source: str, value_policy: str | None = None) -> str:
    if source == "predicted":
        if value_policy and value_policy.startswith("calibrated"):
            return ("PREDICTED (calibrated predictions on the recorded profile, CARM bound where no calibration "
                    "applies; nothing ran)")
        return "PREDICTED (CARM bound on the recorded profile; nothing ran)"
    return {"measured": "MEASURED", "fake": "FAKE (made-up figures for testing)"}.get(source, source.upper())


def _pace(result) -> str:
    """The best against the baseline in throughput (samples/s) and in time per batch, said apart: at a larger batch
    the best can serve more samples a second while each batch takes longer (latency)."""
    base, best = result.baseline, result.best
    if result.slowdown is None or not (base.measurement.get("time_s") and best.measurement.get("time_s")):
        return ""
    per_batch = best.measurement["time_s"] / base.measurement["time_s"]
    return (f"throughput {1 / result.slowdown:.2f}x the baseline's (samples/s), "
            f"time per batch {per_batch:.2f}x the baseline's (latency)")


BORROWED_MARK = "\u00a7"   # a calibrated value whose calibration comes from another backend's records


def _value_source(t, result) -> str:
    """A trial's value source; marked where its backend's calibration comes from another backend's records
    (result.calibration_notes, said under the table)."""
    source = t.value_source or result.source
    borrowed = t.config is not None and t.config.backend in result.calibration_notes and source == "calibrated"
    return source + (BORROWED_MARK if borrowed else "")


def render(result) -> Iterator:
    o = result.objectives[0]
    lines = Text()
    lines.append(f"{_label(result.source, result.value_policy)}", style="bold")
    lines.append(f"   study {result.study_name}   storage {result.storage_url}")
    if result.device.get("measured") is False and result.device.get("note"):
        lines.append(f"\ndevice {result.device['note']}")
    elif result.device.get("name"):
        lines.append(f"\ndevice {result.device['name']}")
    table = Table(box=None, show_header=True, pad_edge=False)
    table.add_column("")
    runs = [("baseline", result.baseline), ("best", result.best)]
    for tag, _ in runs:
        table.add_column(tag, justify="right")

    def row(label, fn, only_with_a_value=False):
        cells = [(fn(t) if t is not None and t.measurement else "-") for _, t in runs]
        if only_with_a_value and all(c == "-" for c in cells):
            return   # a figure only a measurement gives (spread, output error ...): no row of dashes
        table.add_row(label, *cells)

    def spread(t):
        m = t.measurement
        return _pct(m.get("energy_spread") if m.get("energy_spread") is not None else m.get("time_spread"))

    row("configuration", lambda t: t.config.label())
    row("value source", lambda t: _value_source(t, result))
    row(f"{o.name} ({o.unit})", lambda t: _fmt(value_of(o, t)))
    row("spread over windows", spread, only_with_a_value=result.source == "predicted")
    # samples/J and samples/s as analyze prints counts (units.count); the objective's own row is not repeated
    if o.name != "samples_per_joule":
        row("samples/J", lambda t: count(value_of(OBJECTIVES["samples_per_joule"], t)))
    if o.name != "throughput":
        row("samples/s", lambda t: count(throughput(t)))
    row("power (W)", lambda t: _fmt(t.measurement.get("power_w"), 3))
    row("output error vs float32", lambda t: _fmt(t.measurement.get("output_error"), 2),
        only_with_a_value=result.source == "predicted")   # a measured best whose error failed shows "-"
    def top1(t):
        return _pct(t.measurement.get("top1_agreement"))

    has_top1 = any(t is not None and t.measurement and top1(t) != "-" for _, t in runs)   # the * note below too
    row("top-1 agreement (random weights)" + ("*" if has_top1 else ""), top1,
        only_with_a_value=result.source == "predicted")
    row("compile s (apart)", lambda t: _fmt(t.measurement.get("compile_s"), 2),
        only_with_a_value=result.source == "predicted")
    summary = Text()
    caveat = result.sequential_caveat   # recurrent layers in a predicted study: said beside every gain
    gain = result.gain()
    if gain is not None:
        summary.append(f"gain {gain:.2f}x in {o.name}", style="bold green" if gain > 1 else "bold")
        spj = result.gain("samples_per_joule") if o.name != "samples_per_joule" else None   # not twice
        if spj is not None and not math.isnan(spj):
            summary.append(f"   {spj:.2f}x samples/J")
        pace = _pace(result)
        if pace:
            summary.append(f"   {pace}")
        if caveat:
            summary.append(f"; a prediction {caveat}", style="yellow")
    if result.gain_note:
        summary.append(result.gain_note, style="bold")
    for d in result.keras_defaults:
        g = d["gain"].get(o.name)
        if g is None or math.isnan(g):
            continue
        summary.append(("\n" if summary.plain else "")
                       + f"gain {g:.2f}x in {o.name} over the Keras defaults on {d['backend']}"
                       f"{BORROWED_MARK if d['backend'] in result.calibration_notes else ''} "
                       f"({TrialConfig.from_dict(d['config']).label()}), both calibrated predictions",
                       style="bold green" if g > 1 else "bold")
        if caveat:
            summary.append(f" {caveat}", style="yellow")
    if result.best_rule and result.best is not None:
        summary.append(("\n" if summary.plain else "")
                       + f"best: {result.best_rule} ({plural(len(result.pareto), 'configuration')} on the front)")
    c = result.counts
    evaluated = c.get(result.source, c["measured"])   # a predicted study counts them as "predicted"
    verb = {"measured": "measured", "predicted": "predicted (nothing measured)"}.get(
        result.source, f"evaluated ({result.source})")
    # Two counts of the CARM bound's pruning, each with what it counts: trials this search proposed and did not run,
    # and configurations of the whole space a blind search would have run although they cannot beat the best.
    summary.append(f"\n{evaluated} configurations {verb}, {plural(c['repeats_reused'], 'repeat')} reused, "
                   f"{c['pruned_by_carm']} of the {plural(c['trials'], 'trial')} the search proposed pruned by their "
                   f"CARM bound (not run), {c['pruned_out_of_memory']} out of memory, "
                   f"{c['failed']} failed, {c['infeasible']} infeasible")
    if c.get("uncalibrated_not_ranked"):
        summary.append(f" ({c['uncalibrated_not_ranked']} of them with only a CARM bound: not ranked against "
                       "calibrated predictions)")
    if result.source == "predicted" and result.value_policy:
        summary.append(f"\nvalues: {result.value_policy}")
    b = result.blind_search
    summary.append(f"\nof the {b['grid_size']} configurations of the whole space (clocks aside), the CARM bound rules out "
                   f"{b['ruled_out_by_carm_bound']} against the best found: a blind search would have run them")
    if has_top1:
        summary.append(f"\n* {TOP1_CAVEAT}", style="dim")
    for backend, note in result.calibration_notes.items():
        summary.append(f"\n{BORROWED_MARK} {backend}: {note}", style="yellow")
    for w in result.warnings:
        summary.append(f"\nwarning: {w}", style="yellow")
    if result.budget_stopped:
        summary.append("\nstopped before the time budget: rerun the same command to resume the study")
    yield Panel(Group(lines, table, summary), title="carm_advisor tune", subtitle=f"{result.wall_s:.0f} s")
    code = result.keras_code()
    if code:   # outside the panel's border, so that the lines copy as they are
        yield Text(f"The best configuration in Keras ({result.best.config.label()}; x: your inputs):", style="bold")
        yield Text(code)
    if result.next_best:
        nb = Table(title=f"next best ({result.source})", box=None)
        nb.add_column("configuration")
        nb.add_column(o.name, justify="right")
        nb.add_column("value source")
        nb.add_column("output error", justify="right")
        for t in result.next_best:
            nb.add_row(t.config.label(), _fmt(t.values[0]), _value_source(t, result),
                       _fmt((t.measurement or {}).get("output_error"), 2))
        yield nb
    if len(result.objectives) > 1 and result.pareto:
        pf = Table(title=f"Pareto front ({result.source})", box=None)
        pf.add_column("configuration")
        for obj in result.objectives:
            pf.add_column(f"{obj.name} ({obj.unit})", justify="right")
        for t in result.pareto:
            pf.add_row(t.config.label(), *[_fmt(v) for v in t.values])
        yield pf
    if result.layer_changes:
        capped = any(ch.get("power_limited_before") or ch.get("power_limited_after") for ch in result.layer_changes)
        lc = Table(title="layers baseline -> best (CARM bound, per sample)", box=None, caption_justify="left",
                   caption=Text(POWER_LEGEND + "; the speed-up is of the bound times", style="yellow") if capped else None)
        for col in ("layer", "roof before", "roof after", "bound speed-up"):
            lc.add_column(col, justify="right" if col == "bound speed-up" else "left")
        for ch in result.layer_changes:
            lc.add_row(ch["layer"], bound_label(str(ch["bound_before"])) + (POWER_MARK if ch.get("power_limited_before") else ""),
                       bound_label(str(ch["bound_after"])) + (POWER_MARK if ch.get("power_limited_after") else ""),
                       f"{ch['speedup']:.2f}x")
        yield lc
    yield from _breakdown(result)
    clock = result.clock_recommendation
    if clock:
        top = clock["clocks"][0]["sm_clock_mhz"] if clock.get("clocks") else None
        # "the top clock (1980 MHz)", as analyze names the clock its energy-optimal clock is compared with
        if clock["recommended_sm_clock_mhz"] == top:
            yield Text(f"SM clock, PREDICTED (not measured): keep the top clock ({top:g} MHz): no lower clock gives "
                       f"a better {clock['objective']}; source: {clock['source']}")
        else:
            yield Text(f"SM clock, PREDICTED (not measured): lock at {clock['recommended_sm_clock_mhz']:g} MHz for "
                       f"{clock['predicted_gain']:.2f}x {clock['objective']} over the top clock ({top:g} MHz); "
                       f"source: {clock['source']}")


def _breakdown(result) -> Iterator:
    """The reference line (how far the best is from it) and where the best's time per batch goes, class by class."""
    ref, b = result.reference, result.best_breakdown
    if ref is not None:
        if ref["ratio"] is None:
            yield Text(f"reference {ref['name']}: {_fmt(ref['value'])} {ref['unit']}; no best to hold against it")
        else:
            verdict = "short of it" if ref["short"] else "at or above it"
            yield Text(f"best {result.source}: {ref['ratio']:.3g}x the reference {ref['name']} "
                       f"({_fmt(ref['value'])} {ref['unit']}), {verdict}",
                       style="bold yellow" if ref["short"] else "bold")
    if b is None or (ref is None and not any(c["hint"] for c in b["classes"]) and not b["hint_outside"]):
        return   # without a reference, the table only where something stands far from its roofs
    table = Table(title=f"where the best's time per batch goes ({b['whole_source']} {seconds(b['whole_s'])}; "
                        "each class's time: calibrated prediction or CARM bound)", box=None, title_justify="left")
    for col in ("class", "layers", "time", "share", "x its bound", "what would close it"):
        table.add_column(col, justify="right" if col in ("layers", "time", "share", "x its bound") else "left")
    for c in b["classes"]:
        below = "-" if math.isnan(c["below_roof"]) else f"{c['below_roof']:.1f}x"
        table.add_row(c["class"], str(c["layers"]), seconds(c["time_s"]), f"{c['share']:.0%}", below,
                      c["hint"] or ("at its roofs" if c["below_roof"] <= AT_ROOF else ""))
    if b["outside_layers_s"] > 0:
        table.add_row("outside the layers", "", seconds(b["outside_layers_s"]), f"{b['outside_share']:.0%}", "",
                      b["hint_outside"] or "")
    yield table
