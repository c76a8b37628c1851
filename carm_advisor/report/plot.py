"""The CARM chart: log-log roofs of the profile, one dot per layer sized by its share of time."""

from __future__ import annotations

from pathlib import Path

from carm_advisor.carm.roofline import COMPUTE_PATHS, MEMORY_LEVELS
from carm_advisor.errors import CarmError

_ALWAYS_SHOWN = ("fp32", "tc_tf32", "tc_bf16", "tc_fp8_e4m3")
_LEVEL_STYLE = {"shared": ":", "l1": ":", "l2": "-.", "hbm": "--"}


def check_plot_format(path: str | Path) -> None:
    """Refuse an output format matplotlib cannot write, before any work is done."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = Path(path).suffix.lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise CarmError(f"cannot write a chart as '.{suffix}'; expected one of: {', '.join(sorted(formats))}")


def _axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 7), dpi=110)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte requested by the SMs)")
    ax.set_ylabel("performance (FLOP/s, 1 multiply-add = 2 FLOPs)")
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _save(fig, path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_roofs(ax, carm, paths, ai_range: tuple[float, float]) -> float:
    """Draw the memory slopes and the chosen compute roofs; returns the highest roof drawn."""
    levels = [m for m in MEMORY_LEVELS if m in carm.bandwidth_bytes_per_s]
    peaks = {p: carm.peak_flops_per_s[p] for p in paths}
    top = max(peaks.values())
    bw_max = max(carm.bandwidth_bytes_per_s[m] for m in levels)
    x_min, x_max = ai_range
    above = None
    for m in sorted(levels, key=lambda m: -carm.bandwidth_bytes_per_s[m]):
        b = carm.bandwidth_bytes_per_s[m]
        x_end = top / b
        ax.plot([x_min, x_end], [b * x_min, top], _LEVEL_STYLE.get(m, "--"), color="0.35", lw=1.3)
        x_lab = x_min * 2.2
        # A slope within 30% of the one above gets its label under its line, not over the other label.
        under = above is not None and above / b < 1.3
        above = b
        ax.annotate(f"{MEMORY_LEVELS[m]} {b / 1e12:.3g} TB/s", (x_lab, b * x_lab), rotation=0, fontsize=8,
                    color="0.25", xytext=(2, -12 if under else 4), textcoords="offset points", gid="roof-label")
    previous, stacked = None, 0
    for p, f in sorted(peaks.items(), key=lambda kv: kv[1], reverse=True):
        color = "tab:blue" if p.startswith("tc_") else "0.3"
        ax.plot([f / bw_max, x_max], [f, f], "-", color="tab:blue" if p.startswith("tc_") else "tab:gray", lw=1.6)
        # Roofs within 15% of the one above would print over it: stack their labels below instead.
        stacked = stacked + 1 if previous is not None and previous / f < 1.15 else 0
        previous = f
        ax.annotate(f"{COMPUTE_PATHS[p]} {f / 1e12:.4g} TFLOP/s", (x_max, f), ha="right",
                    va="bottom" if stacked == 0 else "top", fontsize=8, color=color,
                    xytext=(0, 0 if stacked == 0 else -2 - 9 * (stacked - 1)), textcoords="offset points",
                    gid="roof-label")
    ax.set_xlim(x_min, x_max)
    return top


def _ai_range(carm, paths, ais) -> tuple[float, float]:
    top = max(carm.peak_flops_per_s[p] for p in paths)
    slowest = min(carm.bandwidth_bytes_per_s.values())
    ais = ais or [1.0]
    return min(min(ais) / 3, 0.05), max(max(ais) * 3, 4 * top / slowest)


def plot_report(report, path: str | Path, labelled: int = 6) -> Path:
    return _save(draw_report(report, labelled), path)


# Offsets (points) tried in turn for a layer's label: nearest the dot first, then further out.
_LABEL_OFFSETS = [(dx * r, dy * r) for r in (8, 18, 30, 46, 66)
                  for dx, dy in ((1, 1), (1, -1.6), (-1, 1), (-1, -1.6), (0, 1.5), (0, -2.2))]


def _place_labels(fig, ax, labels, avoid) -> None:
    """Greedy placement: each label takes the first offset where its box overlaps no roof label and no
    label placed before it (boxes in display coordinates, after the layout is final)."""
    from matplotlib.text import Text

    def extent(artist):   # an annotation's text alone, not its leader line
        return (Text.get_window_extent if isinstance(artist, Text) else type(artist).get_window_extent)(artist, renderer)

    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    taken = [extent(a).expanded(1.05, 1.1) for a in avoid]
    inside = ax.get_window_extent(renderer)
    for ann in labels:
        for dx, dy in _LABEL_OFFSETS:
            ann.xyann = (dx, dy)
            ann.set_horizontalalignment("left" if dx >= 0 else "right")
            box = extent(ann)
            if inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1) and \
                    not any(box.overlaps(t) for t in taken):
                break
        taken.append(extent(ann).expanded(1.05, 1.1))


def draw_report(report, labelled: int = 6):
    """The CARM chart of a report as a matplotlib Figure (plot_report saves it)."""
    profile = report.profile
    if profile is None:
        raise CarmError("this report carries no profile to draw roofs from")
    carm = profile.carm()
    rows = [r for r in report.known_layers if r.flops and r.ai]
    used_paths = {r.path for r in rows}
    paths = [p for p in COMPUTE_PATHS if p in carm.peak_flops_per_s and (p in used_paths or p in _ALWAYS_SHOWN)]
    fig, ax = _axes()
    top = draw_roofs(ax, carm, paths, _ai_range(carm, paths, [r.ai for r in rows] + [r.analytic_ai for r in rows if r.analytic_ai]))

    shares = report.time_shares()
    scale = 1800
    color = {"compute": "tab:green", "memory": "tab:orange"}

    def predicted_xy(r):
        return (r.analytic_ai or r.ai), r.flops / r.predicted_time_s

    predicted = [r for r in rows if r.predicted_time_s]
    measured = [r for r in rows if r.measured and r.achieved_flops_per_s]
    if predicted:
        xy = [predicted_xy(r) for r in predicted]
        capped = any("power limit" in r.notes for r in predicted)
        ax.scatter([x for x, _ in xy], [y for _, y in xy], s=[max(12, scale * shares.get(r.name, 0)) for r in predicted],
                   facecolors="none", edgecolors=[color.get(r.predicted_bound.partition(":")[0], "tab:red") for r in predicted],
                   linewidths=1.4, zorder=2,
                   label="predicted layer, CARM bound (hollow; analytic AI): on its roof" + (
                       ", or below it where the power limit slows the GPU" if capped else ""))
    calibrated = [r for r in predicted if r.calibrated_time_s]
    if calibrated:
        from matplotlib.markers import MarkerStyle

        ax.scatter([r.analytic_ai or r.ai for r in calibrated], [r.flops / r.calibrated_time_s for r in calibrated],
                   s=[max(12, scale * shares.get(r.name, 0)) for r in calibrated], marker=MarkerStyle("o", fillstyle="bottom"),
                   c=[color.get(r.predicted_bound.partition(":")[0], "tab:red") for r in calibrated],
                   edgecolors="0.3", linewidths=0.8, alpha=0.8, zorder=2,
                   label="calibrated prediction (half-filled; this backend's learned efficiency)")
    if measured:
        for r in measured:   # a faint line from each layer's prediction to where it really ran
            if r.predicted_time_s:
                (x0, y0) = predicted_xy(r)
                ax.plot([x0, r.ai], [y0, r.achieved_flops_per_s], "-", color="0.75", lw=0.6, zorder=1)
        ax.scatter([r.ai for r in measured], [r.achieved_flops_per_s for r in measured],
                   s=[max(12, scale * shares.get(r.name, 0)) for r in measured],
                   c=[color.get(r.bound.partition(":")[0], "tab:red") for r in measured], alpha=0.85,
                   edgecolors="black", linewidths=0.6, zorder=3,
                   label="measured layer (" + ("counter" if any(r.ai_source == "counters" for r in measured) else "analytic")
                   + " AI; size = share of time)")
    bounds = {r.predicted_bound.partition(":")[0] for r in predicted} | {r.bound.partition(":")[0] for r in measured}
    for kind, meaning in (("compute", "compute-bound (under a compute roof)"), ("memory", "memory-bound (under a memory slope)")):
        if kind in bounds:   # what the colours mean, as legend entries of their own
            ax.scatter([], [], s=40, facecolors="none", edgecolors=color[kind], linewidths=1.4, label=meaning)
    roof_labels = list(ax.texts)
    heaviest = sorted(rows, key=lambda r: -shares.get(r.name, 0))[:labelled]
    layer_labels = []
    for r in heaviest:
        x, y = (r.ai, r.achieved_flops_per_s) if r.measured and r.achieved_flops_per_s else predicted_xy(r)
        layer_labels.append(ax.annotate(f"{r.name} {shares.get(r.name, 0):.0%}", (x, y), fontsize=8, xytext=(8, 8),
                                        textcoords="offset points", gid="layer-label",
                                        arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5}))

    m, d = report.model, report.device
    what = "measured" if d.source == "measured" else f"PREDICTED from the {d.profile_source} profile"
    ax.set_title(f"CARM: {m.name} (batch {m.batch_size}, {m.precision}, {m.backend}) on {d.profile} - {what}",
                 fontsize=10)
    ys_all = [predicted_xy(r)[1] for r in predicted] + [r.achieved_flops_per_s for r in measured] + [top] \
        + [r.flops / r.calibrated_time_s for r in predicted if r.calibrated_time_s]
    ax.set_ylim(max(min(ys_all) / 5, 1e9), top * 3)
    legend = ax.legend(loc="lower right", fontsize=8)
    _place_labels(fig, ax, layer_labels, roof_labels + [legend])
    return fig


def plot_profile(profile, path: str | Path) -> Path:
    """The roofs of a profile alone, with the mixed-intensity sweep points when it has them."""
    carm = profile.carm()
    paths = [p for p in COMPUTE_PATHS if p in carm.peak_flops_per_s]
    points = (profile.extra.get("sweep") or {}).get("points") or []
    fig, ax = _axes()
    top = draw_roofs(ax, carm, paths, _ai_range(carm, paths, [p["ai"] for p in points]))
    if points:
        by_family: dict[str, list] = {}
        for p in points:   # one series per (path, level): the implementation that stands for each point
            if p.get("stands_for_point", True):
                family = (p["path"], p["level"]) if "path" in p else tuple(p["name"].split("_")[1:3])  # older files
                by_family.setdefault(family, []).append(p)
        for (path_key, level), pts in sorted(by_family.items()):
            pts.sort(key=lambda p: p["ai"])
            ax.plot([p["ai"] for p in pts], [p["flops_per_s"] for p in pts], "o-", ms=4, lw=0.8, zorder=3,
                    label=f"sweep {path_key} vs {level} (measured)")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_ylim(top / 1e4, top * 3)
    ax.set_title(f"CARM roofs of {profile.name} ({profile.source} profile)", fontsize=10)
    return _save(fig, path)
