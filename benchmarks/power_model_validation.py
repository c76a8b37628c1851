"""Validate the power model fitted on the benchmark sweep alone against measured layers it never saw.

    python benchmarks/power_model_validation.py --records DIR_OR_FILE [...] --ceilings RUN.json [...] \
        [--profile PROFILE.json] [--out DIR] [--drop NAME,...]

--ceilings: ceilings runs (benchmarks/results/<gpu>-ceilings-*.json or a measured profile); the power
model is fitted over every benchmark row with a >= 0.9 s power window (carm/power_fit.py). --records:
per-layer measurements (RunMeasurement JSON, schema carm-advisor/measurements/1, or the layer reports
that benchmarks/vgg16_layers.py writes); the same run recorded twice is counted once.

Per layer the prediction is the power model at the layer's CARM operating point (its roofs' rates at
the default clock, the power limit as a third roof: carm/dvfs.py), compared with the power measured
over its energy windows; the energy is that power times the MEASURED time ("energy given the measured
time"); the time is the CARM bound (no calibration: far below the measured time, reported as such).
Whole models: time-weighted predicted power of the layers against the measured whole-model power.
Writes <out>/<gpu>-power-model-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import result_path, write  # noqa: E402

MEASUREMENTS_SCHEMA = "carm-advisor/measurements/1"


def fit_from_runs(docs: list[dict], drop: set[str]):
    """One fit over every ceilings run given (their benchmark rows), with the runs' idle power and limit."""
    from carm_advisor.carm.power_fit import fit_power_sweep, records_from_benchmarks

    records, idle, limit, f0 = [], [], [], []
    for doc in docs:
        records += [r for r in records_from_benchmarks(doc.get("benchmarks") or []) if r.name not in drop]
        device = doc.get("device") or {}
        pm = doc.get("power_model") or {}
        idle.append(device.get("idle_power_w") or pm.get("constant_w"))
        limit.append(device.get("power_limit_w") or pm.get("power_limit_w"))
        f0.append(device.get("sm_clock_max_mhz") or device.get("max_sm_clock_mhz"))
    known = [x for x in idle if x]
    limits = [x for x in limit if x]
    return fit_power_sweep(records, statistics.median(known) if known else None, max(x for x in f0 if x),
                           min(limits) if limits else None), (min(limits) if limits else None)


def power_model_of(fit, power_limit_w):
    from carm_advisor.carm.power_model import PowerModel

    return PowerModel(constant_w=fit.constant_w, joules_per_flop=fit.joules_per_flop,
                      joules_per_byte=fit.joules_per_byte, power_limit_w=power_limit_w,
                      data_factor=fit.data_factor, voltage=fit.voltage, fit=fit.quality)


def _layer_rows_from_report(doc: dict) -> list[dict]:
    return [{"name": l["name"], "type": l["type"], "flops": l["flops"], "bytes": l["bytes"], "path": l["path"],
             "level": l["level"], "time_s": l.get("time_s"), "power_w": l.get("power_w"),
             "energy_j": l.get("energy_j"), "sm_clock_mhz": l.get("sm_clock_mhz")}
            for l in doc["layers"] if l.get("known", True)]


def _layer_rows_from_record(doc: dict, profile) -> list[dict]:
    """Analytic costs of a RunMeasurement's model (built on the CPU), joined with its measured layers."""
    import keras

    from carm_advisor.predict import compute_path, memory_level
    from carm_advisor.mapping import map_model
    from carm_advisor.model_loader import load_model

    keras.config.set_image_data_format(doc["layout"])
    model, _ = load_model(doc.get("model_name") or "vgg16", precision=doc["precision"])
    costs = {c.name: c for c in map_model(model, batch_size=doc["batch_size"])}
    paths = set(profile.compute_roofs())
    out = []
    for m in doc["layers"]:
        c = costs.get(m["name"])
        if c is None or not c.known:
            continue
        out.append({"name": m["name"], "type": m["type"], "flops": c.flops, "bytes": c.bytes,
                    "path": compute_path(c, doc["math_mode"], paths), "level": memory_level(c, profile.l2_usable_bytes),
                    "time_s": m.get("time_s"), "power_w": m.get("power_w"), "energy_j": m.get("energy_j"),
                    "sm_clock_mhz": m.get("sm_clock_mhz")})
    return out


