"""Turn a profile measured by `carm-advise ceilings` (and its side-by-side reference run) into the
recorded profile shipped with the package, keeping every figure as measured and saying where from.

    python benchmarks/embed_profile.py MEASURED_PROFILE.json CEILINGS_VS_REFERENCE.json OUT.json \
        [--drop 'GLOB=why' ...] [--launch-floor LAUNCH_FLOOR.json] [--power-fit sweep]

The shipped profiles (files under benchmarks/results; tests/test_profiles_build.py and
tests/test_power_model_validation.py rebuild each from them):
  carm_advisor/profiles/nvidia_h200.json: nvidia-h200-measured-profile-2026-12-02.json
    nvidia-h200-ceilings-2026-12-02.json --drop (the profile's provenance.measured.dropped) --power-fit sweep
    --power-sweep nvidia-h200-power-sweep-2026-12-03.json --duty nvidia-h200-power-model-duty-per-unit-2026-12-05.json.xz
  carm_advisor/profiles/nvidia_h100_80gb_hbm3.json: nvidia-h100-80gb-hbm3-characterisation-2026-12-06/
    {measured_profile.json, nvidia-h100-80gb-hbm3-ceilings-2026-12-06.json} --launch-floor
    nvidia-h100-80gb-hbm3-launch-floor-2026-12-07.json --power-fit sweep --power-sweep
    nvidia-h100-80gb-hbm3-characterisation-2026-12-06/nvidia-h100-80gb-hbm3-power-sweep-2026-12-06.json
    --duty nvidia-h100-80gb-hbm3-power-model-layout-copies-data-movement-2026-12-06.json.xz (nothing dropped: that
    run's HBM rows walk one slice per block, and its HBM read, write and TMA rows agree within 2%)
Input files under benchmarks/results are named by their path there (a record folder's file keeps its folder).

--launch-floor merges the "launch_floor" measured by benchmarks/launch_floor.py (on the same GPU) into
the profile and changes nothing else; without it (and without --power-fit sweep) the profile regenerates
byte for byte.

--drop leaves benchmarks found flawed after the run out of the roofs, power model and sweep, which are
then selected again from the run's own recorded figures (carm_advisor.measure.profile.reselect_recorded);
the reason is kept in the profile's provenance.

--power-fit sweep replaces the per-benchmark power model by the least-squares fit over every recorded
benchmark row with a >= 0.9 s power window (carm_advisor/carm/power_fit.py: energies per path and
level, zero/random data factors, voltage curve, fit quality: carm/power_fit.fit_power_runs, the fit
benchmarks/power_model_validation.py validates); --power-sweep FILE (repeatable) adds further runs' rows
to that fit (the power sweep of benchmarks/power_sweep.py). Without it the output is as before.

--duty FILE adds power_model.duty, the duty curve (a layer's power above the constant vs its time per call or,
its efficiency form, vs its CARM bound time / time per call: carm/power_model.DutyCurve) from a result of benchmarks/power_model_validation.py: the curve fitted on
every scored layer of that GPU against the power model the profile carries (shipped_power_model.duty_curves.
in_sample for the per-benchmark model, duty_curves.in_sample with --power-fit sweep), whose leave-one-
model-out figures the same file reports. predict.py's calibrated energy uses it. Where that result fitted the
layers on a Tensor Core path apart (power_model_validation.DUTY_BY_UNIT), their curve becomes
power_model.duty_tensor_core.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def result_name(path: Path) -> str:
    """How a profile's provenance names an input file: its path under benchmarks/results (a file in a record
    folder keeps its folder: nvidia-h100-80gb-hbm3-characterisation-2026-12-06/measured_profile.json), else its
    name."""
    try:
        return Path(path).resolve().relative_to(RESULTS).as_posix()
    except ValueError:
        return Path(path).name


def gpu_of(doc: dict) -> str:
    """The short name of the GPU a result was measured on ("NVIDIA H100 80GB HBM3" -> "H100")."""
    return str((doc.get("device") or {}).get("name") or "NVIDIA H200").removeprefix("NVIDIA ").split()[0]


def embed(measured: dict, side_by_side: dict, measured_name: str, side_name: str) -> dict:
    doc = dict(measured)
    doc["provenance"] = {
        "source": "recorded",
        "created": measured["provenance"].get("created"),
        "from": f"benchmarks/results/{measured_name} (carm-advise ceilings on the {gpu_of(measured)} test machine) and "
                f"benchmarks/results/{side_name} (the library references measured in the same run)",
        "measured": measured["provenance"],
        "notes": "Recorded profile shipped with the package: every ceiling was measured by the project's own "
                 "micro-benchmarks; on a GPU, carm-advise ceilings measures that GPU instead.",
    }
    doc["device"] = {k: v for k, v in measured["device"].items() if k != "uuid"}   # not this user's GPU
    doc["references"] = side_by_side.get("references")
    doc["ratios"] = {k: v for k, v in (side_by_side.get("ratios") or {}).items() if k not in DROPPED}
    sweep = doc.get("sweep")
    if sweep:   # runs 7-10 also derived a power-capped fitness from 50 ms power windows: too short to trust
        doc["sweep"] = {k: v for k, v in sweep.items() if k not in DROPPED}
        doc["sweep"]["points"] = [{k: v for k, v in p.items() if k not in DROPPED} for p in sweep.get("points", [])]
    doc["benchmarks"] = [{**b, "power_w": None} if b.get("kind") == "mixed" else b for b in doc.get("benchmarks", [])]
    return doc


def launch_floor_of(measured: dict, file_name: str) -> dict:
    """The profile's launch_floor from a benchmarks/launch_floor.py result, saying which file it came from."""
    floor = measured.get("launch_floor")
    if not isinstance(floor, dict) or "value_s" not in floor:
        raise SystemExit(f"{file_name}: expected a 'launch_floor' object with 'value_s' (benchmarks/launch_floor.py output)")
    provenance = {**floor.get("provenance", {}), "from": f"benchmarks/results/{file_name}",
                  "device": (measured.get("device") or {}).get("name"), "date": measured.get("date")}
    return {"value_s": floor["value_s"], "provenance": provenance}


