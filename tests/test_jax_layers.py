"""Layers jitted alone on the jax backend compute in the dtype policy's precision, as inside the model.

jax is fixed per process, so the checks run in a child with KERAS_BACKEND=jax (skipped where jax is not
installed; .ci/run installs the CPU wheel). Before the fix, a layer was traced through
layer.stateless_call, which skips __call__'s autocast: under mixed_bfloat16 a Conv2D or Dense computed
in float32 (float32 output) and DepthwiseConv2D / SeparableConv2D failed to trace.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent("""
    import numpy as np
    import keras
    from carm_advisor.mapping.walker import iter_layer_calls
    from carm_advisor.measure.layers import layer_runner

    keras.config.set_dtype_policy("mixed_bfloat16")
    x = keras.Input((12, 12, 4))
    y = keras.layers.Conv2D(8, 3, padding="same", name="conv")(x)
    y = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(y)
    y = keras.layers.SeparableConv2D(8, 3, padding="same", name="sep")(y)
    y = keras.layers.BatchNormalization(name="bn")(y)
    y = keras.layers.GlobalAveragePooling2D(name="gap")(y)
    y = keras.layers.Dense(5, name="dense")(y)
    model = keras.Model(x, y)
    for call in iter_layer_calls(model, 2):
        if call.path not in ("conv", "dw", "sep", "bn", "dense"):
            continue
        runner = layer_runner(call, backend="jax")
        out = runner.fn()
        ref = call.layer(*runner.tensors)  # the layer's own __call__ on the same inputs, eagerly
        print(call.path, runner.execution, str(out.dtype),
              bool(np.allclose(np.asarray(out, "float32"), np.asarray(ref, "float32"), rtol=2e-2, atol=2e-2)))
""")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_layers_jitted_alone_compute_in_the_mixed_precision_policy_dtype():
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.strip().splitlines()}
    assert set(lines) == {"conv", "dw", "sep", "bn", "dense"}, proc.stdout
    for name, (execution, dtype, same) in lines.items():
        assert execution == "jit", f"{name} was not jit-compiled: {proc.stderr[-1500:]}"
        assert dtype == "bfloat16", f"{name} computed in {dtype} under mixed_bfloat16"
        assert same == "True", f"{name}: jitted output differs from the layer's own call"


BACK_TO_BACK = textwrap.dedent("""
    import numpy as np
    import keras
    from carm_advisor.mapping.walker import iter_layer_calls
    from carm_advisor.measure.layers import argument_builder, back_to_back_program, layer_runner, measure_layer_calls

    x = keras.Input((16,))
    y = keras.layers.Dense(8, name="dense")(x)
    model = keras.Model(x, y)
    call = [c for c in iter_layer_calls(model, 4) if c.path == "dense"][0]
    runner = layer_runner(call, backend="jax", back_to_back_calls=3)
    outs = runner.back_to_back()
    single = np.asarray(runner.fn())
    same = all(np.array_equal(np.asarray(o), single) for o in outs)
    build = argument_builder(call)
    program, values = back_to_back_program(call.layer, lambda ts: build(ts), True, 3)
    hlo = program.lower(values, runner.tensors).compile().as_text()
    dots = sum(1 for line in hlo.splitlines() if " dot(" in line)
    m = measure_layer_calls([call], min_window_s=0.01, repeats=1, warmup=1, progress=False, back_to_back_calls=3)[0]
    b = m.back_to_back
    print(runner.execution, runner.calls_per_dispatch, len(outs), same, dots, b["calls_per_dispatch"],
          b["time_s"] > 0, b["power_w"], m.time_s > 0)
""")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_back_to_back_program_runs_the_layer_k_times_in_one_dispatch_on_the_same_data():
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", BACK_TO_BACK], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    execution, k, n_outs, same, dots, recorded_k, timed, power, time_kept = proc.stdout.split()[-9:]
    assert (execution, k, n_outs, same) == ("jit", "3", "3", "True")   # 3 outputs, each the single call's
    assert dots == "3", f"XLA merged or dropped calls: {dots} dot ops"  # neither merged (CSE) nor hoisted
    assert (recorded_k, timed, power, time_kept) == ("3", "True", "None", "True")   # CPU: no power reading


BACK_TO_BACK_FAILS = textwrap.dedent("""
    import warnings
    import keras
    from carm_advisor.mapping.walker import iter_layer_calls
    from carm_advisor.measure import layers

    def fails(*args, **kwargs):
        raise MemoryError("RESOURCE_EXHAUSTED: out of memory (3 outputs kept alive)")

    layers.back_to_back_fn = fails   # where layer_runner looks it up
    x = keras.Input((16,))
    model = keras.Model(x, keras.layers.Dense(8, name="dense")(x))
    call = [c for c in iter_layer_calls(model, 4) if c.path == "dense"][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner = layers.layer_runner(call, backend="jax", back_to_back_calls=3)
    print(runner.execution, runner.back_to_back is None, runner.calls_per_dispatch,
          any("no back-to-back windows" in str(w.message) for w in caught))
""")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_a_back_to_back_program_that_fails_leaves_the_layer_jitted_not_eager():
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", BACK_TO_BACK_FAILS], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-4:] == ["jit", "True", "1", "True"]


SUBCLASSED = textwrap.dedent("""
    import numpy as np
    import keras
    from carm_advisor.measure.model import measure_model

    class NoTraining(keras.Model):          # call() takes no training argument
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(3)
        def call(self, x):
            return self.d(x)

    class DictInput(keras.Model):           # built on a dict: Keras keeps its shapes in a TrackedDict
        def __init__(self):
            super().__init__()
            self.a, self.b = keras.layers.Dense(3), keras.layers.Dense(3)
        def call(self, inputs, training=None):
            return self.a(inputs["x"]) + self.b(inputs["y"])

    funct_in = {"x": keras.Input((4,), name="x"), "y": keras.Input((2,), name="y")}
    functional = keras.Model(funct_in, keras.layers.Dense(3)(keras.layers.Concatenate()([funct_in["x"], funct_in["y"]])))
    m1 = NoTraining(); m1(np.zeros((1, 4), "float32"))
    m2 = DictInput(); m2({"x": np.zeros((1, 4), "float32"), "y": np.zeros((1, 2), "float32")})
    for name, model in (("no_training", m1), ("dict_input", m2), ("functional_dict", functional)):
        inference, _ = measure_model(model, batch_size=5, training_step=False, min_window_s=0.01, repeats=1, warmup=1)
        print(name, inference.execution, inference.time_s > 0)
""")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_subclassed_and_dict_input_models_are_measured_whole_jitted():
    """jax.jit takes no Keras TrackedDict, and stateless_call hands `training` to a call() that may take none."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", SUBCLASSED], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["no_training", "jit", "True", "dict_input", "jit", "True",
                                   "functional_dict", "jit", "True"], proc.stdout
