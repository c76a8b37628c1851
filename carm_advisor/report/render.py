"""Rich rendering of a Report: a header, the per-layer CARM table, totals and recommendations."""

from __future__ import annotations

import re

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from carm_advisor.calibration.store import launch_floor_of
from carm_advisor.carm.placement import is_convolution, missing_roof
from carm_advisor.carm.roofline import COMPUTE_PATHS, MEMORY_LEVELS
from carm_advisor.report.console import make_console, wants_full_width
from carm_advisor.results import measured_gain
from carm_advisor.units import count, named_list, plural, seconds, si

__all__ = ["bound_label", "ceilings_table", "header", "layer_table", "plural", "print_report",
           "recommendations_table", "renderables", "seconds", "si"]


def _watts(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} W"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def bound_label(bound: str) -> str:
    """What a person reads for a bound key: "compute:tc_tf32" -> "TF32 Tensor Core", "memory:hbm" -> "HBM" (the
    roofs' labels, carm.roofline); "above-roof", "none" and "unknown" as they are. The JSON keeps the keys."""
    kind, _, key = bound.partition(":")
    names = {"compute": COMPUTE_PATHS, "memory": MEMORY_LEVELS}.get(kind)
    return names.get(key, key) if names is not None and key else bound


def _bound_text(bound: str) -> Text:
    kind = bound.partition(":")[0]
    style = {"compute": "green", "memory": "yellow"}.get(kind, "red" if bound == "above-roof" else "dim")
    return Text(bound_label(bound), style=style)


def header(report) -> Panel:
    m, d = report.model, report.device
    if d.source == "measured":
        source = Text(f"MEASURED on {d.name} ({m.backend} backend); roofs from the "
                      f"{d.profile_source} profile of {d.profile}", style="bold green")
    else:
        source = Text(f"PREDICTED: no measurement here; every time and energy figure is a CARM prediction from the "
                      f"{d.profile_source} profile of {d.profile}", style="bold yellow")
    t = report.totals()
    # what makes every figure below doubtful, said before them: a batch that cannot fit, a roof the profile lacks
    misplaced = "\n".join([*header_warnings(report), *filter(None, [missing_roofs_text(report.layers)])])
    cautions = "\n".join(launch_cautions(report))   # a tiny model's bounds: before its nanosecond figures
    lines = Text.assemble(
        (f"{m.name}", "bold"), f"  batch {m.batch_size}  precision {m.precision}  layout {m.layout}  "
        f"backend {m.backend}{float32_math(report)}\n",
        source, "\n",
        *((misplaced, "bold red"), "\n") if misplaced else (),
        *((cautions, "bold yellow"), "\n") if cautions else (),
        f"{si(t['flops_per_sample'], 'FLOP')} per sample (1 multiply-add = 2 FLOPs)   "
        f"time {seconds(t['time_s'])}{_sequential_mark(report, t)} ({t['time_source']}, per batch of {m.batch_size})   "
        + (f"energy {si(t['energy_j'], 'J')} per batch   {count(t['samples_per_j'])} samples/J   "
           f"{_fmt(t['gflops_per_watt'], '.4g')} GFLOP/s per W\n" if t['energy_j'] is not None else
           f"energy none ({_no_energy(report)})\n"),
        _predictions_line(t, report.calibration),
    )
    if t.get("calibrated_source") and t.get("calibrated_time_s"):
        lines.append_text(Text(f"\ncalibrated whole model: {t['calibrated_source']}", style="dim"))
    unknown = report.unknown_layers
    if unknown:   # said where the totals are, not only at the bottom: the totals leave these out
        names = named_list([f"{r.name} ({r.type})" for r in unknown], 5)
        lines.append_text(Text(f"\n{plural(len(unknown), 'layer')} without a cost model, left out of every total "
                               f"above (FLOPs, time, energy): {names}", style="bold red"))
    return Panel(lines, title="carm_advisor", expand=True)


def header_warnings(report) -> list[str]:
    """The report's warnings said in the header, before the figures they make doubtful: a batch that cannot fit."""
    return [w for w in report.warnings if f" {UNFIT} " in w]


