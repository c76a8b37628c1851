"""Calibrated-prediction error on models the calibration never saw (leave one model out), offline on a CPU.

    python benchmarks/prediction_accuracy.py --records DIR [--out benchmarks/results] [--batch-size 64]

For each model in the records, the calibration is fitted on the OTHER models' records only
(carm_advisor/calibration.py) and predicts this model's layers and whole-model time; errors are
|calibrated - measured| / measured. Per-layer: the median over every measured layer (torch: the one
profiled pass or CUDA-graph replays; jax: each layer jitted alone). Whole model: torch eager
(`inference`) and from one CUDA graph (`inference_graph`), jax jitted (`inference`).
Writes <out>/<gpu>-prediction-accuracy-<date>.json with {"models", "per_layer_median_abs_err",
"whole_model_abs_err", "n", "command", ...}: each figure is given per backend and for all together.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import result_path, write  # noqa: E402
from fit_calibration import load_runs  # noqa: E402


def rows_by_run(runs: list, build=None) -> list[list]:
    """Each run's CARM rows with its measurement merged; one model build per (model, precision, layout)."""
    import dataclasses

    import keras

    from carm_advisor.calibration import GPU_TIME_EXECUTIONS, rows_for_run
    from carm_advisor.model_loader import load_model

    built: dict[tuple, object] = {}
    out = []
    for run in runs:
        key = (run.model_name, run.precision, run.layout)
        if key not in built:
            keras.config.set_image_data_format(run.layout)
            built[key] = build(run) if build else load_model(run.model_name, precision=run.precision)[0]
        run = dataclasses.replace(run, layers=[m for m in run.layers if m.execution in GPU_TIME_EXECUTIONS])
        out.append(rows_for_run(run, model=built[key]))
    return out


def _err(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return abs(predicted - measured) / measured


def evaluate(runs: list, rows: list[list], batch_size: int | None = None) -> dict:
    """Leave-one-model-out errors. `rows[i]` are runs[i]'s rows (bound + measured)."""
    from carm_advisor.calibration import Calibration, apply_calibration, layer_execution, samples_from_rows, whole_from_run

    full = Calibration()
    for run, rs in zip(runs, rows):
        full = full.extended(Calibration(samples_from_rows(rs, run.backend, run.model_name, layer_execution(run)),
                                         whole_from_run(run, rs, run.model_name)))
    models = sorted({r.model_name for r in runs})
    layer_errs: dict[str, list[float]] = {}
    per_model_layer: dict[str, list[float]] = {}
    whole_errs: dict[str, list[float]] = {}
    details = []
    for run, rs in zip(runs, rows):
        if batch_size is not None and run.batch_size != batch_size:
            continue
        if run.settings.get("method") == "layer-windows" and run.backend == "torch":
            continue  # the torch windows files check the profiler; the profiled file is this config's record
        calib = full.without_model(run.model_name)
        apply_calibration(rs, calib, run.backend)
        errs = [e for e in (_err(r.calibrated_time_s, r.time_s) for r in rs if r.measured) if e is not None]
        layer_errs.setdefault(run.backend, []).extend(errs)
        per_model_layer.setdefault(f"{run.model_name}/{run.backend}", []).extend(errs)
        entry = {"model": run.model_name, "backend": run.backend, "precision": run.precision,
                 "batch_size": run.batch_size, "layers": len(errs),
                 "per_layer_median_abs_err": statistics.median(errs) if errs else None, "whole": {}}
        for m in (run.inference, run.inference_graph):
            if m is None or not m.time_s:
                continue
            predicted = calib.whole_time_s(rs, run.backend, m.execution)
            e = _err(predicted, m.time_s)
            entry["whole"][m.execution] = {"measured_s": m.time_s, "calibrated_s": predicted, "abs_err": e}
            if e is not None:
                whole_errs.setdefault(f"{run.backend}/{m.execution}", []).append(e)
        details.append(entry)

    def med(d: dict[str, list[float]]) -> dict[str, float | None]:
        out = {k: statistics.median(v) if v else None for k, v in sorted(d.items())}
        every = [x for v in d.values() for x in v]
        out["all"] = statistics.median(every) if every else None
        return out

    return {
        "models": models,
        "per_layer_median_abs_err": med(layer_errs),
        "per_layer_median_abs_err_by_model": med(per_model_layer),
        "whole_model_abs_err": med(whole_errs),
        "whole_model_max_abs_err": {k: max(v) for k, v in sorted(whole_errs.items()) if v},
        "n": {"records": len(details), "layers": {k: len(v) for k, v in sorted(layer_errs.items())},
              "whole_models": {k: len(v) for k, v in sorted(whole_errs.items())}},
        "method": "leave one model out: each model predicted by a calibration fitted on the other models' records",
        "details": details,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", nargs="+", required=True)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--batch-size", type=int, help="evaluate only records at this batch size (fit on all)")
    args = parser.parse_args(argv)
    runs = load_runs(args.records)
    if len({r.model_name for r in runs}) < 2:
        print(f"leave-one-model-out needs records of at least two models under {args.records}", file=sys.stderr)
        return 2
    doc = evaluate(runs, rows_by_run(runs), args.batch_size)
    gpu = (runs[0].device or {}).get("name") or "gpu"
    path = write(result_path(args.out, gpu, "prediction-accuracy"), doc)
    print(f"per-layer median abs err {doc['per_layer_median_abs_err']}; whole model {doc['whole_model_abs_err']} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
