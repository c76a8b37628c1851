"""Fit the calibration (carm_advisor/calibration/) from recorded RunMeasurement files.

    python benchmarks/fit_calibration.py --records DIR_OR_FILE [...] [--studies DB ...] --out carm_advisor/profiles/nvidia_h200_calibration.json

Every *.json under a folder that is a RunMeasurement (schema carm-advisor/measurements/1) is used;
other files are skipped. Each record's model is rebuilt on the CPU by its recorded name, precision and
layout (shapes only) to get the CARM bound of every layer. The shipped H200 file is written by this
script, never by hand.

--studies DB (repeatable): Optuna SQLite files of measured tuning trials; each distinct measured inference
configuration becomes a whole-model sample (tuning_studies.whole_from_studies: torch eager -> "eager",
torch.compile -> "torch.compile", jax xla -> "jit"). The H200 studies tuned VGG16 only: a VGG16
whole-model prediction from such a calibration is in-sample.

The newest benchmarks/results/<gpu>-launch-floor-*.json of the records' GPU (launch_floor()) gives the jit
fit its cost per kernel (provenance "kernel_floor"): a measured figure, read from the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def record_files(paths: list[str]) -> list[Path]:
    """RunMeasurement JSON files under the given files and folders (learn.record_files)."""
    from carm_advisor.learn import record_files as found

    return found(paths)


def load_runs(paths: list[str]) -> list:
    """The RunMeasurements under `paths` that name their model (learn.load_records)."""
    from carm_advisor.learn import load_records

    return load_records(paths)


def add_studies(calibration, studies: list[str], profile=None) -> None:
    """Add the measured tuning trials of `studies` to `calibration` as whole-model samples (in place), their bounds
    on `profile`'s roofs (the embedded H200 when None), as the records' layers are."""
    from tuning_studies import whole_from_studies

    if not studies:
        return
    found = whole_from_studies(studies, profile)
    calibration.whole.extend(found)
    calibration.provenance["studies"] = [Path(s).name for s in studies]
    calibration.provenance["study_models"] = sorted({w.model for w in found})
    calibration.provenance["study_samples"] = len(found)


def launch_floor(device: str | None, folder: Path = ROOT / "benchmarks" / "results") -> dict | None:
    """The GPU-side launch floor per kernel (calibration provenance "kernel_floor": the jit whole-model fit adds
    one per kernel) from the newest launch-floor file of this GPU (benchmarks/launch_floor.py writes
    <gpu>-launch-floor-<date>.json: launch_floor.provenance.gpu_time_s, measured); None without one."""
    for f in sorted(folder.glob("*-launch-floor-*.json"), reverse=True):
        try:
            d = json.loads(f.read_text())
            value = float(d["launch_floor"]["provenance"]["gpu_time_s"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"fit_calibration: skipped {f.name} as a launch-floor file ({type(exc).__name__}: {exc}); "
                  "an older one may be used", file=sys.stderr)
            continue
        if (d.get("device") or {}).get("name") == device and value > 0:
            return {"value_s": value, "source": f"measured: {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f} "
                                                 "(launch_floor.provenance.gpu_time_s: one launch + sync, GPU side)"}
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", nargs="+", action="extend", required=True,
                        help="record files or folders; repeat the flag or list several (all are used)")
    parser.add_argument("--studies", action="append", default=[],
                        help="Optuna SQLite file of measured tuning trials (repeatable): whole-model samples")
    add_profile_argument(parser)
    parser.add_argument("--out", required=True)
    return parser


def add_profile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help="profile whose roofs place the records' layers (default: the embedded "
                                          "H200); another GPU's records need that GPU's profile")


def read_profile(path: str | None):
    """The --profile profile (the embedded H200 without one), or None after a one-line error on stderr."""
    from carm_advisor.errors import CarmError
    from carm_advisor.profiles.profile import load_profile

    try:
        return load_profile(path)
    except CarmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def parse_args(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """Parse; a --records path that does not exist is a one-line error."""
    args = parser.parse_args(argv)
    missing = [p for p in args.records if not Path(p).exists()]
    if missing:
        parser.error(f"Expected existing record files or folders, Received: {', '.join(missing)}")
    missing = [p for p in getattr(args, "studies", None) or [] if not Path(p).is_file()]
    if missing:
        parser.error(f"Expected existing Optuna SQLite study files, Received: {', '.join(missing)}")
    return args


def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)
    from carm_advisor.learn import fit_runs

    runs = load_runs(args.records)
    if not runs:
        print(f"no RunMeasurement records with a model name under {args.records}", file=sys.stderr)
        return 2
    profile = read_profile(args.profile)
    if profile is None:
        return 2
    calibration = fit_runs(runs, profile)
    add_studies(calibration, args.studies, profile)
    floor = launch_floor(calibration.provenance.get("device"))
    if floor:
        calibration.provenance["kernel_floor"] = floor
    calibration.provenance["command"] = " ".join(["python", *sys.argv])
    calibration.save(args.out)
    print(f"{len(calibration.samples)} layer samples, {len(calibration.whole)} whole-model samples -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