def launch_cautions(report) -> list[str]:
    """The report's warnings said in the header as cautions: a whole model whose CARM bound lies below launching
    its kernels (launch_floor_warnings)."""
    return [w for w in report.warnings if w.startswith(LAUNCH_BOUND_MODEL)]


def _no_energy(report) -> str:
    """Why the header has no energy figure."""
    profile = getattr(report, "profile", None)
    if profile is not None and profile.power_model is None:
        return "the profile has no power model"
    return "no layer has a predicted energy"


def float32_math(report) -> str:
    """'  float32 math: conv tf32, matmul tf32': what float32 convolutions and matmuls run as, for the kinds of layer
    that compute at float32 here (none: nothing; a mixed model's float32 output layer: that layer, named), each
    with the roof it was placed on where the profile lacks the one it runs on."""
    rows = [r for r in report.layers if r.known and r.tensor_core and r.dtype == "float32" and r.flops]
    parts, notes = [], []
    for kind, mine in (("conv", [r for r in rows if is_convolution(r.type)]),
                       ("matmul", [r for r in rows if not is_convolution(r.type)])):
        if not mine:
            continue
        parts.append(f"{kind} {report.model.math_mode.get(kind)}")
        notes.append("; ".join(sorted({f"placed on {m[0]}: the profile has no {m[1]} roof"
                                       for r in mine if (m := missing_roof(r.notes))})))
    if not parts:
        return ""
    if len(set(notes)) == 1:   # one note for every kind (or none): said once, after them
        text = ", ".join(parts) + (f" ({notes[0]})" if notes[0] else "")
    else:
        text = ", ".join(part + (f" ({note})" if note else "") for part, note in zip(parts, notes))
    matmuls = sum(1 for r in report.layers if r.known and r.tensor_core and r.flops)
    which = "" if len(rows) == matmuls else \
        f" of its {plural(len(rows), 'float32 layer')} ({named_list([r.name for r in rows], 3)})"
    return f"  float32 math{which}: {text}"


def missing_roofs_text(rows) -> str:
    """One line per roof the profile lacks that layers run on: how many were placed on which roof instead."""
    placed: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        m = missing_roof(r.notes) if r.known else None
        if m:
            placed.setdefault(m, []).append(r.name)
    return "\n".join(
        f"the profile has no {wanted} roof: {plural(len(names), 'layer')} that run on it "
        f"({named_list(names, 3)}) {'is' if len(names) == 1 else 'are'} placed on {on}, so their times and the "
        f"totals are those of {on}; `carm-advise ceilings` measures this GPU's roofs"
        for (on, wanted), names in placed.items())


def _sequential_mark(report, totals: dict) -> str:
    """The recurrent mark on a predicted whole-model time (a measured one includes the steps' dependence)."""
    predicted = "measured" not in str(totals.get("time_source", ""))
    return SEQUENTIAL_MARK if predicted and recurrent_layers(report.layers) else ""


def _vs(rel_err: float | None) -> str:
    return "" if rel_err is None else f", calibrated {rel_err:+.0%}"


def _predictions_line(t: dict, calibration: dict | None = None) -> Text:
    """The two predictions named apart, and on a GPU the measurement of the same execution beside them. Where
    another backend's records stand in for this one's (calibration "borrowed"), the calibrated figure says so;
    where there is none, why and what would give one (calibration "none_reason")."""
    execution = t.get("calibrated_execution")
    c = calibration or {}
    about = "; ".join(filter(None, [execution, c.get("borrowed")]))
    parts = [("CARM bound ", "bold"), f"{seconds(t['bound_time_s'])} (what the roofs allow)   ",
             ("calibrated prediction ", "bold"),
             f"{seconds(t['calibrated_time_s'])}" + (f" ({about})" if about else "")
             if t.get("calibrated_time_s") else
             (f"none {c['none_reason']}" if c.get("none_reason") else "none (no recorded runs of this backend on this GPU)")]
    if t.get("calibrated_graph_time_s"):
        parts.append(f", one CUDA graph {seconds(t['calibrated_graph_time_s'])}")
    if t.get("measured_whole_time_s"):
        parts += ["   ", ("measured ", "bold"), f"{seconds(t['measured_whole_time_s'])} ({execution}"
                  + _vs(t.get("calibrated_rel_err")) + ")"]
    if t.get("measured_graph_time_s"):
        parts.append(f", one CUDA graph {seconds(t['measured_graph_time_s'])} (measured"
                     + _vs(t.get("calibrated_graph_rel_err")) + ")")
    return Text.assemble(*parts)


