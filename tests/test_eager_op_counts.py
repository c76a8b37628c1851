"""benchmarks/eager_op_counts.py: what one torch eager call dispatches, against hand counts of Keras 3.15's call()."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One Functional model of Dense(8) on (2, 16) float32 inputs: Dense.call is ops.matmul then ops.add of the bias
# (keras/src/layers/core/dense.py), which torch dispatches as aten mm and add; the model's own __call__ and the
# Dense layer's are the Keras layer calls. A channels_first Conv2D(4, 3) with a bias: the backend's conv permutes the
# kernel to torch's layout (a view), convolves, and the layer reshapes the bias (a view) and adds it: two ops that
# are no views (keras/src/backend/torch/nn.py conv, keras/src/layers/convolutional/base_conv.py).
CHILD = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import keras, torch
import importlib.util
spec = importlib.util.spec_from_file_location("eager_op_counts", os.path.join(sys.argv[1], "benchmarks", "eager_op_counts.py"))
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
keras.config.set_image_data_format("channels_first")
out = {}
for name, layer, x in (("dense", keras.layers.Dense(8), torch.rand(2, 16)),
                       ("conv", keras.layers.Conv2D(4, 3), torch.rand(2, 3, 8, 8))):
    inputs = keras.Input(tuple(x.shape[1:]))
    model = keras.Model(inputs, layer(inputs))
    model(x)
    found = m.counts(model, x)
    out[name] = {k: found[k] for k in ("keras_layer_calls", "aten_ops", "aten_ops_not_views", "aten_by_op")}
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_counts_match_the_ops_keras_call_issues():
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], check=False, capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["dense"]["aten_by_op"] == {"mm": 1, "add": 1}
    assert found["dense"]["aten_ops_not_views"] == 2
    assert found["dense"]["keras_layer_calls"] == 2
    assert found["conv"]["aten_ops_not_views"] == 2
    assert found["conv"]["aten_by_op"]["convolution"] == 1 and found["conv"]["aten_by_op"]["add"] == 1