def duty_of(validation: dict, file_name: str, sweep: bool) -> dict:
    """The profile's power_model.duty (and duty_tensor_core where the result fitted the Tensor Core layers' curve
    apart) from a power_model_validation.py result, saying where they came from: {"duty": ..., ["duty_tensor_core": ...]}."""
    import dataclasses

    from carm_advisor.carm.power_model import DutyCurve
    from carm_advisor.errors import ProfileError

    part = validation if sweep else validation.get("shipped_power_model") or {}
    curve = (part.get("duty_curves") or {}).get("in_sample")
    v = part.get("validation") or {}
    try:
        duty = DutyCurve.from_dict(curve) if isinstance(curve, dict) else None
    except ProfileError as exc:
        duty, why = None, f": {exc}"
    else:
        why = ""
    if duty is None:
        where = "duty_curves.in_sample" if sweep else "shipped_power_model.duty_curves.in_sample"
        raise SystemExit(f"{file_name}: expected {where}, a duty curve of carm/power_model.DutyCurve "
                         f"(benchmarks/power_model_validation.py output){why}")
    models = ((v.get("models") or part.get("models") or {}).get("headline") or {})
    figures = []
    if v.get("power_median_abs_err") is not None:
        figures.append(f"per-layer power median abs error {v['power_median_abs_err']:.1%} over n={v['n']} layers")
    if models.get("power_median_abs_err") is not None:
        figures.append(f"whole-model power {models['power_median_abs_err']:.1%} over n={models['n']}")
    if models.get("energy_per_sample_median_abs_err_calibrated_time") is not None:
        figures.append(f"whole-model energy per sample with the calibrated time "
                       f"{models['energy_per_sample_median_abs_err_calibrated_time']:.1%} over n={models['n']}")
    gpu = gpu_of(validation)
    source = (f"fitted on {gpu} layer records, leave-one-model-out validated (benchmarks/results/{file_name}"
              + (": " + ", ".join(figures) if figures else "") + ")")
    out = {"duty": dataclasses.replace(duty, source=source).to_dict()}

    def own_curve(raw, where: str, layers: str) -> dict:
        """A curve fitted on some of the layers (`layers`: which), its source saying so."""
        try:
            curve = DutyCurve.from_dict(raw)
        except ProfileError as exc:
            raise SystemExit(f"{file_name}: duty_curves.{where} is not a duty curve: {exc}") from None
        return dataclasses.replace(curve, source=source.replace(
            f"fitted on {gpu} layer records", f"fitted on the {gpu} layer records {layers}", 1)).to_dict()

    tensor_core = (part.get("duty_curves") or {}).get("tensor_core_in_sample")
    if tensor_core is not None:   # a curve of its own for the layers on a Tensor Core path (duty_unit_choice)
        out["duty_tensor_core"] = own_curve(tensor_core, "tensor_core_in_sample", "on a Tensor Core path")
    by_path = (part.get("duty_curves") or {}).get("by_path_in_sample")
    if by_path:   # a curve of its own for each compute path with enough layers (duty_path_choice)
        out["duty_by_path"] = {path: own_curve(curve, f"by_path_in_sample.{path}", f"on path {path}")
                               for path, curve in by_path.items()}
    return out


