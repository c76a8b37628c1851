"""VGG16 measured layer by layer on the GPU and placed on the CARM, beside the whole-model run.

    KERAS_BACKEND=torch python benchmarks/vgg16_layers.py --precision mixed_bfloat16 --layout channels_first \
        [--batch-size 64] [--counters] [--out DIR] [--record FILE] [--report FILE] [--plot FILE]

Writes benchmarks/results/<gpu>-vgg16-layers-<date>.json with the device, backend, batch size,
precision, the report's layers, the whole-model time, the sum of the layer times, the median ratio of
counter FLOPs to analytic FLOPs over conv and dense layers (with --counters), and the wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import device_record, result_path, write  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--layout", default="channels_first", choices=("channels_first", "channels_last"))
    parser.add_argument("--counters", action="store_true")
    parser.add_argument("--preset", default="standard")
    parser.add_argument("--no-graphs", action="store_true", help="time torch layers eagerly, not as CUDA graph replays")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--record", help="also save the raw measurement record (replayable) here")
    parser.add_argument("--report", help="also save the report JSON here")
    parser.add_argument("--plot", help="also save the CARM chart here")
    parser.add_argument("--tag", default="", help="suffix for the result file name")
    args = parser.parse_args()

    start = time.perf_counter()
    import keras

    import carm_advisor as advisor
    from carm_advisor.measure.run import measure_run
    from carm_advisor.models.loader import load_model
    from carm_advisor.power.nvml import open_gpu

    keras.config.set_image_data_format(args.layout)
    model, _ = load_model("vgg16", precision=args.precision)
    gpu = open_gpu(0)
    analyze_start = time.perf_counter()
    run = measure_run(model, batch_size=args.batch_size, gpu=gpu, preset=args.preset, counters=False, progress=True,
                      graphs=not args.no_graphs)
    analysis_wall_s = time.perf_counter() - analyze_start
    counters_wall_s = None
    if args.counters:
        from carm_advisor.measure.counters import measure_counters

        t0 = time.perf_counter()
        run.attach_counters(measure_counters(model, batch_size=args.batch_size))
        counters_wall_s = time.perf_counter() - t0
    if args.record:
        run.to_json(args.record)
    report = advisor.analyze(model, batch_size=args.batch_size, from_measurements=run, name="vgg16")
    report.print()
    d = report.to_dict()
    measured = {item.name: item for item in run.layers}
    ratios = [
        measured[row["name"]].counters["flops"] / row["flops"]
        for row in d["layers"]
        if row["name"] in measured and measured[row["name"]].counters and row["type"] in ("Conv2D", "Dense")
        and row["flops"]
    ]
    sum_layers = sum(r["time_s"] for r in d["layers"] if r["time_s"])
    model_time = (run.inference.time_s if run.inference else None)
    doc = {
        "device": {**device_record(gpu), **{k: v for k, v in (run.device or {}).items() if k not in ("name",)}},
        "backend": run.backend,
        "batch_size": args.batch_size,
        "precision": args.precision,
        "layout": args.layout,
        "math_mode": run.math_mode,
        "profile": {"name": report.profile.name, "source": report.profile.source},
        "layers": d["layers"],
        "model_time_s": model_time,
        "sum_layer_time_s": sum_layers,
        "sum_layers_vs_model": sum_layers / model_time if model_time else None,
        "model_graph_time_s": run.inference_graph.time_s if getattr(run, "inference_graph", None) else None,
        "sum_layers_vs_model_graph": (sum_layers / run.inference_graph.time_s
                                      if getattr(run, "inference_graph", None) else None),
        "layer_execution": sorted({m.execution for m in run.layers}),
        "inference": d["measurement"]["inference"] if d["measurement"] else None,
        "training_step": d["measurement"]["training_step"] if d["measurement"] else None,
        "totals": d["totals"],
        "counters_flops_vs_analytic": statistics.median(ratios) if ratios else None,
        "counters_flops_vs_analytic_per_layer": ratios,
        "measured_above_roof": [r["name"] for r in d["layers"] if r["bound"] == "above-roof"],
        "warnings": d["warnings"],
        "analysis_wall_s": analysis_wall_s,
        "counters_wall_s": counters_wall_s,
    }
    doc["wall_s"] = time.perf_counter() - start
    tag = f"vgg16-layers-{args.precision}-{args.layout}{('-' + args.tag) if args.tag else ''}"
    path = write(result_path(args.out, doc["device"]["name"] or "gpu", tag), doc)
    if args.report:
        report.to_json(args.report)
    if args.plot:
        report.plot(args.plot)
    print(f"wrote {path}: model {model_time} s (graph {doc['model_graph_time_s']}), layers {sum_layers} s, "
          f"ratio {doc['sum_layers_vs_model']} (graph {doc['sum_layers_vs_model_graph']}), {doc['layer_execution']}, "
          f"counters/analytic {doc['counters_flops_vs_analytic']}, wall {doc['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
