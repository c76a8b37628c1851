"""Calibrated-prediction error on models the calibration never saw (leave one model out), offline on a CPU.

    python benchmarks/prediction_accuracy.py --records DIR [--records DIR ...] [--out benchmarks/results] [--batch-size 64]
        [--train-models vgg16,resnet50,mobilenetv2] [--studies DB ...] [--profile FILE] [--eager-host-forms]

For each model in the records, the calibration is fitted on the OTHER models' records only
(carm_advisor/calibration/) and predicts this model's layers and whole-model time (leave one model
out); with --train-models, one calibration fitted on the named models predicts every other model
(held out), and leave-one-model-out over the named models is written beside it. Errors are
|calibrated - measured| / measured. Per-layer: the median over every measured layer (torch: the one
profiled pass or CUDA-graph replays; jax: each layer jitted alone). Whole model: torch eager
(`inference`) and from one CUDA graph (`inference_graph`), jax jitted (`inference`).
Writes <out>/<gpu>-prediction-accuracy-<date>.json with {"models", "per_layer_median_abs_err",
"whole_model_abs_err", "n", "command", ...}: each figure is given per backend and for all together.
--studies DB: measured tuning trials as whole-model samples of their model (fit_calibration.py --studies);
they join the training set as any record of that model does (never evaluated themselves).
--eager-host-forms: the torch eager whole models also with the host's time per layer call taken as the median over
the models of each model's median host-paced record (MedianHostCalibration) beside the product's fastest record,
and the fastest record's host time over the calibrated rows alone (CalibratedRowsHostCalibration) in place of every
mapped row: eager_host_forms in the file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import result_path, write  # noqa: E402
from fit_calibration import (  # noqa: E402
    add_profile_argument,
    add_studies,
    launch_floor,
    load_runs,
    parse_args,
    read_profile,
    record_files,
)

from carm_advisor.calibration import Calibration  # noqa: E402

# What the figures of a result file rest on (written into it as "notes").
NOTES = [
    ("--studies: measured tuning trials join the training set as whole-model samples of their model; a model with "
     "trials of its own (VGG16) is predicted from them where it is a training model, never evaluated on them"),
    ("SeparableConv2D: the one measured call is split over its depthwise and pointwise rows in proportion to their "
     "CARM bound times (learn.part_shares), so those layers are evaluated"),
    ("each model is built after keras.backend.clear_session() (rows_by_run): auto-named layers ('conv2d_7') then "
     "carry the names the recording process gave them"),
]


class MedianHostCalibration(Calibration):
    """The torch eager host time per layer call as the median over the models of each model's median over its
    host-paced records (every model weighing one), in place of the product's fastest record
    (Calibration.host_per_call_s)."""

    @staticmethod
    def host_per_call_s(host_paced):
        by_model: dict[str, list[float]] = {}
        for w in host_paced:
            if w.layer_calls:
                by_model.setdefault(w.model, []).append(w.time_s / w.layer_calls)
        if not by_model:
            return None, "no host-paced record"
        return (statistics.median(statistics.median(v) for v in by_model.values()),
                f"median over {len(by_model)} models of their host-paced records' median")


class CalibratedRowsHostCalibration(Calibration):
    """The torch eager host term over the rows with a calibrated time alone, in place of the product's every mapped
    row (Calibration.whole_time_s): a Dropout, a Reshape or a Cast with no CARM bound left out of the host's calls."""

    def whole_time_s(self, rows, backend, execution, model=None):
        if execution != "eager":
            return super().whole_time_s(rows, backend, execution, model)
        calibrated = [r for r in rows if getattr(r, "calibrated_time_s", None)]
        return super().whole_time_s(calibrated, backend, execution, model)