def load_runs(paths: list[Path], profile) -> list[dict]:
    """Every layer run under `paths` (files or folders), one per measured run."""
    files = []
    for p in paths:
        files += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    runs, seen = [], set()
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list) or "batch_size" not in doc:
            continue
        inference = doc.get("inference") or {}
        key = (doc.get("backend"), doc.get("precision"), doc.get("batch_size"), doc.get("layout"),
               round(inference.get("time_s") or 0.0, 12))
        if key in seen:
            continue
        seen.add(key)
        is_record = doc.get("schema") == MEASUREMENTS_SCHEMA
        rows = _layer_rows_from_record(doc, profile) if is_record else _layer_rows_from_report(doc)
        runs.append({"file": str(f), "model": doc.get("model_name") or _model_name(doc), "backend": doc.get("backend"),
                     "precision": doc.get("precision"), "batch_size": doc.get("batch_size"),
                     "layout": doc.get("layout"), "inference": inference, "layers": rows})
    return runs


def _model_name(doc: dict) -> str:
    return "vgg16" if "vgg16" in str(doc.get("command", "")) else str(doc.get("model", {}).get("name", "unknown"))


def validate(runs: list[dict], carm, pm, f0_mhz: float) -> dict:
    from carm_advisor.carm.dvfs import Work, predict_at_clock

    layers, models = [], []
    for run in runs:
        weighted_w = measured_t = pred_t = 0.0
        for l in run["layers"]:
            if not l.get("time_s") or not l.get("power_w") or not (l["flops"] or l["bytes"]):
                continue
            if l["path"] not in carm.peak_flops_per_s or l["level"] not in carm.bandwidth_bytes_per_s:
                continue
            p = predict_at_clock(carm, pm, Work(l["flops"], l["bytes"], l["path"], l["level"]), f0_mhz, f0_mhz)
            energy_j = p.power_w * l["time_s"]
            measured_e = l.get("energy_j") or l["power_w"] * l["time_s"]
            layers.append({"run": Path(run["file"]).name, "model": run["model"], "backend": run["backend"],
                           "precision": run["precision"], "batch_size": run["batch_size"], "layer": l["name"],
                           "type": l["type"], "path": l["path"], "level": l["level"],
                           "measured_power_w": l["power_w"], "predicted_power_w": p.power_w,
                           "power_err": p.power_w / l["power_w"] - 1,
                           "measured_energy_j": measured_e, "predicted_energy_j_given_time": energy_j,
                           "energy_err": energy_j / measured_e - 1,
                           "measured_time_s": l["time_s"], "predicted_time_s": p.time_s,
                           "time_err": p.time_s / l["time_s"] - 1,
                           "measured_sm_clock_mhz": l.get("sm_clock_mhz"), "predicted_sm_clock_mhz": p.sm_clock_mhz,
                           "power_capped": p.power_capped})
            weighted_w += p.power_w * l["time_s"]
            measured_t += l["time_s"]
            pred_t += p.time_s
        inf = run["inference"]
        if measured_t and inf.get("power_w"):
            power_w = weighted_w / measured_t
            models.append({"run": Path(run["file"]).name, "model": run["model"], "backend": run["backend"],
                           "precision": run["precision"], "batch_size": run["batch_size"],
                           "measured_power_w": inf["power_w"], "predicted_power_w": power_w,
                           "power_err": power_w / inf["power_w"] - 1,
                           "measured_energy_j": inf.get("energy_j"),
                           "predicted_energy_j_given_time": power_w * inf["time_s"],
                           "energy_err": (power_w * inf["time_s"] / inf["energy_j"] - 1) if inf.get("energy_j") else None,
                           "measured_time_s": inf["time_s"], "predicted_time_s": pred_t,
                           "time_err": pred_t / inf["time_s"] - 1})
    return {"layers": layers, "models": models, "validation": summary(layers, models)}


def capped_observations(runs: list[dict], power_limit_w: float, carm, exclude_run: str | None = None) -> list:
    """Layers measured at >= 95% of the power limit, with the clock they sustained there."""
    from carm_advisor.carm.power_fit import CappedClock

    return [CappedClock(l["flops"], l["bytes"], l["path"], l["level"], l["sm_clock_mhz"])
            for run in runs if run["file"] != exclude_run for l in run["layers"]
            if l.get("power_w") and l.get("sm_clock_mhz") and l["power_w"] >= 0.95 * power_limit_w
            and l["path"] in carm.peak_flops_per_s and l["level"] in carm.bandwidth_bytes_per_s]


