"""VGG16 under each Keras dtype policy, side by side on the CARM: where the time and the joules go.

    python examples/vgg/compare_precisions.py [--batch-size 64] [--out DIR]

On a GPU every figure is measured; elsewhere it is a CARM prediction from the recorded H200 profile
(the table says which).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

import carm_advisor as advisor
from carm_advisor.models.loader import load_model

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def _fmt(value, scale, spec, unit=""):
    """'-' where a figure is unknown (no energy reading, no power model)."""
    return "-" if value is None else f"{value * scale:{spec}}{unit}"


def main(argv=None) -> Table:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default=".")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    table = Table(title=f"VGG16, batch {args.batch_size}")
    for col in ("policy", "source", "time", "energy", "samples/J", "GFLOP/s per W", "top recommendation"):
        table.add_column(col)
    for policy in POLICIES:
        model, name = load_model("vgg16", precision=policy)
        report = advisor.analyze(model, batch_size=args.batch_size, name=f"{name}-{policy}")
        report.plot(out / f"vgg16-{policy}.png")
        report.to_json(out / f"vgg16-{policy}.json")
        t = report.totals()
        top = report.recommendations[0].title if report.recommendations else "-"
        table.add_row(policy, f"{report.device.source} ({t['time_source']})", _fmt(t["time_s"], 1e3, ".2f", " ms"),
                      _fmt(t["energy_j"], 1, ".2f", " J"), _fmt(t["samples_per_j"], 1, ".2f"),
                      _fmt(t["gflops_per_watt"], 1, ".0f"), top)
    Console().print(table)
    return table


if __name__ == "__main__":
    main()
