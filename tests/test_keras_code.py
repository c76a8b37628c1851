"""The tuner's answer and analyze's configuration advice as the Python lines that reproduce them
(TrialConfig.keras_code): the code is RUN, in a child process per configuration whose environment names another
Keras backend (numpy), on a small model built the same way, and the model it makes is checked against the
configuration: backend, dtype policy, image data format, jit_compile, TF32 switches, quantized layers. Every expected
value below is written out from the configuration by hand (Keras' and the frameworks' own names for them)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from carm_advisor.trials import space
from carm_advisor.trials.space import PrecisionSetup, SearchSpace, TrialConfig
from carm_advisor.tune.objectives import OBJECTIVES
from carm_advisor.tune.records import TrialRecord
from carm_advisor.tune.render import render
from carm_advisor.tune.result import TuneResult

REPO = Path(__file__).resolve().parent.parent

# A small model built by the code's `build_model()`, after the policy and image format lines; x: 8 samples.
PRELUDE = '''
import numpy as np

def build_model():
    import keras
    shape = (8, 8, 3) if keras.config.image_data_format() == "channels_last" else (3, 8, 8)
    inputs = keras.Input(shape)
    h = keras.layers.Conv2D(4, 3, name="conv")(inputs)
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    return keras.Model(inputs, keras.layers.Dense(10, name="dense")(h))

x = np.random.default_rng(0).standard_normal({shape}).astype("float32")
'''

# What the child reports of the model the code made, and of the framework's TF32 switches.
REPORT = '''
import json
switches = {}
if keras.backend.backend() == "torch":
    import torch
    switches = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
elif keras.backend.backend() == "jax":
    import jax
    switches = {"matmul_precision": jax.config.jax_default_matmul_precision}
else:
    import tensorflow as tf
    switches = {"tf32": tf.config.experimental.tensor_float_32_execution_enabled()}
print("MODEL " + json.dumps({
    "backend": keras.backend.backend(), "policy": model.dtype_policy.name,
    "image_data_format": keras.config.image_data_format(), "conv_format": model.get_layer("conv").data_format,
    "jit_compile": model.jit_compile, "switches": switches,
    "quantized": {l.name: l.quantization_mode for l in model.layers if getattr(l, "quantization_mode", None)},
    "outputs": list(np.shape(y))}))
'''


def installed(backend: str) -> bool:
    return importlib.util.find_spec(backend) is not None


def run_code(config: TrialConfig, code: str | None = None) -> dict:
    """Run the configuration's code (or `code`) in a child whose environment names the numpy backend."""
    shape = (8, 8, 8, 3) if config.layout == "channels_last" else (8, 3, 8, 8)
    source = PRELUDE.format(shape=shape) + (code or config.keras_code()) + REPORT
    env = {**os.environ, "KERAS_BACKEND": "numpy", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("MODEL ")]
    return json.loads(line[len("MODEL "):])


# (configuration, what the model made by its code must be), the expectations written out by hand
CASES = [
    (TrialConfig("torch", "float32_no_tf32", 4, "channels_first", "torch.compile"),
     {"backend": "torch", "policy": "float32", "image_data_format": "channels_first", "conv_format": "channels_first",
      "jit_compile": True, "switches": {"matmul": False, "cudnn": False}}),
    (TrialConfig("torch", "mixed_bfloat16", 4, "channels_last", "eager"),
     {"backend": "torch", "policy": "mixed_bfloat16", "image_data_format": "channels_last",
      "conv_format": "channels_last", "jit_compile": False, "switches": {"matmul": False, "cudnn": True}}),
    (TrialConfig("jax", "mixed_float16", 4, "channels_last", "xla"),
     {"backend": "jax", "policy": "mixed_float16", "image_data_format": "channels_last", "conv_format": "channels_last",
      "jit_compile": True, "switches": {"matmul_precision": None}}),
    (TrialConfig("jax", "float32_no_tf32", 4, "channels_first", "xla"),
     {"backend": "jax", "policy": "float32", "image_data_format": "channels_first", "conv_format": "channels_first",
      "jit_compile": True, "switches": {"matmul_precision": "float32"}}),
    (TrialConfig("tensorflow", "float32_no_tf32", 4, "channels_last", "xla"),
     {"backend": "tensorflow", "policy": "float32", "image_data_format": "channels_last",
      "conv_format": "channels_last", "jit_compile": True, "switches": {"tf32": False}}),
    (TrialConfig("tensorflow", "mixed_bfloat16", 4, "channels_first", "graph"),
     {"backend": "tensorflow", "policy": "mixed_bfloat16", "image_data_format": "channels_first",
      "conv_format": "channels_first", "jit_compile": False, "switches": {"tf32": True}}),
]


@pytest.mark.parametrize("config, expected", CASES, ids=[c.label() for c, _ in CASES])
def test_the_code_makes_the_configuration_that_was_measured(config, expected):
    if not installed(config.backend):
        pytest.skip(f"{config.backend} is not installed here")
    made = run_code(config)
    assert {k: made[k] for k in expected} == expected
    assert made["quantized"] == {}                 # no precision of the space quantizes
    assert made["outputs"] == [8, 10]              # model.predict ran over the 8 samples at the batch size