def voltage_from_clocks(runs: list[dict], records, idle_w, f0_mhz, power_limit_w, carm, pm_prior=None) -> dict:
    """The voltage curve fitted to the clocks of capped layers, and its leave-one-run-out clock error."""
    import statistics as st

    from carm_advisor.carm.dvfs import Work, predict_at_clock
    from carm_advisor.carm.power_fit import fit_voltage_to_capped_clocks

    fit, err = fit_voltage_to_capped_clocks(records, idle_w, f0_mhz, power_limit_w, carm,
                                            capped_observations(runs, power_limit_w, carm))
    held_out = []
    for run in runs:
        test = capped_observations([run], power_limit_w, carm)
        train = capped_observations(runs, power_limit_w, carm, run["file"])
        if not test or not train:
            continue
        train_fit, _ = fit_voltage_to_capped_clocks(records, idle_w, f0_mhz, power_limit_w, carm, train)
        pm = power_model_of(train_fit, power_limit_w)
        held_out += [predict_at_clock(carm, pm, Work(o.flops, o.bytes, o.path, o.level), f0_mhz, f0_mhz).sm_clock_mhz
                     - o.sm_clock_mhz for o in test]
    observed = capped_observations(runs, power_limit_w, carm)
    prior_err = st.median(abs(predict_at_clock(carm, pm_prior, Work(o.flops, o.bytes, o.path, o.level), f0_mhz,
                                               f0_mhz).sm_clock_mhz - o.sm_clock_mhz) for o in observed) \
        if pm_prior is not None and observed else None
    return {"dvfs": fit.voltage.to_dict(), "observations": fit.quality["voltage_fit"]["observations"],
            "median_abs_clock_err_mhz_sweep_fit_curve": prior_err,
            "median_abs_clock_err_mhz_in_sample": err,
            "median_abs_clock_err_mhz_leave_one_run_out": st.median(abs(e) for e in held_out) if held_out else None,
            "n_held_out": len(held_out),
            "note": "fitted to layer clocks under the cap (natural throttling); the power validation above uses "
                    "the sweep fit alone, whose capped power is the limit whatever the curve"}


def _median_abs(values) -> float | None:
    values = [abs(v) for v in values if v is not None]
    return statistics.median(values) if values else None


def noise_floor(layers: list[dict]) -> dict:
    """How far one layer's measured power lies from its median over the runs that measured the same
    configuration: the error no power model can go below on these windows."""
    groups: dict[tuple, list[float]] = {}
    for r in layers:
        groups.setdefault((r["model"], r["backend"], r["precision"], r["batch_size"], r["layer"]), []).append(
            r["measured_power_w"])
    devs = [p / statistics.median(ps) - 1 for ps in groups.values() if len(ps) >= 2 for p in ps]
    return {"power_median_abs_dev": _median_abs(devs), "n": len(devs),
            "configurations": sum(1 for ps in groups.values() if len(ps) >= 2)}


def capped_clock_error(layers: list[dict]) -> dict:
    """Layers predicted at the power limit: the SM clock the model says they sustain against the one
    measured (a check of the voltage curve, fitted or assumed)."""
    rows = [r for r in layers if r["power_capped"] and r.get("measured_sm_clock_mhz")]
    errs = [r["predicted_sm_clock_mhz"] - r["measured_sm_clock_mhz"] for r in rows]
    return {"n": len(rows), "median_abs_err_mhz": _median_abs(errs),
            "median_err_mhz": statistics.median(errs) if errs else None}


