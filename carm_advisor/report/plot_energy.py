"""The energy-efficiency CARM: GFLOP/s per W against arithmetic intensity, per compute path and memory
level, from the profile's power model (a prediction), with each layer's dot (predicted, and measured on
a GPU) and the energy ridge of each curve beside its performance ridge."""

from __future__ import annotations

from pathlib import Path

from carm_advisor.carm.dvfs import energy_efficiency_gflops_per_w, energy_ridge_ai
from carm_advisor.carm.roofline import COMPUTE_PATHS, MEMORY_LEVELS
from carm_advisor.errors import CarmError

_LEVEL_STYLE = {"shared": ":", "l1": ":", "l2": "-.", "hbm": "--"}
_SHOWN_LEVELS = ("hbm", "l2")


def plot_energy(report, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    profile = report.profile
    pm = getattr(profile, "power_model", None)
    if profile is None or pm is None:
        raise CarmError("an energy-efficiency chart needs a profile with a power model")
    carm = profile.carm()
    f0 = profile.device.get("sm_clock_max_mhz")
    rows = [r for r in report.known_layers if r.flops and r.ai]
    paths = sorted({r.path for r in rows if r.path in pm.joules_per_flop and r.path in carm.peak_flops_per_s}) or \
        [p for p in ("tc_bf16",) if p in pm.joules_per_flop]
    levels = [m for m in _SHOWN_LEVELS if m in pm.joules_per_byte and m in carm.bandwidth_bytes_per_s]
    ais = [r.ai for r in rows] or [1.0]
    x = np.logspace(np.log10(min(min(ais) / 3, 0.05)), np.log10(max(max(ais) * 3, 1e4)), 200)

    fig, ax = plt.subplots(figsize=(11, 7), dpi=110)
    ax.set_xscale("log")
    ax.set_yscale("log")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, p in enumerate(paths):
        color = colors[i % len(colors)]
        for m in levels:
            ee = [energy_efficiency_gflops_per_w(carm, pm, p, m, a, f0) for a in x]
            ax.plot(x, ee, _LEVEL_STYLE.get(m, "-"), color=color, lw=1.3,
                    label=f"{COMPUTE_PATHS.get(p, p)} from {MEMORY_LEVELS.get(m, m)} (power model, predicted)")
            e_ridge, t_ridge = energy_ridge_ai(carm, pm, p, m), carm.ridge_ai(p, m)
            ax.plot([e_ridge], [energy_efficiency_gflops_per_w(carm, pm, p, m, e_ridge, f0)], "D", color=color, ms=5)
            ax.plot([t_ridge], [energy_efficiency_gflops_per_w(carm, pm, p, m, t_ridge, f0)], "|", color=color,
                    ms=12, mew=2)
    predicted = [r for r in rows if r.predicted_energy_j]
    measured = [r for r in rows if r.measured and r.energy_j]
    if predicted:
        ax.scatter([r.analytic_ai or r.ai for r in predicted], [r.flops / r.predicted_energy_j / 1e9 for r in predicted],
                   facecolors="none", edgecolors="tab:green", s=40, zorder=3, label="layer, predicted")
    if measured:
        ax.scatter([r.ai for r in measured], [r.flops / r.energy_j / 1e9 for r in measured], c="tab:red",
                   edgecolors="black", linewidths=0.5, s=40, zorder=4, label="layer, measured")
    ax.plot([], [], "kD", ms=5, label="energy ridge (energy balance point)")
    ax.plot([], [], "k|", ms=12, mew=2, label="performance ridge")
    ax.set_xlabel("arithmetic intensity (FLOP per byte requested by the SMs)")
    ax.set_ylabel("energy efficiency (GFLOP/s per W = GFLOP per J)")
    ax.grid(True, which="major", alpha=0.3)
    m, d = report.model, report.device
    what = "measured dots" if measured else f"PREDICTED from the {d.profile_source} profile"
    ax.set_title(f"Energy-efficiency CARM: {m.name} (batch {m.batch_size}, {m.precision}) on "
                 f"{d.profile} - {what}", fontsize=10)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
