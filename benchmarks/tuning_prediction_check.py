"""The predicted tuner against the measured one: for every configuration the H200 studies and grids
measured, the calibrated prediction a CPU-only `carm-advise tune` reports for it (tune/predicted.py:
ConfigPredictor.value_prediction) beside the measurement, in GFLOP/s per W and time per batch; the
median absolute error per backend and compiler, and how well the prediction ranks the configurations
(Spearman's rank correlation, predicted vs measured GFLOP/s per W).

    python benchmarks/tuning_prediction_check.py \
        --db benchmarks/results/nvidia-h200-vgg16-tuning-all-compilers-2026-12-03.db \
        --db benchmarks/results/nvidia-h200-vgg16-tuning-torch-2026-12-03.db \
        --db benchmarks/results/nvidia-h200-vgg16-grid-half-precision-2026-12-03.db \
        --out benchmarks/results/nvidia-h200-tuning-prediction-check-2026-12-04.json

Read this with its caveat: the shipped calibration (carm_advisor/profiles/nvidia_h200_calibration.json)
is fitted on the per-layer records of 2026-12-02..04 (vgg16, resnet50, mobilenetv2, xception,
efficientnetb0, inceptionv3, convnexttiny) AND on the whole-model times of these very tuning trials
(benchmarks/fit_calibration.py --studies: the jit and torch.compile fits T = t0 + bound / e): every VGG16
figure here is IN SAMPLE. This checks how well the fitted form follows the measurements across batch
size, precision, layout and compiler, not accuracy on an unseen model (benchmarks/prediction_accuracy.py
does that, on models held out).
Energy: the tuner's calibrated energy (calibrated time x the configuration's predicted power) and, for
comparison, the power model's "same work over a longer time" (P_const * T + dynamic energy).

Every figure comes from the files named: nothing is typed in.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write  # noqa: E402

CAVEAT = ("IN SAMPLE: the shipped calibration is fitted on the per-layer records of 2026-12-02..04 (vgg16 among "
          "them) and on the whole-model times of these tuning trials (fit_calibration.py --studies); this checks "
          "how the fitted form follows the measurements across batch, precision, layout and compiler, not "
          "accuracy on an unseen model (see prediction_accuracy.py for held-out models)")


def measured_rows(files: list[str]) -> list[dict]:
    """Every distinct measured configuration of every study in `files` (first non-repeat COMPLETE trial
    per study and key), with its measurement."""
    import optuna

    from carm_advisor.tune.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = []
    for f in files:
        storage = open_storage(str(f), "check")
        for summary in optuna.get_all_study_summaries(storage):
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            seen = set()
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                a = t.user_attrs
                m, key = a.get("measurement"), a.get("config_key")
                if not m or key is None or "repeat_of" in a or key in seen:
                    continue
                if (m.get("source") or "measured") != "measured" or not m.get("energy_j") or not m.get("time_s"):
                    continue
                seen.add(key)
                rows.append({"file": Path(f).name, "study": summary.study_name, "trial": t.number, "key": key,
                             "config": a["config"], "measured_time_s": m["time_s"],
                             "measured_gflops_per_watt": m["flops"] / m["energy_j"] / 1e9,
                             "measured_spread": m.get("energy_spread") if m.get("energy_spread") is not None
                             else m.get("time_spread"), "flops": m["flops"]})
    return rows


def rank(values) -> list[float]:
    """Ranks from 1, ties averaged (scipy.stats.rankdata where scipy is installed)."""
    try:
        from scipy.stats import rankdata

        return [float(r) for r in rankdata(values)]
    except ImportError:
        import numpy as np

        v = np.asarray(values, dtype=float)
        order = np.argsort(v, kind="mergesort")
        ranks = np.empty(len(v))
        ranks[order] = np.arange(1, len(v) + 1)
        for value in np.unique(v):   # ties: their mean rank
            tied = v == value
            ranks[tied] = ranks[tied].mean()
        return ranks.tolist()


def spearman(a, b) -> float | None:
    """Spearman's rank correlation: Pearson's (numpy.corrcoef) of the ranks; None under 3 points."""
    import numpy as np

    if len(a) < 3:
        return None
    ra, rb = rank(a), rank(b)
    if np.std(ra) == 0 or np.std(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _median_abs(errors):
    errors = [abs(e) for e in errors if e is not None and math.isfinite(e)]
    return statistics.median(errors) if errors else None


def check(rows: list[dict], predictor) -> dict:
    """Predicted beside measured for each row; errors are predicted / measured - 1."""
    from carm_advisor.trials.space import TrialConfig

    out = []
    for r in rows:
        cfg = TrialConfig.from_dict(r["config"])
        p = predictor.value_prediction(cfg)
        bound = predictor.predict(cfg)
        gfw = p.flops / p.energy_j / 1e9 if p.energy_j else None
        stretched = getattr(predictor, "stretched_energy_j", lambda c, t: None)(cfg, p.time_s)
        gfw_stretched = p.flops / stretched / 1e9 if stretched else None
        out.append({**r, "backend": cfg.backend, "compiler": cfg.compiler, "value_source": p.value_source,
                    "predicted_time_s": p.time_s, "predicted_gflops_per_watt": gfw,
                    "bound_time_s": bound.time_s,
                    "bound_gflops_per_watt": bound.flops / bound.energy_j / 1e9 if bound.energy_j else None,
                    "predicted_gflops_per_watt_stretched_energy": gfw_stretched,
                    "time_err": p.time_s / r["measured_time_s"] - 1,
                    "gflops_per_watt_err": gfw / r["measured_gflops_per_watt"] - 1 if gfw else None,
                    "gflops_per_watt_err_stretched_energy":
                        gfw_stretched / r["measured_gflops_per_watt"] - 1 if gfw_stretched else None})
    groups: dict[str, list[dict]] = {}
    for r in out:
        groups.setdefault(f"{r['backend']}/{r['compiler']}", []).append(r)
    groups = {"all": out, **dict(sorted(groups.items()))}
    per_group = {}
    for name, rs in groups.items():
        pred = [r["predicted_gflops_per_watt"] for r in rs]
        meas = [r["measured_gflops_per_watt"] for r in rs]
        ok = [(p, m) for p, m in zip(pred, meas) if p is not None]
        per_group[name] = {
            "n": len(rs),
            "median_abs_err_gflops_per_watt": _median_abs(r["gflops_per_watt_err"] for r in rs),
            "median_err_gflops_per_watt": statistics.median([r["gflops_per_watt_err"] for r in rs
                                                             if r["gflops_per_watt_err"] is not None] or [math.nan]),
            "median_abs_err_time_per_batch": _median_abs(r["time_err"] for r in rs),
            "median_err_time_per_batch": statistics.median([r["time_err"] for r in rs]),
            "median_abs_err_gflops_per_watt_stretched_energy":
                _median_abs(r["gflops_per_watt_err_stretched_energy"] for r in rs),
            "spearman_gflops_per_watt": spearman([p for p, _ in ok], [m for _, m in ok]),
            "spearman_time_per_sample": spearman(
                [r["predicted_time_s"] / r["config"]["batch_size"] for r in rs],
                [r["measured_time_s"] / r["config"]["batch_size"] for r in rs]),
        }
    best_measured = max(out, key=lambda r: r["measured_gflops_per_watt"]) if out else None
    by_pred = sorted(out, key=lambda r: -(r["predicted_gflops_per_watt"] or -math.inf))
    top = {
        "measured_best": best_measured and {k: best_measured[k] for k in
                                            ("key", "file", "measured_gflops_per_watt", "predicted_gflops_per_watt")},
        "predicted_best": by_pred and {k: by_pred[0][k] for k in
                                       ("key", "file", "measured_gflops_per_watt", "predicted_gflops_per_watt")},
        "predicted_rank_of_measured_best": (by_pred.index(best_measured) + 1) if best_measured else None,
        "measured_best_over_predicted_best_measured":
            best_measured["measured_gflops_per_watt"] / by_pred[0]["measured_gflops_per_watt"] if out else None,
    }
    return {"rows": out, "per_backend_compiler": per_group, "top": top, "time_vs_batch": time_vs_batch(out)}


def time_vs_batch(rows: list[dict]) -> dict:
    """Per backend/compiler/precision/layout measured at >= 3 batch sizes: a straight line through the
    measured (and the predicted) time per batch against the batch size (numpy.polyfit), the intercept
    being the fixed cost per call a prediction must have for the batch trend to come out right."""
    import numpy as np

    groups: dict[str, dict[int, list[dict]]] = {}
    for r in rows:
        c = r["config"]
        groups.setdefault(f"{c['backend']}/{c['compiler']}/{c['precision']}/{c['layout']}", {}) \
            .setdefault(c["batch_size"], []).append(r)
    out = {}
    for name, by_batch in sorted(groups.items()):
        if len(by_batch) < 3:
            continue
        b = np.array(sorted(by_batch), dtype=float)
        meas = np.array([statistics.median(r["measured_time_s"] for r in by_batch[int(x)]) for x in b])
        pred = np.array([by_batch[int(x)][0]["predicted_time_s"] for x in b])
        (ms, mi), (ps, pi) = np.polyfit(b, meas, 1), np.polyfit(b, pred, 1)
        out[name] = {"batch_sizes": b.astype(int).tolist(), "measured_s_per_sample": float(ms),
                     "measured_intercept_s": float(mi), "predicted_s_per_sample": float(ps),
                     "predicted_intercept_s": float(pi)}
    return out


def main(argv=None) -> int:
    start_s = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", action="append", required=True, help="Optuna SQLite file of measured trials (repeatable)")
    p.add_argument("--model", default="vgg16")
    p.add_argument("--out", required=True, help="JSON to write")
    args = p.parse_args(argv)
    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor

    rows = measured_rows(args.db)
    if not rows:
        raise SystemExit(f"no measured trials in {', '.join(args.db)}")
    predictor = ConfigPredictor(model_spec(args.model), calibration=True)
    doc = check(rows, predictor)
    calib = predictor.calibration
    doc.update({"model": args.model, "files": [Path(f).name for f in args.db], "caveat": CAVEAT,
                "profile": predictor.profile.name,
                "calibration": {"records": len((calib.provenance or {}).get("records", [])) if calib else 0,
                                "command": (calib.provenance or {}).get("command") if calib else None},
                "errors": "predicted / measured - 1", "wall_s": time.perf_counter() - start_s})
    path = write(Path(args.out), doc)
    print(f"{'backend/compiler':<22} {'n':>3} {'|err| GF/W':>10} {'|err| t':>8} {'|err| GF/W str.':>15} {'rho GF/W':>8}")
    for name, g in doc["per_backend_compiler"].items():
        def f(x, pct=True):
            return "-" if x is None or x != x else (f"{x:.0%}" if pct else f"{x:.2f}")
        print(f"{name:<22} {g['n']:>3} {f(g['median_abs_err_gflops_per_watt']):>10} "
              f"{f(g['median_abs_err_time_per_batch']):>8} {f(g['median_abs_err_gflops_per_watt_stretched_energy']):>15} "
              f"{f(g['spearman_gflops_per_watt'], False):>8}")
    t = doc["top"]
    print(f"measured best {t['measured_best']['key']} ({t['measured_best']['measured_gflops_per_watt']:.0f} GF/W measured, "
          f"{t['measured_best']['predicted_gflops_per_watt']:.0f} predicted); predicted best {t['predicted_best']['key']} "
          f"({t['predicted_best']['measured_gflops_per_watt']:.0f} measured); the measured best is predicted "
          f"#{t['predicted_rank_of_measured_best']} of {len(doc['rows'])}")
    print(f"caveat: {CAVEAT}\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