def rows_by_run(runs: list, build=None, profile=None) -> list[list]:
    """Each run's CARM rows (on `profile`'s roofs, default the embedded H200) with its measurement merged; one model
    build per (model, precision, layout)."""
    import dataclasses

    import keras

    from carm_advisor.calibration import GPU_TIME_EXECUTIONS
    from carm_advisor.learn import rows_for_run
    from carm_advisor.models.loader import load_model

    built: dict[tuple, object] = {}
    out = []
    for run in runs:
        key = (run.model_name, run.precision, run.layout)
        if key not in built:
            keras.backend.clear_session()   # auto-named layers (InceptionV3's "conv2d_7") renumber from 0, as recorded
            keras.config.set_image_data_format(run.layout)
            built[key] = build(run) if build else load_model(run.model_name, precision=run.precision)[0]
        run = dataclasses.replace(run, layers=[m for m in run.layers if m.execution in GPU_TIME_EXECUTIONS])
        out.append(rows_for_run(run, profile, model=built[key]))
    return out


def _err(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return abs(predicted - measured) / measured


def full_calibration(runs: list, rows: list[list], studies: list[str] | None = None, profile=None):
    """A calibration from every run's measured rows (the models already built: no rebuild), the studies' samples
    on `profile`'s roofs as the rows are."""
    from carm_advisor.calibration import Calibration, layer_execution, layers_valid, samples_from_rows, whole_from_run

    full = Calibration()
    for run, rs in zip(runs, rows):
        samples = samples_from_rows(rs, run.backend, run.model_name, layer_execution(run)) if layers_valid(run) else []
        full = full.extended(Calibration(samples, whole_from_run(run, rs, run.model_name)))
    add_studies(full, studies or [], profile)
    devices = [(run.device or {}).get("name") for run in runs]
    floor = launch_floor(max(set(devices), key=devices.count)) if devices else None
    if floor:
        full.provenance["kernel_floor"] = floor
    return full


def evaluate(runs: list, rows: list[list], batch_size: int | None = None, train_models: list[str] | None = None,
             studies: list[str] | None = None, profile=None, full=None) -> dict:
    """Calibrated-prediction errors. `rows[i]` are runs[i]'s rows (bound + measured). `full`: the calibration of every
    run and study (full_calibration) when the caller has it already (of a Calibration subclass: another form).

    train_models None: leave one model out (each model predicted by a calibration fitted on the others).
    train_models given: one calibration fitted on those models' records predicts every OTHER model's
    (the held-out evaluation); the training models' own records are not evaluated."""
    from carm_advisor.calibration import layer_class, layers_valid
    from carm_advisor.predict import apply_calibration

    full = full if full is not None else full_calibration(runs, rows, studies, profile)
    train = set(train_models or ())
    fitted = full.with_models(train) if train_models else None
    evaluated = [(run, rs) for run, rs in zip(runs, rows) if run.model_name not in train]
    layer_errs: dict[str, list[float]] = {}
    per_model_layer: dict[str, list[float]] = {}
    whole_errs: dict[str, list[float]] = {}
    per_model_whole: dict[str, list[float]] = {}
    sources: dict[str, dict[str, int]] = {}
    unseen: dict[str, dict[str, Any]] = {}
    details = []
    for run, rs in evaluated:
        if batch_size is not None and run.batch_size != batch_size:
            continue
        if run.settings.get("method") == "layer-windows" and run.backend == "torch":
            continue  # the torch windows files check the profiler; the profiled file is this config's record
        calib = fitted if fitted is not None else full.without_model(run.model_name)
        apply_calibration(rs, calib, run.backend, profile)
        trained_classes = {s.layer_class for s in calib.samples if s.backend == run.backend}
        errs = []
        for r in rs if layers_valid(run) else ():   # layers timed at another precision: whole model only
            e = _err(r.calibrated_time_s, r.time_s) if r.measured else None
            if e is None:
                continue
            errs.append(e)
            found = calib.estimate(run.backend, r.type, r.dtype, r.predicted_time_s)
            source = found.source.split(" x ")[0] if found else "none"
            counts = sources.setdefault(run.backend, {})
            counts[source] = counts.get(source, 0) + 1
            if layer_class(r.type) not in trained_classes:
                u = unseen.setdefault(f"{run.backend}/{r.type}", {"sources": {}, "errs": []})
                u["sources"][found.label if found else "none"] = u["sources"].get(found.label if found else "none", 0) + 1
                u["errs"].append(e)
        layer_errs.setdefault(run.backend, []).extend(errs)
        per_model_layer.setdefault(f"{run.model_name}/{run.backend}", []).extend(errs)
        entry = {"model": run.model_name, "backend": run.backend, "precision": run.precision,
                 "batch_size": run.batch_size, "date": run.date, "layers": len(errs),
                 **({} if layers_valid(run) else {"layers_left_out": "timed at another precision than the model's "
                                                                     "(jit_layers_in_policy_dtype False)"}),
                 "per_layer_median_abs_err": statistics.median(errs) if errs else None, "whole": {}}
        for m in (run.inference, run.inference_graph):
            if m is None or not m.time_s:
                continue
            predicted = calib.whole_time_s(rs, run.backend, m.execution)
            e = _err(predicted, m.time_s)
            entry["whole"][m.execution] = {"measured_s": m.time_s, "calibrated_s": predicted, "abs_err": e,
                                           "source": calib.whole_describe(run.backend, m.execution, rs)}
            if e is not None:
                whole_errs.setdefault(f"{run.backend}/{m.execution}", []).append(e)
                per_model_whole.setdefault(f"{run.model_name}/{run.backend}/{m.execution}", []).append(e)
        details.append(entry)

    def med(d: dict[str, list[float]]) -> dict[str, float | None]:
        out = {k: statistics.median(v) if v else None for k, v in sorted(d.items())}
        every = [x for v in d.values() for x in v]
        out["all"] = statistics.median(every) if every else None
        return out

    def of(d: dict, backend: str) -> dict:
        return {k: v for k, v in d.items() if k.split("/")[0] == backend or f"/{backend}" in k}

    backends = sorted({e["backend"] for e in details})
    by_backend = {b: {"models": sorted({e["model"] for e in details if e["backend"] == b}),
                      "per_layer_median_abs_err": med(of(layer_errs, b))["all"],
                      "whole_model_abs_err": {k: v for k, v in med(of(whole_errs, b)).items() if k != "all"},
                      "whole_model_max_abs_err": {k: max(v) for k, v in sorted(of(whole_errs, b).items()) if v},
                      "n": {"records": sum(1 for e in details if e["backend"] == b), "layers": len(layer_errs.get(b, [])),
                            "whole_models": {k: len(v) for k, v in sorted(of(whole_errs, b).items())}}}
                  for b in backends}
    method = (f"held out: one calibration fitted on {', '.join(sorted(train))} predicts the other models"
              if train_models else "leave one model out: each model predicted by a calibration fitted on the other models' records")
    return {
        "models": sorted({e["model"] for e in details}),
        **({"train_models": sorted(train)} if train_models else {}),
        "per_layer_median_abs_err": med(layer_errs),
        "per_layer_median_abs_err_by_model": med(per_model_layer),
        "whole_model_abs_err": med(whole_errs),
        "whole_model_abs_err_by_model": med(per_model_whole),
        "whole_model_max_abs_err": {k: max(v) for k, v in sorted(whole_errs.items()) if v},
        "n": {"records": len(details), "layers": {k: len(v) for k, v in sorted(layer_errs.items())},
              "whole_models": {k: len(v) for k, v in sorted(whole_errs.items())}},
        "by_backend": by_backend,
        "calibration_sources": sources,
        "classes_not_in_training": {k: {"sources": v["sources"], "layers": len(v["errs"]),
                                        "median_abs_err": statistics.median(v["errs"])} for k, v in sorted(unseen.items())},
        "method": method,
        "details": details,
    }


def eager_host_forms(runs: list, rows: list[list], batch_size: int | None = None,
                     train_models: list[str] | None = None, studies: list[str] | None = None, profile=None) -> dict:
    """The torch eager whole-model time (as `evaluate` holds out: leave one model out, or the models outside
    `train_models`) with the product's host time per call ("fastest") and with MedianHostCalibration's
    ("median_of_models"): per form, median |error|, median signed error, n, how many too fast, the worst."""
    full = full_calibration(runs, rows, studies, profile)   # fitted once; each form reads its records its own way
    forms = {"fastest": full, "median_of_models": MedianHostCalibration(full.samples, full.whole, full.provenance),
             "fastest_calibrated_rows": CalibratedRowsHostCalibration(full.samples, full.whole, full.provenance)}
    table = {}
    for form, calibration in forms.items():
        doc = evaluate(runs, rows, batch_size, train_models, studies, profile, full=calibration)
        found = [e["whole"]["eager"] for e in doc["details"] if e["backend"] == "torch" and "eager" in e["whole"]]
        signed = [w["calibrated_s"] / w["measured_s"] - 1 for w in found if w.get("calibrated_s")]
        table[form] = {"n": len(signed), "time_median_abs_err": statistics.median(abs(x) for x in signed) if signed else None,
                       "time_median_signed_err": statistics.median(signed) if signed else None,
                       "too_fast": sum(1 for x in signed if x < 0),
                       "worst_abs_err": max((abs(x) for x in signed), default=None)}
    return {"in_use": "fastest", "forms": table}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", nargs="+", action="extend", required=True,
                        help="record files or folders; repeat the flag or list several (all are used)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--batch-size", type=int, help="evaluate only records at this batch size (fit on all)")
    parser.add_argument("--train-models", type=lambda v: [m.strip() for m in v.split(",") if m.strip()],
                        help="comma-separated models to fit on; every other model is evaluated (held out), and "
                             "leave-one-model-out runs over the training models beside it")
    parser.add_argument("--studies", action="append", default=[],
                        help="Optuna SQLite file of measured tuning trials (repeatable): whole-model training samples")
    parser.add_argument("--eager-host-forms", action="store_true",
                        help="also score the torch eager whole models with the median host time per call "
                             "(MedianHostCalibration) beside the product's: eager_host_forms in the file")
    add_profile_argument(parser)
    args = parse_args(parser, argv)
    profile = read_profile(args.profile)
    if profile is None:
        return 2
    runs = load_runs(args.records)
    models = {r.model_name for r in runs}
    if args.train_models:
        missing = sorted(set(args.train_models) - models)
        if missing or not models - set(args.train_models):
            print(f"Expected --train-models among the recorded models {sorted(models)} with at least one other "
                  f"model left to evaluate, Received: {','.join(args.train_models)}", file=sys.stderr)
            return 2
    elif len(models) < 2:
        print(f"leave-one-model-out needs records of at least two models under {args.records}", file=sys.stderr)
        return 2
    rows = rows_by_run(runs, profile=profile)
    if args.train_models:
        doc = evaluate(runs, rows, args.batch_size, args.train_models, args.studies, profile)
        train = [(run, rs) for run, rs in zip(runs, rows) if run.model_name in args.train_models]
        lomo = evaluate([r for r, _ in train], [rs for _, rs in train], args.batch_size, studies=args.studies,
                        profile=profile)
        doc["leave_one_model_out"] = {k: v for k, v in lomo.items() if k != "details"}
    else:
        doc = evaluate(runs, rows, args.batch_size, studies=args.studies, profile=profile)
    if args.eager_host_forms:
        doc["eager_host_forms"] = eager_host_forms(runs, rows, args.batch_size, args.train_models, args.studies,
                                                   profile)
        if args.train_models:
            train = [(run, rs) for run, rs in zip(runs, rows) if run.model_name in args.train_models]
            doc["leave_one_model_out"]["eager_host_forms"] = eager_host_forms(
                [r for r, _ in train], [rs for _, rs in train], args.batch_size, studies=args.studies, profile=profile)
    doc["profile"] = args.profile or "embedded nvidia_h200"
    doc["records"] = [str(f) for f in record_files(args.records)]
    doc["studies"] = args.studies
    doc["notes"] = NOTES
    gpu = (runs[0].device or {}).get("name") or "gpu"
    path = write(result_path(args.out, gpu, "prediction-accuracy"), doc)
    print(f"per-layer median abs err {doc['per_layer_median_abs_err']}; whole model {doc['whole_model_abs_err']} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
