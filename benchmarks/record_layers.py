"""Record per-layer and whole-model measurements (RunMeasurement JSON, one file per configuration) under a time budget.

    python benchmarks/record_layers.py --models vgg16,resnet50,mobilenetv2 \
        --precisions float32,mixed_bfloat16,mixed_float16 --batch-sizes 32,64,128 --backends torch,jax \
        --budget-s 240 --out DIR [--dry]

What each configuration records (`<model>-<backend>-<precision>-<layout>-b<batch>.json` in DIR):
- torch: every layer's time from ONE profiled eager pass (measure/profiled.py, execution "profiled"),
  the whole model eager (`inference`) and replayed from one CUDA graph (`inference_graph`); layer
  energy by time share of the graph replay's energy (settings.layer_energy says so).
  For the models in --torch-windows (default vgg16) a second file `...-windows.json` holds each layer
  replayed alone from a CUDA graph in short windows: a real per-layer power and a check of the profiler.
- jax: each distinct layer call jitted alone in short windows (identical calls measured once, real
  per-layer power and energy), and the whole model under jax.jit (`inference`).
Every layer record carries time_s, energy_j, power_w, sm_clock_mhz (None only without a GPU).

Order: batch 64 first, then the other batch sizes; within a batch, precision by precision, the
models round-robin, so a budget cut leaves the most comparable set. One child process per backend
(Keras picks its backend at import); torch gets --torch-share of the budget and jax the rest.
Resumable: a configuration whose file exists in DIR is skipped. Stops cleanly at the budget: a
configuration that would start after it does not start; the child is killed 30 s past it.
--dry: CPU, no NVML, 32x32 inputs, tiny windows: the plumbing in seconds (tests).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = {"torch": "channels_first", "jax": "channels_last"}
# A configuration is not started with less than this left: a half-measured one is lost anyway.
MIN_START_S = {"torch": 8.0, "jax": 15.0}


def config_key(cfg: dict) -> str:
    model = cfg["model"].rsplit(":", 1)[-1]   # a "module:function" builder by its function's name
    return f"{model}-{cfg['backend']}-{cfg['precision']}-{cfg['layout']}-b{cfg['batch_size']}"


def recorded_path(out: Path, cfg: dict) -> Path | None:
    """The configuration's record in `out`, or None: under its own name, or, for channels_first, under its
    channels_last name (a model that refuses channels_first is recorded in channels_last: _load_in_layout)."""
    names = [config_key(cfg)] + ([config_key({**cfg, "layout": "channels_last"})]
                                 if cfg["layout"] == "channels_first" else [])
    return next((out / (n + ".json") for n in names if (out / (n + ".json")).exists()), None)


def ordered_configs(models: list[str], precisions: list[str], batch_sizes: list[int], backend: str,
                    torch_layout: str = LAYOUT["torch"]) -> list[dict]:
    """Batch 64 first (what the targets are judged at), then the rest; models round-robin inside. torch runs in
    `torch_layout` (channels_first by default: the layout Keras' torch backend runs without copies), jax in
    channels_last (XLA's own layout choice)."""
    batches = sorted(batch_sizes, key=lambda b: (b != 64, batch_sizes.index(b)))
    layout = torch_layout if backend == "torch" else LAYOUT.get(backend, "channels_last")
    return [
        {"model": m, "precision": p, "batch_size": b, "backend": backend, "layout": layout}
        for b in batches for p in precisions for m in models
    ]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=_csv, default=_csv("vgg16,resnet50,mobilenetv2"))
    parser.add_argument("--precisions", type=_csv, default=_csv("float32,mixed_bfloat16,mixed_float16"))
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in _csv(s)], default=[32, 64, 128])
    parser.add_argument("--backends", type=_csv, default=_csv("torch,jax"))
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--torch-share", type=float, default=0.5, help="share of the budget for torch (rest: jax)")
    parser.add_argument("--torch-windows", type=_csv, default=_csv("vgg16"),
                        help="models whose torch layers are also replayed alone (real per-layer power)")
    parser.add_argument("--torch-layout", choices=("channels_first", "channels_last"), default=LAYOUT["torch"],
                        help="image data format of the torch records (channels_last: Keras' torch backend copies each "
                             "convolution's and pooling layer's input to and from NCHW, calibration.layout_copy_passes)")
    parser.add_argument("--whole-only", type=_csv, default=[],
                        help="models whose jax record holds the whole model only (no layer jitted alone); torch records are one profiled pass either way and ignore it")
    parser.add_argument("--layer-window-s", type=float, default=0.05,
                        help="energy window per distinct layer replayed alone (>= 0.5 s for a per-layer power that "
                             "NVML's ~100 ms counter steps do not blur; 0.05 s times layers but its power is noise)")
    parser.add_argument("--layer-repeats", type=int, default=2, help="windows per distinct layer (median)")
    parser.add_argument("--jax-back-to-back-calls", type=int, default=0,
                        help="jax: also measure each distinct layer K times per jitted program in windows of the "
                             "same length (LayerMeasurement.back_to_back: the GPU runs the layer back to back, not "
                             "paced by 40-90 us of host dispatch per call); 0: off")
    parser.add_argument("--model-window-s", type=float, default=0.3, help="energy window of the whole model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry", action="store_true", help="CPU, no NVML, small inputs, tiny windows")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the backend this child process measures
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # time.time() to stop at
    return parser.parse_args(argv)