# Columns left out first when the table is wider than the terminal; layer, type, bound, attainable,
# the time and the share carry the message and stay (they wrap instead).
_DROP_FIRST = ("roof power", "cal. power", "power", "AI F/B", "FLOPs", "E share", "energy", "eff.", "bound time")


SEQUENTIAL_MARK = "\u2020"   # dagger: a time that is a bound ignoring the dependence between sequential steps
_SEQUENTIAL_STEPS = re.compile(r"\b(\d+) sequential steps\b")


def sequential_steps(notes: str) -> int | None:
    """The step count of a recurrent layer's note ("128 sequential steps: ..."), None for other layers."""
    match = _SEQUENTIAL_STEPS.search(notes or "")
    return int(match.group(1)) if match else None


def recurrent_layers(rows) -> list[tuple[str, int]]:
    """(name, sequential steps) of each recurrent layer among report rows."""
    return [(r.name, steps) for r in rows if (steps := sequential_steps(getattr(r, "notes", "") or ""))]


def recurrent_caution(marked: list[tuple[str, int]]) -> str:
    """The one line said wherever predicted times of recurrent layers are shown (analyze's warnings and legend,
    a predicted tune study's warnings)."""
    named = named_list([f"{name}: {plural(steps, 'step')}" for name, steps in marked], 4)
    return (f"recurrent layers ({named}): each step waits for the one before, and the predicted times (CARM bound "
            "and calibrated) ignore that dependence; the real time can be far longer")


def _sequential_legend(marked: list[tuple[str, int]]) -> Text | None:
    if not marked:
        return None
    return Text(f"{SEQUENTIAL_MARK} {recurrent_caution(marked)}", style="yellow")


UNFIT = "cannot run on"   # advise.analyze.unfit_batch: "batch size N cannot run on GPU: ..." (said in the header)
LAUNCH_BOUND = "below the GPU's launch floor"   # launch_floor_warnings
LAUNCH_BOUND_MODEL = "the whole model is launch-bound"   # launch_floor_warnings: said in the header (launch_cautions)


def launch_floor_warnings(rows, profile, calib=None) -> list[str]:
    """A caution where layers shown at their CARM bound alone (no calibrated time) have a bound below the GPU-side
    launch floor of one kernel (calibration.store.launch_floor_of): their time is set by launching kernels, not by
    the roofs. Where the whole model's bound lies below its layers' launches (a tiny model: nanosecond and
    picosecond bounds), it says so first, in the header (launch_cautions)."""
    floor, what = launch_floor_of(profile, calib)
    below = [r for r in rows if floor and r.known and r.predicted_time_s and r.predicted_time_s < floor
             and not getattr(r, "calibrated_time_s", None)]
    if not below:
        return []
    working = [r for r in rows if r.known and r.predicted_time_s]
    total = sum(r.predicted_time_s for r in working)
    whole = (f"{LAUNCH_BOUND_MODEL}: its CARM bound ({seconds(total)}) is below launching the kernels of its "
             f"{plural(len(working), 'layer')} ({len(working)} x {seconds(floor)}); " if total < floor * len(working)
             else "")
    return [f"{whole}{len(below)} of {len(working)} layers have a CARM bound {LAUNCH_BOUND} ({seconds(floor)}, "
            f"{what}): {named_list([r.name for r in below], 4)}; their time is set by launching kernels (host-bound), "
            f"not by the roofs, and their bound times (down to {seconds(min(r.predicted_time_s for r in below))}) say "
            "how little work they do, not how long they take"]


