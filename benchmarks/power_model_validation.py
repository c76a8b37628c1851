"""Validate the power model and the calibration against recorded layers and whole models, offline on a CPU.

    python benchmarks/power_model_validation.py --set h100 [--out DIR]
    python benchmarks/power_model_validation.py --records DIR_OR_FILE [...] --ceilings RUN.json [...]
        [--profile PROFILE.json] [--calibration CAL.json] [--duty-from PROFILE] [--min-layer-window-s 0.5]
        [--drop NAME,...] [--layout-copies-at-roof] [--out DIR]

The power model is fitted on the ceilings runs and power sweeps alone (--ceilings: carm/power_fit.fit_power_runs,
every benchmark row with a >= 0.9 s power window; the profile's dropped rows and --drop left out). Its duty curves
and the calibration (default: the one shipped for the profile's GPU model) are then scored leave one model out on
the recorded runs (--records: RunMeasurement files or folders; carm_advisor/validation says what each figure is).
--set NAME takes a record set of RECORD_SETS (its records, ceilings and profile); --records adds to it, --ceilings
and --profile replace its own. --duty-from takes another profile's duty curves for every model instead of fitting
them (whether one GPU's curves carry to another's records). --layout-copies-at-roof counts the torch layout copies at
their CARM bound (RoofCopies) instead of the calibration's data-movement efficiency.

Writes <out>/<gpu>-power-model-<date>.json (.json.xz with --xz): the fit, the duty curves, validation (the summary:
per layer, per whole model, targets), models (one row per whole model) and layers (one short list per layer).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import result_path  # noqa: E402

from carm_advisor.calibration import Calibration  # noqa: E402

RESULTS = HERE / "results"
H100 = RESULTS / "nvidia-h100-80gb-hbm3-characterisation-2026-12-06"
# Named record sets: the records, the ceilings runs and power sweeps the power model is fitted on, and the profile
# (None: the embedded H200) that places the layers. benchmarks/results/INDEX.md says what each folder holds.
RECORD_SETS = {
    "h200": {"records": [HERE.parent / "tests" / "data", *(RESULTS / f"nvidia-h200-records-{name}" for name in (
                 "2026-12-03", "windows-500ms-2026-12-03", "2026-12-04", "seven-models-2026-12-04",
                 "held-out-models-2026-12-04", "resnet50-mobilenetv2-windows-2026-12-04",
                 "held-out-vgg19-mobilenetv3large-2026-12-04", "vgg16-resnet50-windows-2026-12-04",
                 "held-out-nasnetmobile-jax-2026-12-04", "jax-back-to-back-2026-12-04"))],
             "ceilings": [RESULTS / "nvidia-h200-ceilings-2026-12-02.json",
                          RESULTS / "nvidia-h200-power-sweep-2026-12-03.json"],
             "profile": None},
    "h100": {"records": [RESULTS / f"nvidia-h100-80gb-hbm3-records-{name}" for name in (
                 "torch-2026-12-05", "jax-layers-2026-12-07", "jax-whole-models-2026-12-07")],
             "ceilings": [H100 / "nvidia-h100-80gb-hbm3-ceilings-2026-12-06.json",
                          H100 / "nvidia-h100-80gb-hbm3-power-sweep-2026-12-06.json"],
             "profile": H100 / "measured_profile.json"},
}


class RoofCopies(Calibration):
    """The torch layout copies at their CARM bound (the roof's bandwidth), in what a layer is predicted to take and
    in what is taken off a measured one, in place of the calibration's data-movement efficiency."""

    def _copy_pass_time_s(self, backend: str, dtype: str, pass_bound_s: float) -> float:
        return pass_bound_s


def power_model_of(fit, power_limit_w):
    """The PowerModel of a sweep fit (carm/power_fit.PowerFit) under the GPU's power limit, no duty curve."""
    from carm_advisor.carm.power_model import PowerModel

    return PowerModel(constant_w=fit.constant_w, joules_per_flop=fit.joules_per_flop,
                      joules_per_byte=fit.joules_per_byte, power_limit_w=power_limit_w,
                      data_factor=fit.data_factor, voltage=fit.voltage, fit=fit.quality)


def write_compact(path: Path, doc: dict) -> Path:
    """The result JSON, indented except the per-layer rows (one line each); xz-compressed where `path` ends in .xz."""
    import datetime as dt
    import shlex

    from carm_advisor.files import write_text

    doc.setdefault("date", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    doc.setdefault("command", shlex.join([sys.executable.rsplit("/", 1)[-1]] + sys.argv))
    layers = dict(doc.pop("layers"))
    rows = layers.pop("rows")
    head = json.dumps(doc, indent=1, default=str)[:-2]
    body = ",\n".join(json.dumps(r, separators=(",", ":"), default=str) for r in rows)
    text = head + ',\n "layers": ' + json.dumps(layers, separators=(",", ":"))[:-1] + ',"rows":[\n' + body + "\n]}\n}\n"
    json.loads(text)   # well formed
    return write_text(path, text)


def _inputs(args) -> tuple[list[Path], list[Path], str | None]:
    """The records, ceilings and profile of --set and the flags (flags add records, replace the rest)."""
    chosen = RECORD_SETS[args.set] if args.set else {"records": [], "ceilings": [], "profile": None}
    records = [*chosen["records"], *args.records]
    ceilings = args.ceilings or chosen["ceilings"]
    profile = args.profile or (str(chosen["profile"]) if chosen["profile"] else None)
    return records, ceilings, profile


def main(argv: list[str] | None = None) -> int:
    from carm_advisor.calibration import shipped_calibration
    from carm_advisor.carm.power_fit import fit_power_runs
    from carm_advisor.errors import CarmError
    from carm_advisor.profiles.profile import load_profile
    from carm_advisor.validation import compact_layers, load_runs, validate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=sorted(RECORD_SETS), help="a named record set (RECORD_SETS)")
    ap.add_argument("--records", type=Path, action="append", default=[],
                    help="RunMeasurement JSON files or folders of them (repeatable)")
    ap.add_argument("--ceilings", type=Path, action="append", default=[],
                    help="ceilings runs, power sweeps or measured profiles the power model is fitted on (repeatable)")
    ap.add_argument("--profile", help="profile whose roofs place the layers (default: the embedded H200)")
    ap.add_argument("--calibration", type=Path,
                    help="calibration JSON (default: the one shipped for the profile's GPU model; none: the CARM bound)")
    ap.add_argument("--duty-from", metavar="PROFILE",
                    help="take this profile's duty curves (a file or an embedded name) for every model")
    ap.add_argument("--min-layer-window-s", type=float, default=0.5,
                    help="score per-layer power only where the layer energy windows are at least this long")
    ap.add_argument("--drop", default="", help="benchmark rows to leave out of the power fit, comma-separated")
    ap.add_argument("--layout-copies-at-roof", action="store_true",
                    help="the torch layout copies at their CARM bound (RoofCopies)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--xz", action="store_true", help="write the result xz-compressed (.json.xz)")
    args = ap.parse_args(argv)
    records, ceilings, profile_arg = _inputs(args)
    if not records or not ceilings:
        print("error: expected --set or --records and --ceilings", file=sys.stderr)
        return 2
    for p in records + ceilings + ([args.calibration] if args.calibration else []):
        if not p.exists():
            print(f"error: not found: {p}", file=sys.stderr)
            return 2
    if not args.min_layer_window_s >= 0:
        print(f"error: --min-layer-window-s must be >= 0, received: {args.min_layer_window_s}", file=sys.stderr)
        return 2
    try:   # a bad calibration or profile is a one-line error
        profile = load_profile(profile_arg)
        calibration = Calibration.load(args.calibration) if args.calibration else shipped_calibration(profile.name)
        fixed_duty = load_profile(args.duty_from).power_model if args.duty_from else None
        docs = [json.loads(p.read_text()) for p in ceilings]
    except (CarmError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.duty_from and (fixed_duty is None or fixed_duty.duty is None):
        print(f"error: --duty-from {args.duty_from}: the profile has no duty curve", file=sys.stderr)
        return 2
    if args.layout_copies_at_roof:
        calibration = RoofCopies(calibration.samples, calibration.whole, calibration.provenance)
    drop = {n.strip() for n in args.drop.split(",") if n.strip()}
    drop |= set((profile.provenance.get("measured") or {}).get("dropped") or {})
    fit, limit = fit_power_runs(docs, drop)
    pm = power_model_of(fit, limit)
    runs = load_runs(records, profile, calibration if calibration.samples else None)
    result = validate(runs, profile.carm(), pm, fit.voltage.f0_mhz, args.min_layer_window_s, fixed_duty)
    doc = {"device": {"name": profile.name, **{k: profile.device.get(k) for k in ("power_limit_w", "sm_clock_max_mhz")}},
           "records": [str(p) for p in records],
           "fit": {**fit.to_dict(), "power_limit_w": limit, "from": [str(p) for p in ceilings], "left_out": sorted(drop)},
           "duty_from": args.duty_from or "fitted on the records (leave one model out)",
           "calibration": {"from": str(args.calibration) if args.calibration else
                           f"shipped for {profile.name}" if calibration.samples else f"none shipped for {profile.name}",
                           "layout_copies": "at the roof" if args.layout_copies_at_roof else
                           "at the data-movement efficiency", "provenance": calibration.provenance},
           "validation": result["validation"], "duty_curves": result["duty_curves"], "models": result["models"],
           "layers": compact_layers(result["layers"])}
    path = result_path(args.out, profile.name, "power-model")
    path = write_compact(path.with_name(path.name + ".xz") if args.xz else path, doc)
    _print(result["validation"], fit)
    print(f"wrote {path}")
    return 0


def _print(v: dict, fit) -> None:
    fmt = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    print(f"power fit: n={fit.quality['n']} R^2={fit.quality['r2']:.3f} median {fmt(fit.quality['median_abs_rel_err'])}")
    removed = ", ".join(f"{k} {n}" for k, n in v["filters"]["removed"].items() if n)
    print(f"layers: {v['filters']['evaluated']} evaluated, {v['filters']['scored']} scored (removed: {removed or '-'}); "
          f"noise floor {fmt(v['measurement_noise_floor']['power_median_abs_dev'])}")
    for name, st in v["variants"].items():
        print(f"  layer power, {name:<30s} n={st['n']:5d}: {fmt(st['power_median_abs_err'])}")
    print(f"layers (headline) n={v['n']}: power {fmt(v['power_median_abs_err'])}, energy given the measured time "
          f"{fmt(v['energy_median_abs_err'])}, with the calibrated time {fmt(v['energy_median_abs_err_calibrated_time'])}"
          f" (calibrated time {fmt(v['time_median_abs_err'])})")
    h = v["models"]["headline"]
    print(f"whole models (leave one model out) n={h['n']}: power {fmt(h['power_median_abs_err'])}, energy per sample "
          f"{fmt(h['energy_per_sample_median_abs_err_calibrated_time'])}, time {fmt(h['time_median_abs_err'])}")
    t = v["targets"]
    print("targets: " + ", ".join(f"{k} {t[k]}" for k in t if k.endswith("_met")))


if __name__ == "__main__":
    sys.exit(main())
