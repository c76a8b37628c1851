"""The trial worker on a quantised precision, in-process on jax's CPU backend (a child Python with KERAS_BACKEND=jax,
as a worker process runs): its model is the reference's weights quantised, its output error is measured against
float32 with TF32 off on the same weights, and a model Keras cannot quantise fails that trial in one line while the
next trial runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).parent / "tune_support"

SCRIPT = r"""
import json

import numpy as np

from carm_advisor.trials.worker import Worker, _error_reply
from carm_advisor.trials.space import TrialConfig

settings = {"window_s": 0.02, "min_windows": 1, "max_windows": 1, "warmup_calls": 1, "idle_gap_s": 0,
            "accuracy_samples": 4}
out = {}
worker = Worker({"model": "small_transformers:tiny_bert", "settings": settings})
out["backend"] = worker.backend
for precision in ("mixed_bfloat16", "int8", "float8"):
    m = worker.measure(TrialConfig("jax", precision, 4, "channels_last", "xla").to_dict())
    out[precision] = {"time_s": m["time_s"], "output_error": m["output_error"], "reference": m["reference"]}
model = worker.models[("mixed_bfloat16", "channels_last", "int8")]
out["int8_layers"] = sorted({type(layer).__name__ + ":" + layer.dtype_policy.name
                             for layer in model._flatten_layers(include_self=False)
                             if getattr(layer.dtype_policy, "quantization_mode", None)})
# the int8 kernel is the reference's own kernel quantised: divided by its scales it gives the reference's back
dense_q = [l for l in model._flatten_layers() if l.name == "feedforward_output_dense"][0]
dense_f = [l for l in worker.built["channels_last"]._flatten_layers() if l.name == "feedforward_output_dense"][0]
kernel = np.asarray(dense_q._kernel.numpy(), "float64") / np.asarray(dense_q.kernel_scale.numpy(), "float64")
out["kernel_error"] = float(np.max(np.abs(kernel - np.asarray(dense_f.kernel.numpy(), "float64"))
                                   / np.max(np.abs(dense_f.kernel.numpy()))))

broken = Worker({"model": "small_transformers:quantised_mlp", "settings": settings})
try:
    broken.measure(TrialConfig("jax", "int8", 4, "channels_last", "xla").to_dict())
    out["failed"] = None
except Exception as exc:
    out["failed"] = _error_reply(exc)
out["next"] = broken.measure(TrialConfig("jax", "float32", 4, "channels_last", "xla").to_dict())["time_s"]
print(json.dumps(out))
"""


def test_a_quantised_trial_runs_on_jax_and_a_model_keras_cannot_quantise_fails_only_its_trial():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["backend"] == "jax"
    assert out["int8_layers"] == ["Dense:int8_from_mixed_bfloat16", "EinsumDense:int8_from_mixed_bfloat16",
                                  "Embedding:int8_from_mixed_bfloat16", "ReversibleEmbedding:int8_from_mixed_bfloat16"]
    # per-column abs-max int8: each kernel element within half a step (max / 127 / 2) of the reference's
    assert out["kernel_error"] <= 0.5 / 127 + 1e-6
    for precision in ("mixed_bfloat16", "int8", "float8"):
        m = out[precision]
        assert m["time_s"] > 0 and m["reference"] == "float32 with TF32 off, same weights and inputs"
    # bfloat16 keeps ~3 significant digits; int8 weights and activations add their rounding; float8 (3 mantissa
    # bits, and scales of 1 that no training has set) more: each is measured, none is the reference's own output
    assert 1e-4 < out["mixed_bfloat16"]["output_error"] < out["int8"]["output_error"] < 0.1
    assert out["int8"]["output_error"] < out["float8"]["output_error"] < 0.5
    failed = out["failed"]
    assert failed["ok"] is False and failed["kind"] == "error" and "\n" not in failed["error"]
    assert failed["error"].startswith("ModelLoadError: cannot quantise 'quantised_mlp' to int8: ValueError: Layer ")
    assert "is already quantized" in failed["error"]
    assert out["next"] > 0   # the worker runs the next trial