POWER_MARK = "\u2021"   # double dagger: a bound time the power limit stretched beyond the roofs' time
POWER_LIMIT_NOTE = "slowed by the power limit"   # what predict.Predictor writes in such a row's notes
POWER_LEGEND = (f"{POWER_MARK} slowed by the power limit (predicted): the bound time is stretched so the board power "
                "stays within the limit, longer than FLOPs / attainable")


def power_limited(notes: str | None) -> bool:
    """True for a row whose notes say the power limit stretched its CARM bound time (predict.Predictor)."""
    return POWER_LIMIT_NOTE in (notes or "")


def _legend(*parts: Text | None) -> Text | None:
    shown = [p for p in parts if p is not None]
    if not shown:
        return None
    out = Text()
    for i, part in enumerate(shown):
        out.append_text(Text("\n") if i else Text())
        out.append_text(part)
    return out


def layer_table(report, top: int | None = None, width: int = 200) -> Table:
    """One row per layer; on narrow terminals the lesser columns are left out and the rest wrap.

    A recurrent layer's times are marked (SEQUENTIAL_MARK) and explained under the table: its CARM
    bound spreads the work of all steps over the whole GPU, as if they did not wait for each other. A bound
    time the power limit stretched (the row's notes say so) is marked POWER_MARK, also explained there."""
    shares, energy_shares = report.time_shares(), report.energy_shares()
    measured = any(r.measured for r in report.layers)
    columns = [("layer", "left"), ("type", "left"), ("FLOPs", "right"), ("AI F/B", "right"), ("bound", "left"),
               ("attainable", "right")]
    if measured:
        columns += [("measured", "right"), ("eff.", "right"), ("energy", "right"), ("power", "right"),
                    ("E share", "right")]
    # predicted power: at the calibrated time (the validated per-layer figure), and at the CARM operating point
    columns += [("bound time", "right"), ("calibrated", "right"), ("cal. power", "right"), ("roof power", "right"),
                ("share", "right")]
    rows = report.layers
    if top is not None:
        rows = sorted(rows, key=lambda r: -shares.get(r.name, 0))[:top]
    cells_of, capped = [], []
    for r in rows:
        if not r.known:
            cells = [r.name, r.type, Text("unknown", style="red"), "-", Text("no cost model", style="red")]
            cells += ["-"] * (len(columns) - len(cells))
        elif not r.flops and not r.bytes:
            continue
        else:
            ai = "-" if r.ai is None else f"{r.ai:.3g}" + ("*" if r.ai_source == "counters" else "")
            cells = [r.name, r.type, si(r.flops), ai, _bound_text(r.bound),
                     si(r.attainable_flops_per_s, "FLOP/s")]
            if measured:
                eff = r.efficiency
                cells += [si(r.achieved_flops_per_s, "FLOP/s") if r.measured else "-",
                          "-" if eff is None else f"{eff:.0%}", si(r.energy_j, "J") if r.measured else "-",
                          _watts(r.power_w) if r.measured else "-",
                          f"{energy_shares.get(r.name, 0):.1%}" if r.measured else "-"]
            mark = SEQUENTIAL_MARK if sequential_steps(r.notes) else ""
            bound_time, calibrated = seconds(r.predicted_time_s), seconds(r.calibrated_time_s)
            if bound_time != "-" and power_limited(r.notes):
                capped.append(r.name)
                bound_time += POWER_MARK
            cells += [bound_time + mark if bound_time != "-" else bound_time,
                      calibrated + mark if calibrated != "-" else calibrated, _watts(r.calibrated_power_w),
                      _watts(r.predicted_power_w), f"{shares.get(r.name, 0):.1%}"]
        cells_of.append(cells)
    names = [name for name, _ in columns]
    droppable = [n for n in _DROP_FIRST if n in names and not (n == "bound time" and not measured)]
    dropped: list[str] = []
    stacked = False   # the class under the name in one column, instead of a column of its own
    sequential = _sequential_legend(recurrent_layers(report.layers))
    full_width = _natural_width(_layers_table(columns, cells_of, set()))

    def build() -> Table:
        power = Text(POWER_LEGEND, style="yellow") if capped and "bound time" not in dropped else None
        # the recurrent legend whatever rows `top` shows: the header's time carries the mark too
        return _layers_table(columns, cells_of, set(dropped),
                             _legend(sequential, power, _left_out_note(columns, dropped, full_width)), stacked)

    table = build()
    # The lesser columns go while the table is wider than the terminal unwrapped.
    while droppable and _natural_width(table) > width:
        dropped.append(droppable.pop(0))
        table = build()
    # Names are never broken: while the table cannot fit even with every label wrapped at its spaces, columns with
    # the class moves under the name, then columns with no figure in any row go, then the attainable performance.
    empty = [name for i, (name, _) in enumerate(columns) if name not in dropped and i > 1
             and cells_of and all(str(cells[i]) == "-" for cells in cells_of)]
    for step in ("stack", *empty, "attainable"):
        if _narrowest_width(columns, cells_of, set(dropped), stacked) <= width:
            break
        if step == "stack":
            stacked = True
        elif step in names and step not in dropped:
            dropped.append(step)
        table = build()
    return table


