"""The CARM bound's whole-model time error on records of whole models alone (`record_layers.py --whole-only`).

power_model_validation.py gives a whole model's CARM bound time as the sum of its recorded layers' roof times, so a
record without layers has none. This script maps each such record's model (rebuilt on the CPU, as the validation
does), sums every costed layer's time at the roofs and the reference SM clock (carm.dvfs.predict_at_clock: a layer the
power limit would hold above it runs at the clock the limit allows), and sets it against the measured whole-model
time. Two power models, two bounds:
- `carm_bound_*`: the profile's own power model, the bound `analyze()` and `Predictor` report (what a user gets);
- `carm_bound_sweep_fit_*` (with --ceilings): the power model the validation fits on the ceilings and the power sweep,
  the one behind its `carm_bound_time_s`.
Beside them, the calibrated error the validation output gives for the same rows (`calibrated_in_sample`).

    python benchmarks/whole_model_bound.py --validation OUT.json[.xz] --profile PROFILE.json --source TAG \
        [--ceilings CEILINGS.json --ceilings SWEEP.json] --out F.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from carm_advisor.carm.dvfs import Work, predict_at_clock, reference_clock_mhz  # noqa: E402
from carm_advisor.files import read_json  # noqa: E402
from carm_advisor.learn import rebuilt_model
from carm_advisor.models.loader import image_data_format  # noqa: E402
from carm_advisor.predict import Predictor  # noqa: E402
from carm_advisor.profiles.profile import load_profile  # noqa: E402


def record_of(row: dict, results: Path) -> dict:
    """The record a validation row scored: `<source folder>/<run file>` under benchmarks/results."""
    return json.loads((results / row["source"] / row["run"]).read_text())


def costed_layers(record: dict, profile) -> list:
    """The record's model mapped and placed on the profile's roofs: the rows with work."""
    model = rebuilt_model(record.get("model_name"), record["precision"], record["layout"])
    with image_data_format(record["layout"]):
        rows = Predictor(profile, record["math_mode"], backend=record["backend"]).rows(model, record["batch_size"])
    return [r for r in rows if r.known and (r.flops or r.bytes)]


def bound_time_s(rows: list, carm, pm, f0_mhz: float) -> float:
    """Every layer's time at the roofs and the reference SM clock under power model `pm`, summed."""
    return sum(predict_at_clock(carm, pm, Work(r.flops, r.bytes, r.path, r.level), f0_mhz, f0_mhz).time_s
               for r in rows)


def sweep_fit_power_model(ceilings: list[Path], profile):
    """The power model power_model_validation.py fits on these ceilings/sweep files, and its reference clock."""
    from power_model_validation import power_model_of

    from carm_advisor.carm.power_fit import fit_power_runs

    drop = set(((profile.provenance.get("measured") or {}).get("dropped") or {}))
    fit, limit = fit_power_runs([json.loads(p.read_text()) for p in ceilings], drop)
    return power_model_of(fit, limit), fit.voltage.f0_mhz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validation", required=True, help="a power_model_validation.py output")
    parser.add_argument("--profile", required=True, help="the profile the validation placed the layers with")
    parser.add_argument("--source", required=True, help="score the whole-model rows whose record folder has this")
    parser.add_argument("--ceilings", type=Path, action="append", default=[],
                        help="the validation's ceilings and power-sweep files (repeat): also the sweep fit's bound")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    doc = read_json(Path(args.validation))
    profile = load_profile(args.profile)
    carm, pm = profile.carm(), profile.power_model
    f0 = reference_clock_mhz(pm, profile.device.get("sm_clock_max_mhz"))
    sweep = sweep_fit_power_model(args.ceilings, profile) if args.ceilings else None
    results = ROOT / "benchmarks" / "results"
    rows = []
    for r in doc["models"]:
        if args.source not in (r.get("source") or ""):
            continue
        layers = costed_layers(record_of(r, results), profile)
        bound = bound_time_s(layers, carm, pm, f0)
        calibrated = (r.get("calibrated_in_sample") or {}).get("time_err")
        row = {"run": r["run"], "model": r["model"], "backend": r["backend"], "precision": r["precision"],
               "measured_time_s": r["measured_time_s"], "carm_bound_time_s": bound,
               "carm_bound_time_err": bound / r["measured_time_s"] - 1, "calibrated_time_err": calibrated}
        if sweep is not None:
            row["carm_bound_sweep_fit_time_s"] = bound_time_s(layers, carm, *sweep)
            row["carm_bound_sweep_fit_time_err"] = row["carm_bound_sweep_fit_time_s"] / r["measured_time_s"] - 1
        rows.append(row)
    if not rows:
        sys.exit(f"whole_model_bound: no whole-model row of {args.validation} comes from a folder with '{args.source}'")
    med = (lambda xs: statistics.median(abs(x) for x in xs) if xs else None)
    out = {"validation": args.validation, "profile": args.profile, "source": args.source,
           "n": len(rows), "carm_bound_time_median_abs_err": med([r["carm_bound_time_err"] for r in rows]),
           "carm_bound_sweep_fit_time_median_abs_err": med([r["carm_bound_sweep_fit_time_err"] for r in rows
                                                            if "carm_bound_sweep_fit_time_err" in r]),
           "calibrated_time_median_abs_err": med([r["calibrated_time_err"] for r in rows
                                                  if r["calibrated_time_err"] is not None]),
           "rows": rows, "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    sweep_med = out["carm_bound_sweep_fit_time_median_abs_err"]
    print(f"{args.source}: n={out['n']}  CARM bound {out['carm_bound_time_median_abs_err']:.1%} (profile's power model)"
          + (f", {sweep_med:.1%} (the validation's sweep fit)" if sweep_med is not None else "")
          + f"  calibrated {out['calibrated_time_median_abs_err']:.1%} -> {args.out}")


if __name__ == "__main__":
    main()
