"""Measure one configuration of a model in a child process: the whole model's time and energy per call.

    measure_config({"model": "vgg16", "precision": "mixed_bfloat16", "layout": "channels_first",
                    "batch_size": 64, "backend": "torch", "compile": "none"}, timeout_s=300)
    -> {"config": {...}, "ok": True, "time_s": ..., "energy_j": ..., "power_w": ..., "execution": ..., "error": None}

Why a child: Keras picks its backend when it is imported, and a dtype policy or layout is global
state; a fresh process (KERAS_BACKEND set) measures exactly the configuration asked for and leaves
the caller's process untouched. `analyze --verify` uses it (advise/verify.py); the tuner's
trials measure the same way.

config keys: model (a keras.applications name, a keras_hub preset or a .keras file), precision (a Keras dtype
policy, or a quantised precision of trials.space.PRECISION_SETUP: "int8" / "float8", the model built under its
policy then quantised, `model.quantize(mode)`: a model Keras cannot quantise so fails in one line), layout, batch_size, backend ("torch" | "jax" | "tensorflow"), compile: "none" (as the user calls
model(x): eager on torch, jitted on jax), "cuda_graph" (torch: replayed from one CUDA graph) or "jit";
input_shapes (optional): the model's input shapes as mapping.input_shapes.shapes_json text, which it is built
(an application's image size) and measured on.

The child: `python -m carm_advisor.trials.child` reads the config as JSON on stdin and prints the
result as one JSON line (the last line of its stdout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

from carm_advisor.mapping.input_shapes import shaped_model, shapes_from_json
from carm_advisor.measure.model import measure_model, measure_model_graph
from carm_advisor.models.builder import model_spec, quantize_model
from carm_advisor.models.loader import load_model
from carm_advisor.power.nvml import gpu_count, open_gpu
from carm_advisor.trials.space import PRECISION_SETUP

DEFAULTS = {"precision": "float32", "layout": "channels_last", "batch_size": 1, "backend": "torch", "compile": "none"}
COMPILE_MODES = ("none", "cuda_graph", "jit")

Runner = Callable[[dict], dict]


def normalized(config: dict) -> dict:
    cfg = {**DEFAULTS, **config}
    if "model" not in cfg:
        raise ValueError(f"Expected a 'model' key in the trial config, Received: {sorted(config)}")
    if cfg["compile"] not in COMPILE_MODES:
        raise ValueError(f"Expected compile in {COMPILE_MODES}, Received: compile={cfg['compile']!r}")
    return cfg


def measure_config(config: dict, timeout_s: float = 300.0) -> dict:
    """Run the configuration in a child process with KERAS_BACKEND set; never raises for a failed trial."""
    cfg = normalized(config)
    fake = os.environ.get("CARM_ADVISOR_FAKE_TRIALS")
    if fake:
        return fake_result(cfg, fake)
    # The child imports this very package, from wherever the parent found it.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "KERAS_BACKEND": cfg["backend"], "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "carm_advisor.trials.child"], input=json.dumps(cfg),
                              capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return _failed(cfg, f"timed out after {timeout_s:.0f} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return _failed(cfg, f"child exited {done.returncode}: {tail[:300]}")
    return json.loads(lines[-1])


def fake_result(cfg: dict, path: str) -> dict:
    """CPU tests and demos: the first entry of a JSON list [{"match": {...}, "time_s", "energy_j"}]
    whose match keys all equal the config's (CARM_ADVISOR_FAKE_TRIALS=path); no process is started."""
    with open(path) as f:
        entries = json.load(f)
    for entry in entries:
        if all(cfg.get(k) == v for k, v in entry.get("match", {}).items()):
            return {"config": cfg, "ok": True, "time_s": entry.get("time_s"), "energy_j": entry.get("energy_j"),
                    "power_w": None, "execution": "fake", "error": None}
    return _failed(cfg, "no fake trial matches this configuration")


def _failed(cfg: dict, error: str) -> dict:
    return {"config": cfg, "ok": False, "time_s": None, "energy_j": None, "power_w": None, "execution": None,
            "error": error}


def run_here(cfg: dict) -> dict:
    """Measure the configuration in this process (the child's work)."""
    import keras

    keras.config.set_image_data_format(cfg["layout"])
    shapes = shapes_from_json(cfg.get("input_shapes"))
    image = model_spec(cfg["model"], input_shapes=shapes).input_shape   # an application's image size
    setup = PRECISION_SETUP.get(cfg["precision"])
    quantize = setup.quantize if setup is not None else None
    policy = setup.policy if quantize is not None else cfg["precision"]
    model, _ = load_model(cfg["model"], precision=policy, input_shape=image)
    if quantize is not None:
        quantize_model(model, quantize, str(cfg["model"]))
    gpu = open_gpu(0) if gpu_count() else None
    with shaped_model(model, shapes) as model:
        if cfg["compile"] == "cuda_graph":
            m = measure_model_graph(model, batch_size=int(cfg["batch_size"]), gpu=gpu, min_window_s=0.5, repeats=2)
            if m is None:
                return _failed(cfg, "a CUDA graph needs torch on a CUDA GPU, and the capture must succeed")
        else:
            m, _ = measure_model(model, batch_size=int(cfg["batch_size"]), gpu=gpu, training_step=False,
                                 min_window_s=0.5, repeats=2)
    return {"config": cfg, "ok": True, "time_s": m.time_s, "energy_j": m.energy_j, "power_w": m.power_w,
            "execution": m.execution, "error": None}


def main() -> int:
    try:
        cfg = normalized(json.loads(sys.stdin.read()))
        result = run_here(cfg)
    except Exception as exc:  # the parent reads one JSON line either way
        result = _failed({}, f"{type(exc).__name__}: {str(exc)[:300]}")
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