def _natural_width(table: Table) -> int:
    """The table's width with nothing wrapped."""
    return Console(width=10_000).measure(table).maximum


def _narrowest_width(columns, cells_of, dropped: set[str], stacked: bool) -> int:
    """The table's width with each roof label wrapped at every space and nothing else wrapped: the narrowest it
    gets without breaking a name or a figure (rich's own minimum would break them at their spaces too)."""
    at = [name for name, _ in columns].index("bound")
    words = [[*cells[:at], Text("\n".join(str(cells[at]).split())), *cells[at + 1:]] for cells in cells_of]
    return _natural_width(_layers_table(columns, words, dropped, stacked=stacked))


def _left_out_note(columns, dropped: list[str], full_width: int) -> Text | None:
    """Which columns a narrow terminal left out, in the table's order, and how to see them."""
    if not dropped:
        return None
    names = [name for name, _ in columns if name in dropped]
    return Text(f"columns left out at this width: {', '.join(names)}; a terminal of {full_width} columns "
                f"(COLUMNS={full_width}) or the JSON report (--json) shows every column", style="dim")


def _layers_table(columns, cells_of, dropped: set[str], caption: Text | None = None, stacked: bool = False) -> Table:
    table = Table(title="Layers on the CARM", header_style="bold", expand=False, pad_edge=False, caption=caption,
                  caption_justify="left")
    keep = [i for i, (name, _) in enumerate(columns) if name not in dropped and not (stacked and name == "type")]
    for i in keep:
        name, just = columns[i]
        # A layer's name and class stay whole (no_wrap: the table leaves columns out rather than break them); a
        # roof's label wraps at its spaces; the figures stay on one line.
        table.add_column("layer / type" if stacked and i == 0 else name, justify=just, overflow="fold",
                         no_wrap=name != "bound")
    for cells in cells_of:
        row = [cells[i] for i in keep]
        if stacked:
            row[0] = Text.assemble(str(cells[0]), "\n", (str(cells[1]), "dim"))
        table.add_row(*row)
    return table


def recommendations_table(report) -> Table:
    """One block per recommendation, as wide as the terminal: text wraps at spaces, so code to type
    (keras.mixed_precision.set_global_policy(...), model.compile(jit_compile=True)) stays whole."""
    table = Table(title="Recommendations (most gain first)", title_justify="left", header_style="bold", box=None,
                  show_header=False, expand=True, padding=(0, 1, 1, 0))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("recommendation", ratio=1, overflow="fold")
    for i, rec in enumerate(report.recommendations, 1):
        checked = verified_text(rec.verified)
        block = Text.assemble((rec.title, "bold"), "\n", ("expected gain: ", "dim"), rec.expected_gain, "\n", rec.detail)
        if checked:  # what --verify measured, beside the predicted gain
            block.append("\n" + checked, style="bold red" if rec.verified.get("flagged") else "bold green")
        if getattr(rec, "code", None):   # the changed configuration as the lines that run it
            block.append_text(Text.assemble("\n", ("in Keras:", "dim"), "\n", (rec.code.rstrip("\n"), "cyan")))
        table.add_row(f"{i}.", block)
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


