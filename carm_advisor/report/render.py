"""Rich rendering of a Report: a header, the per-layer CARM table, totals and recommendations."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1.23e12 -> '1.23 T' + unit; None -> '-'."""
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}".rstrip()


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _bound_text(bound: str, labels: dict) -> Text:
    kind, _, key = bound.partition(":")
    label = labels.get(key, {}).get("label", key)
    style = {"compute": "green", "memory": "yellow"}.get(kind, "red" if bound == "above-roof" else "dim")
    return Text(label if key else bound, style=style)


def header(report) -> Panel:
    m, d = report.model, report.device
    if d.source == "measured":
        source = Text(f"MEASURED on {d.name} ({m.backend} backend); roofs from the "
                      f"{d.profile_source} profile of {d.profile}", style="bold green")
    else:
        source = Text(f"PREDICTED: no measurement here; every time and energy figure is a CARM prediction from the "
                      f"{d.profile_source} profile of {d.profile}", style="bold yellow")
    t = report.totals()
    lines = Text.assemble(
        (f"{m.name}", "bold"), f"  batch {m.batch_size}  precision {m.precision}  layout {m.layout}  "
        f"backend {m.backend}  float32 math: conv {m.math_mode.get('conv')}, matmul {m.math_mode.get('matmul')}\n",
        source, "\n",
        f"{si(t['flops_per_sample'], 'FLOP')} per sample (1 multiply-add = 2 FLOPs)   "
        f"time {seconds(t['time_s'])} ({t['time_source']})   energy {si(t['energy_j'], 'J')}   "
        f"{_fmt(t['samples_per_j'], '.3g')} samples/J   {_fmt(t['gflops_per_watt'], '.4g')} GFLOP/s per W\n",
        f"predicted: CARM bound {seconds(t['bound_time_s'])}   calibrated ({report.calibration.get('execution', '-')}) "
        f"{seconds(t['calibrated_time_s'])}" + (f", from one CUDA graph {seconds(report.calibration['graph_time_s'])}"
                                               if report.calibration.get("graph_time_s") else ""),
    )
    return Panel(lines, title="carm_advisor", expand=True)


def layer_table(report, top: int | None = None, width: int = 200) -> Table:
    """One row per layer; on narrow terminals the less essential columns are left out, not wrapped."""
    shares, energy_shares = report.time_shares(), report.energy_shares()
    measured = any(r.measured for r in report.layers)
    narrow = width < (150 if measured else 110)
    table = Table(title="Layers on the CARM", header_style="bold", expand=False, pad_edge=False)
    columns = [("layer", "left"), ("type", "left"), ("FLOPs", "right"), ("AI F/B", "right"), ("bound", "left"),
               ("attainable", "right")]
    if measured:
        columns += [("measured", "right"), ("eff.", "right"), ("energy", "right"), ("E share", "right")]
    columns += [("bound time", "right"), ("calibrated", "right"), ("share", "right")]
    dropped = {"type", "attainable", "energy", "bound time"} if narrow else set()
    if width < 100:
        dropped |= {"E share"}
    keep = [i for i, (name, _) in enumerate(columns) if name not in dropped]
    name_width = min(28, max([len(r.name) for r in report.layers] + [5]))
    for i in keep:
        name, just = columns[i]
        table.add_column(name, justify=just, no_wrap=True, overflow="ellipsis", min_width=name_width if i == 0 else None)
    rows = report.layers
    if top is not None:
        rows = sorted(rows, key=lambda r: -shares.get(r.name, 0))[:top]
    for r in rows:
        if not r.known:
            cells = [r.name, r.type, Text("unknown", style="red"), "-", Text("no cost model", style="red")]
            cells += ["-"] * (len(columns) - len(cells))
        elif not r.flops and not r.bytes:
            continue
        else:
            ai = "-" if r.ai is None else f"{r.ai:.3g}" + ("*" if r.ai_source == "counters" else "")
            cells = [r.name, r.type, si(r.flops), ai, _bound_text(r.bound, report.ceilings),
                     si(r.attainable_flops_per_s, "FLOP/s")]
            if measured:
                eff = r.efficiency
                cells += [si(r.achieved_flops_per_s, "FLOP/s") if r.measured else "-",
                          "-" if eff is None else f"{eff:.0%}", si(r.energy_j, "J") if r.measured else "-",
                          f"{energy_shares.get(r.name, 0):.1%}" if r.measured else "-"]
            cells += [seconds(r.predicted_time_s), seconds(r.calibrated_time_s), f"{shares.get(r.name, 0):.1%}"]
        table.add_row(*[cells[i] for i in keep])
    return table


def recommendations_table(report) -> Table:
    table = Table(title="Recommendations (most gain first)", header_style="bold", show_lines=True, expand=False)
    table.add_column("#", justify="right")
    table.add_column("what to change")
    table.add_column("why", ratio=3)
    table.add_column("expected gain")
    for i, rec in enumerate(report.recommendations, 1):
        from carm_advisor.verify_recommendations import verified_text

        checked = verified_text(rec.verified)
        gain = Text(rec.expected_gain)
        if checked:
            gain.append("\n" + checked, style="bold red" if rec.verified.get("flagged") else "bold green")
        table.add_row(str(i), Text(rec.title, style="bold"), rec.detail, gain)
    return table


def ceilings_table(profile) -> Table:
    """The roofs of a profile with the clock and power each was sustained at."""
    table = Table(title=f"CARM ceilings of {profile.name} ({profile.source} profile)", header_style="bold")
    for col, just in (("roof", "left"), ("key", "left"), ("value", "right"), ("SM clock", "right"),
                      ("power", "right"), ("repeats", "right"), ("spread", "right"), ("source", "left")):
        table.add_column(col, justify=just)
    for key, c in sorted(profile.ceilings.items(), key=lambda kv: (kv[1].kind, -kv[1].value)):
        table.add_row(
            c.label, key, si(c.value, c.unit), "-" if c.sm_clock_mhz is None else f"{c.sm_clock_mhz:.0f} MHz",
            "-" if c.power_w is None else f"{c.power_w:.0f} W", "-" if c.repeats is None else str(c.repeats),
            "-" if c.spread is None else f"{c.spread:.1%}", str(c.provenance.get("source")),
        )
    return table


def renderables(report, top: int | None = None, width: int = 200):
    yield header(report)
    yield layer_table(report, top, width)
    if report.recommendations:
        yield recommendations_table(report)
    else:
        yield Text("No recommendation: every layer sits close to its best roof at this configuration.")
    for w in report.warnings:
        yield Text(f"warning: {w}", style="bold red")


def print_report(report, console: Console | None = None, top: int | None = None) -> None:
    console = console or Console()
    console.print(Group(*renderables(report, top, console.width)))