# ---- the parent: one child per backend ----------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    end = start + args.budget_s
    summary = {}
    for i, backend in enumerate(args.backends):
        rest = len(args.backends) - i
        share = args.torch_share if backend == "torch" and rest > 1 else 1.0 / rest
        configs = ordered_configs(args.models, args.precisions, args.batch_sizes, backend, args.torch_layout)
        recorded = [recorded_path(out, c) for c in configs]
        if all(recorded):
            for path in recorded:  # nothing left for this backend: no child, no import
                print(f"skip (recorded): {path.name}", flush=True)
            summary[backend] = "all recorded"
            continue
        deadline = min(end, time.time() + (end - time.time()) * share)
        cmd = [sys.executable, str(Path(__file__).resolve()), *_passthrough(argv), "--child", backend,
               "--deadline", str(deadline)]
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and jax children never share, but be safe
        print(f"=== {backend}: {deadline - time.time():.0f} s", flush=True)
        try:
            rc = subprocess.run(cmd, env=env, timeout=max(deadline - time.time(), 1) + 30).returncode
        except subprocess.TimeoutExpired:
            rc = "killed at the budget"
        summary[backend] = rc
    recorded = sorted(p.name for p in out.glob("*.json") if not p.name.startswith("_"))
    print(json.dumps({"children": summary, "recorded": len(recorded), "wall_s": round(time.time() - start, 1)}))
    return 0


def _passthrough(argv) -> list[str]:
    argv = list(sys.argv[1:] if argv is None else argv)
    return argv


# ---- a child: every configuration of one backend ------------------------------------------------