def no_recommendation_text(report) -> str:
    """Why there is no recommendation: no layer could be costed (each has no cost model), no layer does work the
    CARM can place (views, dropout), or every layer sits close to its best roof."""
    if any(r.known and (r.flops or r.bytes) for r in report.layers):
        return "No recommendation: every layer sits close to its best roof at this configuration."
    unknown = report.unknown_layers
    if unknown:
        names = named_list([f"{r.name} ({r.type})" for r in unknown], 5)
        return (f"No recommendation: no layer could be costed; {plural(len(unknown), 'layer')} "
                f"{'has' if len(unknown) == 1 else 'have'} no cost model: {names}.")
    return ("No recommendation: no layer computes or moves data the CARM can place (reshapes, flattens and "
            "dropout at inference cost nothing here).")


def renderables(report, top: int | None = None, width: int = 200):
    yield header(report)
    yield layer_table(report, top, width)
    model_clock = (getattr(report, "clocks", None) or {}).get("model")
    if model_clock:
        curve = (report.clocks.get("voltage_curve") or {}).get("source", "assumed")
        yield Text(f"Energy-optimal SM clock (predicted, voltage curve {curve}): {model_clock['sm_clock_mhz']:.0f} MHz, "
                   f"{model_clock['energy_gain']:.2f}x less energy and {model_clock['slowdown']:.2f}x the time of the "
                   f"top clock ({model_clock['default_sm_clock_mhz']:.0f} MHz)", style="cyan")
    if report.recommendations:
        yield recommendations_table(report)
    else:
        yield Text(no_recommendation_text(report))
    recurrent = recurrent_layers(report.layers)
    # said once, as the legend under the layer table or in the header (the JSON keeps them among the warnings)
    said = {recurrent_caution(recurrent) if recurrent else None, *missing_roofs_text(report.layers).split("\n"),
            *header_warnings(report), *launch_cautions(report)}
    for w in report.warnings:
        if w not in said:
            yield Text(f"warning: {w}", style="bold red")


def print_report(report, console: Console | None = None, top: int | None = None) -> None:
    console = console or make_console()
    if wants_full_width(console):   # not a terminal: as wide as the layer table with every column
        natural = Console(width=10_000).measure(layer_table(report, top, width=10_000)).maximum
        console.width = max(console.width, natural)
    console.print(Group(*renderables(report, top, console.width)))


def verified_text(verified: dict | None) -> str:
    """One line for the report table: the measured gain, or why there is none."""
    if not verified:
        return ""
    if verified.get("error"):
        return f"verify failed: {verified['error']}"
    parts = [f"{verified['measured_speedup']:.2f}x faster" if verified.get("measured_speedup") else None,
             f"{verified['measured_energy_ratio']:.2f}x less energy" if verified.get("measured_energy_ratio") else None]
    if verified.get("compile_s"):
        parts.append(f"compiled in {verified['compile_s']:.1f} s on the first call (paid once)")
    text = "measured: " + ", ".join(p for p in parts if p)
    if verified.get("compared_against"):
        predicted = verified.get("predicted_speedup")
        text += (f"; predicted {predicted:.2f}x" if predicted else "; prediction") + \
            f" against {verified['compared_against']}"
    flagged_on = verified.get("flagged_on") or (["time"] if verified.get("flagged") else [])
    offs = [f"{verified['off_by']:.0%} in time" if "time" in flagged_on else None,
            f"{verified['energy_off_by']:.0%} in energy" if "energy" in flagged_on else None]
    text += " - OFF by " + " and ".join(o for o in offs if o) if flagged_on else ""
    gain = measured_gain(verified)
    if gain is not None and gain < 1:
        text += "; no gain measured on this GPU (slower, costlier where measured): not advised here, ranked by the measurement"
    return text
