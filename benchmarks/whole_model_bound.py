"""The CARM bound's whole-model time error on records of whole models alone (`record_layers.py --whole-only`).

power_model_validation.py gives a whole model's CARM bound time as the sum of its recorded layers' roof times, so a
record without layers has none. This script maps each such record's model (rebuilt on the CPU, as the validation
does), sums every costed layer's roof time at the reference SM clock (carm.dvfs.predict_at_clock, the validation's
`carm_bound_time_s`), and sets it against the measured whole-model time. Beside it, the calibrated error the
validation output gives for the same rows (`calibrated_in_sample`), so both figures come from one place.

    python benchmarks/whole_model_bound.py --validation OUT.json[.xz] --profile PROFILE.json --source TAG --out F.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from carm_advisor.calibration import rebuilt_model  # noqa: E402
from carm_advisor.carm.dvfs import Work, predict_at_clock, reference_clock_mhz  # noqa: E402
from carm_advisor.model_loader import image_data_format  # noqa: E402
from carm_advisor.predict import Predictor  # noqa: E402
from carm_advisor.profiles.profile import load_profile  # noqa: E402
from carm_advisor.result_files import read_json  # noqa: E402


def record_of(row: dict, results: Path) -> dict:
    """The record a validation row scored: `<source folder>/<run file>` under benchmarks/results."""
    return json.loads((results / row["source"] / row["run"]).read_text())


def bound_time_s(record: dict, profile) -> float:
    """Every costed layer's roof time at the profile's reference SM clock, summed."""
    carm, pm = profile.carm(), profile.power_model
    f0 = reference_clock_mhz(pm, profile.device.get("sm_clock_max_mhz"))
    model = rebuilt_model(record.get("model_name"), record["precision"], record["layout"])
    with image_data_format(record["layout"]):
        rows = Predictor(profile, record["math_mode"], backend=record["backend"]).rows(model, record["batch_size"])
    return sum(predict_at_clock(carm, pm, Work(r.flops, r.bytes, r.path, r.level), f0, f0).time_s
               for r in rows if r.known and (r.flops or r.bytes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validation", required=True, help="a power_model_validation.py output")
    parser.add_argument("--profile", required=True, help="the profile the validation placed the layers with")
    parser.add_argument("--source", required=True, help="score the whole-model rows whose record folder has this")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    doc = read_json(Path(args.validation))
    profile = load_profile(args.profile)
    results = ROOT / "benchmarks" / "results"
    rows = []
    for r in doc["models"]:
        if args.source not in (r.get("source") or ""):
            continue
        bound = bound_time_s(record_of(r, results), profile)
        calibrated = (r.get("calibrated_in_sample") or {}).get("time_err")
        rows.append({"run": r["run"], "model": r["model"], "backend": r["backend"], "precision": r["precision"],
                     "measured_time_s": r["measured_time_s"], "carm_bound_time_s": bound,
                     "carm_bound_time_err": bound / r["measured_time_s"] - 1, "calibrated_time_err": calibrated})
    if not rows:
        sys.exit(f"whole_model_bound: no whole-model row of {args.validation} comes from a folder with '{args.source}'")
    med = (lambda xs: statistics.median(abs(x) for x in xs) if xs else None)
    out = {"validation": args.validation, "profile": args.profile, "source": args.source,
           "n": len(rows), "carm_bound_time_median_abs_err": med([r["carm_bound_time_err"] for r in rows]),
           "calibrated_time_median_abs_err": med([r["calibrated_time_err"] for r in rows
                                                  if r["calibrated_time_err"] is not None]),
           "rows": rows, "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{args.source}: n={out['n']}  CARM bound {out['carm_bound_time_median_abs_err']:.1%}  "
          f"calibrated {out['calibrated_time_median_abs_err']:.1%} -> {args.out}")


if __name__ == "__main__":
    main()