def child(args: argparse.Namespace) -> int:
    import keras

    from carm_advisor.models.loader import load_model

    backend = args.child
    out = Path(args.out)
    gpu = None
    if not args.dry:
        from carm_advisor.power.nvml import open_gpu

        gpu = open_gpu(0)
    configs = ordered_configs(args.models, args.precisions, args.batch_sizes, backend, args.torch_layout)
    for cfg in configs:
        path = out / (config_key(cfg) + ".json")
        if (recorded := recorded_path(out, cfg)) is not None:
            print(f"skip (recorded): {recorded.name}", flush=True)
            continue
        left_s = args.deadline - time.time()
        if left_s < (0.5 if args.dry else MIN_START_S.get(backend, 10.0)):
            print(f"budget spent: {path.name} and later configurations not started", flush=True)
            break
        t0 = time.time()
        try:
            model, cfg, path = _load_in_layout(load_model, cfg, out, dry=args.dry)
            batch = 2 if args.dry else cfg["batch_size"]
            run = record_one(model, cfg, batch, gpu, dry=args.dry, windows=_windows(args),
                             layers=cfg["model"] not in args.whole_only)
            run.model_name = cfg["model"]
            run.settings["config"] = cfg
            _write(path, run.to_dict())
            if backend == "torch" and cfg["model"] in args.torch_windows:
                windows = record_layer_windows(model, batch, gpu, dry=args.dry, whole_model=False, windows=_windows(args))
                windows.model_name = cfg["model"]
                windows.settings["config"] = cfg
                _write(out / (config_key(cfg) + "-windows.json"), windows.to_dict())
            print(f"recorded {path.name} in {time.time() - t0:.1f} s", flush=True)
        except Exception as exc:  # one configuration failing must not cost the others
            print(f"FAILED {path.name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            _write(out / ("_failed-" + config_key(cfg) + ".json"), {"config": cfg, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            model = None
            keras.backend.clear_session()
            gc.collect()
            _free_device_memory(backend)
    return 0


def _load_in_layout(load_model, cfg: dict, out: Path, *, dry: bool):
    """The model in the configuration's layout; a model that refuses channels_first (ConvNeXt, DenseNet on
    Keras 3) is recorded in channels_last instead, under the file name of the layout it ran in."""
    import keras

    from carm_advisor.errors import ModelLoadError

    def load(layout: str):
        keras.config.set_image_data_format(layout)
        if ":" in cfg["model"]:   # a "module:function" builder (benchmarks/transformer_models.py)
            from carm_advisor.models.builder import build, model_spec

            return build(model_spec(cfg["model"]), cfg["precision"], layout, seed=0)
        shape = ((3, 32, 32) if layout == "channels_first" else (32, 32, 3)) if dry else None
        return load_model(cfg["model"], precision=cfg["precision"], input_shape=shape)[0]

    try:
        return load(cfg["layout"]), cfg, out / (config_key(cfg) + ".json")
    except ModelLoadError as exc:
        if cfg["layout"] != "channels_first" or "channels_first" not in str(exc):
            raise
    cfg = {**cfg, "layout": "channels_last"}
    print(f"{cfg['model']} refuses channels_first: recorded in channels_last", flush=True)
    return load(cfg["layout"]), cfg, out / (config_key(cfg) + ".json")


def _windows(args: argparse.Namespace) -> dict:
    windows = {"layer_window_s": args.layer_window_s, "layer_repeats": args.layer_repeats,
               "model_window_s": args.model_window_s, "back_to_back_calls": args.jax_back_to_back_calls}
    if args.dry:
        windows.update(layer_window_s=0.01, layer_repeats=1, model_window_s=0.02)
    return windows


def record_one(model, cfg: dict, batch: int, gpu, *, dry: bool, windows: dict, layers: bool = True):
    """One configuration's RunMeasurement (see the module docstring for what each backend records)."""
    if cfg["backend"] == "torch":
        from carm_advisor.errors import MeasurementError
        from carm_advisor.measure.model import measure_model_graph
        from carm_advisor.measure.profiled import profile_run

        try:
            return profile_run(model, batch_size=batch, gpu=gpu, iterations=2 if dry else 5, warmup=1 if dry else 2,
                               model_window_s=windows["model_window_s"], model_repeats=2, progress=False)
        except MeasurementError as exc:  # no kernel attribution here: each layer alone, so the run still records
            print(f"profiled pass failed ({exc}); layers replayed alone instead", flush=True)
            run = record_layer_windows(model, batch, gpu, dry=dry, whole_model=True, windows=windows)
            run.inference_graph = measure_model_graph(model, batch_size=batch, gpu=gpu,
                                                      min_window_s=windows["model_window_s"], repeats=2)
            run.settings.update(method="layer-windows-instead-of-profiled", profiled_failed=str(exc))
            return run
    return record_layer_windows(model, batch, gpu, dry=dry, whole_model=True, windows=windows, layers=layers)


def record_layer_windows(model, batch: int, gpu, *, dry: bool, whole_model: bool, windows: dict, layers: bool = True):
    """Each distinct layer call alone in its own windows (jit on jax, CUDA graph on torch), copied to its twins."""
    from carm_advisor.measure.profiled import measure_distinct_layers

    return measure_distinct_layers(model, batch_size=batch, gpu=gpu, window_s=windows["layer_window_s"],
                                   repeats=windows["layer_repeats"], warmup=1, whole_model=whole_model,
                                   model_window_s=windows["model_window_s"], progress=False, layers=layers,
                                   back_to_back_calls=windows.get("back_to_back_calls", 0))


def _free_device_memory(backend: str) -> None:
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _write(path: Path, doc: dict) -> None:
    """Written whole or not at all: a child killed at the budget leaves no half file to skip later."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