def test_the_code_says_each_setting_in_keras_own_words():
    code = TrialConfig("jax", "mixed_float16", 256, "channels_last", "xla").keras_code()
    lines = code.splitlines()
    # the backend is chosen before Keras is imported, or it is not chosen at all
    assert lines.index('os.environ["KERAS_BACKEND"] = "jax"  # before `import keras` (or KERAS_BACKEND=jax in the '
                       'shell)') < lines.index("import keras")
    assert 'keras.mixed_precision.set_global_policy("mixed_float16")' in lines
    assert 'keras.config.set_image_data_format("channels_last")' in lines
    assert "model.compile(jit_compile=True)  # XLA" in lines
    assert "y = model.predict(x, batch_size=256)  # or predict_on_batch on 256 samples" in lines
    assert lines.index("keras.config.set_image_data_format(\"channels_last\")") < \
        next(i for i, line in enumerate(lines) if line.startswith("model = build_model()"))


def test_a_quantised_precision_added_to_the_table_is_quantised_by_the_code(monkeypatch):
    """Another precision is one row of PRECISION_SETUP: an int8 one (Keras' model.quantize("int8")) makes the
    model's Dense layer int8, and leaves its convolution as it is (Keras quantizes Dense and EinsumDense only)."""
    monkeypatch.setitem(space.PRECISION_SETUP, "int8", PrecisionSetup("float32", "int8", quantize="int8"))
    config = TrialConfig("tensorflow", "int8", 4, "channels_last", "graph")
    assert 'model.quantize("int8")' in config.keras_code()
    made = run_code(config)
    assert made["quantized"] == {"dense": "int8"}


# ---- where a person reads it: the tune panel and its JSON --------------------------------------------

def _record(number, config, energy_j):
    measurement = {"time_s": 0.01, "energy_j": energy_j, "flops": 1e9, "batch_size": config.batch_size,
                   "source": "predicted", "power_w": energy_j / 0.01}
    return TrialRecord(number=number, state="COMPLETE", config=config, values=[config.batch_size / energy_j],
                       measurement=measurement, bound=None, feasible=True, value_source="calibrated")


def _result(best_config, **changes):
    baseline = _record(0, TrialConfig("torch", "float32", 32, "channels_last", "eager"), 2.0)
    best = _record(1, best_config, 1.0)
    fields = dict(objectives=[OBJECTIVES["samples_per_joule"]], source="predicted", trials=[baseline, best],
                  baseline=baseline, best=best, next_best=[], pareto=[best],
                  counts={"trials": 2, "predicted": 2, "measured": 0, "repeats_reused": 0, "pruned_by_carm": 0,
                          "pruned_out_of_memory": 0, "failed": 0, "infeasible": 0},
                  blind_search={"grid_size": 2, "ruled_out_by_carm_bound": 0}, layer_changes=[],
                  clock_recommendation=None, space=SearchSpace(backends=("torch", "jax")),
                  storage_url="sqlite:///x.db", study_name="m", device={})
    fields.update(changes)
    return TuneResult(**fields)


def test_the_tune_panel_and_json_carry_the_best_as_code():
    best = TrialConfig("jax", "mixed_float16", 256, "channels_last", "xla")
    result = _result(best, model_expr="keras.applications.VGG16()")
    buf = io.StringIO()
    for part in render(result):
        Console(file=buf, width=200).print(part)
    text = buf.getvalue()
    for line in ('os.environ["KERAS_BACKEND"] = "jax"', 'keras.mixed_precision.set_global_policy("mixed_float16")',
                 "model = keras.applications.VGG16()", "model.compile(jit_compile=True)",
                 "y = model.predict(x, batch_size=256)"):
        assert line in text
    code = result.to_dict()["best"]["code"]
    assert code == result.best.keras_code("keras.applications.VGG16()") == result.keras_code()
    assert "model = keras.applications.VGG16()" in code


def test_an_application_is_built_by_its_keras_constructor_in_the_code():
    from carm_advisor.models.builder import model_spec
    from carm_advisor.tune.result import model_expression

    assert model_expression(model_spec("vgg16")) == "keras.applications.VGG16()"
    assert model_expression(model_spec("pkg.mod:build")) == "build_model()"


# ---- analyze's configuration advice -------------------------------------------------------------------

def test_analyze_recommendations_that_change_the_configuration_carry_their_code():
    import keras

    import carm_advisor as advisor
    from carm_advisor.report.render import recommendations_table

    inputs = keras.Input((32, 32, 16))
    h = keras.layers.Conv2D(32, 3, name="conv")(inputs)
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(8, name="predictions")(h), name="net")
    report = advisor.analyze(model, batch_size=8, measure=False)
    changing = [r for r in report.recommendations if r.change and "compile" not in r.change]
    assert changing, [r.title for r in report.recommendations]
    backend = keras.backend.backend()
    for rec in changing:
        # the analysed configuration with the change: e.g. {"batch_size": 32} -> batch_size=32 in the code
        after = {"precision": "float32", "batch_size": 8, "layout": "channels_last", **rec.change}
        assert f'os.environ["KERAS_BACKEND"] = "{backend}"' in rec.code
        assert f'keras.mixed_precision.set_global_policy("{after["precision"]}")' in rec.code
        assert f'keras.config.set_image_data_format("{after["layout"]}")' in rec.code
        assert f"y = model.predict(x, batch_size={after['batch_size']})" in rec.code
        assert json.loads(report.to_json_text())["recommendations"][report.recommendations.index(rec)]["code"] \
            == rec.code
    buf = io.StringIO()
    Console(file=buf, width=200).print(recommendations_table(report))
    assert f'set_global_policy("{changing[0].change.get("precision", "float32")}")' in buf.getvalue()