def sweep_power_model(measured: dict, drop: dict, sweeps: list[tuple[str, dict]] = (), measured_name: str = "") -> dict:
    """The power_model section fitted over the whole recorded sweep (the measured run's benchmark rows and
    those of every extra power sweep in `sweeps`, (file name, run); rows in `drop` left out)."""
    from carm_advisor.carm.power_fit import power_model_section

    date = ((measured.get("power_model") or {}).get("provenance") or {}).get("date")
    return power_model_section([measured, *(doc for _, doc in sweeps)], date, drop,
                               [f"benchmarks/results/{n}" for n in (measured_name, *(n for n, _ in sweeps))])


DROPPED = {"fitness_with_power_roof", "missed_with_power_roof", "sweep_fitness_with_power_roof",
           "power_bound_flops_per_s", "ratio_with_power_roof", "power_w"}


def main(argv: list[str]) -> int:
    import argparse
    import fnmatch

    from carm_advisor.measure.profile import reselect_recorded
    from carm_advisor.profiles.profile import profile_from_dict

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured", type=Path)
    ap.add_argument("side_by_side", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--drop", action="append", default=[], metavar="GLOB=WHY")
    ap.add_argument("--launch-floor", type=Path, metavar="FILE", help="JSON written by benchmarks/launch_floor.py")
    ap.add_argument("--power-fit", choices=("benchmark", "sweep"), default="benchmark",
                    help="benchmark: e = (P - idle) / rate of each roof's own run (as before); sweep: one "
                         "least-squares fit over every trustworthy row")
    ap.add_argument("--power-sweep", type=Path, action="append", default=[], metavar="FILE",
                    help="with --power-fit sweep: a further run whose benchmark rows join the fit (a power sweep "
                         "of benchmarks/power_sweep.py, a ceilings run of the same GPU); repeatable")
    ap.add_argument("--duty", type=Path, metavar="FILE",
                    help="JSON written by benchmarks/power_model_validation.py: adds its fitted duty curve")
    args = ap.parse_args(argv)
    measured = json.loads(args.measured.read_text())
    drop = {}
    for item in args.drop:
        pattern, _, why = item.partition("=")
        names = [b["name"] for b in measured["benchmarks"] if fnmatch.fnmatchcase(b["name"], pattern)]
        if not names or not why:
            ap.error(f"--drop {item!r}: expected GLOB=WHY matching a recorded benchmark")
        drop.update({n: why for n in names})
    if drop:
        measured = reselect_recorded(measured, drop)
    side = json.loads(args.side_by_side.read_text())
    doc = embed(measured, side, result_name(args.measured), result_name(args.side_by_side))
    if args.launch_floor:
        doc["launch_floor"] = launch_floor_of(json.loads(args.launch_floor.read_text()), result_name(args.launch_floor))
    if args.power_fit == "sweep":
        doc["power_model"] = sweep_power_model(measured, drop, [(result_name(p), json.loads(p.read_text()))
                                                                for p in args.power_sweep], result_name(args.measured))
    elif args.power_sweep:
        ap.error("--power-sweep joins the sweep fit: it needs --power-fit sweep")
    if args.duty:
        from carm_advisor.files import read_json

        doc["power_model"] = {**doc["power_model"],
                              **duty_of(read_json(args.duty), result_name(args.duty), args.power_fit == "sweep")}
    profile = profile_from_dict(doc, origin=str(args.out))   # validate before writing
    if drop:   # the ratios to the references, of the roofs selected again
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from ceilings_vs_reference import ratios

        doc["ratios"] = {k: v for k, v in ratios(profile, side["references"]).items() if k not in DROPPED}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}" + (f" ({len(drop)} benchmarks dropped)" if drop else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