def summary(layers: list[dict], models: list[dict]) -> dict:
    worst = sorted(layers, key=lambda r: -abs(r["power_err"]))[:5]
    return {
        "n": len(layers),
        "power_median_abs_err": _median_abs(r["power_err"] for r in layers),
        "energy_median_abs_err": _median_abs(r["energy_err"] for r in layers),
        "time_median_abs_err": _median_abs(r["time_err"] for r in layers),
        "worst": [{k: r[k] for k in ("run", "layer", "measured_power_w", "predicted_power_w", "power_err")} for r in worst],
        "models": {"n": len(models), "power_median_abs_err": _median_abs(r["power_err"] for r in models),
                   "energy_median_abs_err": _median_abs(r["energy_err"] for r in models),
                   "time_median_abs_err": _median_abs(r["time_err"] for r in models)},
        "power_median_abs_err_layers_over_100us": _median_abs(r["power_err"] for r in layers
                                                               if r["measured_time_s"] >= 1e-4),
        "measurement_noise_floor": noise_floor(layers),
        "capped_sm_clock": capped_clock_error(layers),
        "coverage": {"models": sorted({r["model"] for r in layers}), "backends": sorted({r["backend"] for r in layers}),
                     "precisions": sorted({r["precision"] for r in layers}),
                     "batch_sizes": sorted({r["batch_size"] for r in layers})},
        "notes": "power: predicted at the layer's CARM operating point with the power limit, from the sweep fit alone; "
                 "energy: predicted power x measured time; time: the CARM bound (uncalibrated), so its error is the "
                 "layers' distance below their roofs, not a power-model error",
    }


def main(argv: list[str] | None = None) -> int:
    from carm_advisor.profiles.profile import load_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=Path, action="append", required=True)
    ap.add_argument("--ceilings", type=Path, action="append", required=True)
    ap.add_argument("--profile", help="profile whose roofs place the layers (default: the embedded H200)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--fit-clocks", action="store_true",
                    help="also fit the voltage curve to the clocks of layers measured at the power limit "
                         "(leave-one-run-out clock error)")
    ap.add_argument("--drop", default="", help="benchmark rows to leave out of the fit, comma-separated")
    args = ap.parse_args(argv)
    for p in args.records + args.ceilings:
        if not p.exists():
            print(f"error: not found: {p}", file=sys.stderr)
            return 2
    profile = load_profile(args.profile)
    docs = [json.loads(p.read_text()) for p in args.ceilings]
    drop = {n.strip() for n in args.drop.split(",") if n.strip()}
    drop |= set(((profile.provenance.get("measured") or {}).get("dropped") or {}))
    fit, limit = fit_from_runs(docs, drop)
    pm = power_model_of(fit, limit)
    runs = load_runs(args.records, profile)
    result = validate(runs, profile.carm(), pm, fit.voltage.f0_mhz)
    doc = {"device": {"name": profile.name, **{k: profile.device.get(k) for k in ("power_limit_w", "sm_clock_max_mhz")}},
           "fit": {**fit.to_dict(), "power_limit_w": limit, "from": [str(p) for p in args.ceilings],
                   "left_out": sorted(drop)},
           "validation": result["validation"], "models": result["models"], "layers": result["layers"]}
    if args.fit_clocks and limit:
        from carm_advisor.carm.power_fit import records_from_benchmarks

        records = [r for d in docs for r in records_from_benchmarks(d.get("benchmarks") or []) if r.name not in drop]
        doc["voltage_from_capped_clocks"] = voltage_from_clocks(runs, records, fit.constant_w, fit.voltage.f0_mhz,
                                                                limit, profile.carm(), pm)
    path = write(result_path(args.out, profile.name, "power-model"), doc)
    v = result["validation"]
    fmt = lambda x: "-" if x is None else f"{x:.1%}"  # noqa: E731
    print(f"fit: n={fit.quality['n']} R^2={fit.quality['r2']:.3f} median {fmt(fit.quality['median_abs_rel_err'])} "
          f"max {fmt(fit.quality['max_abs_rel_err'])}")
    print(f"layers n={v['n']}: power {fmt(v['power_median_abs_err'])}, energy given time {fmt(v['energy_median_abs_err'])}, "
          f"time (CARM bound) {fmt(v['time_median_abs_err'])}; models n={v['models']['n']}: power "
          f"{fmt(v['models']['power_median_abs_err'])}, energy {fmt(v['models']['energy_median_abs_err'])}")
    if "voltage_from_capped_clocks" in doc:
        vc = doc["voltage_from_capped_clocks"]
        print(f"clock error of the sweep fit's curve on the same layers: "
              f"{vc['median_abs_clock_err_mhz_sweep_fit_curve']:.0f} MHz")
        print(f"voltage curve from capped clocks: knee {vc['dvfs']['f_knee_mhz']:.0f} MHz at {vc['dvfs']['v_knee']:.2f}; "
              f"clock error {vc['median_abs_clock_err_mhz_in_sample']:.0f} MHz in sample, "
              f"{vc['median_abs_clock_err_mhz_leave_one_run_out']:.0f} MHz leave-one-run-out (n={vc['n_held_out']})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
