"""A predicted study costs each configuration as a real build under the trial's policy runs: layers that follow the
policy at its compute dtype, layers the builder pins to another policy at theirs. Before, the predictor built a
builder's model under float32, where an output layer pinned to float32 (Keras' mixed-precision guide) could not be
told from the rest, and costed it at the trial's 16-bit dtype."""

from __future__ import annotations

import keras
import pytest

from carm_advisor.mapping import map_model
from carm_advisor.models.builder import model_policy, model_spec
from carm_advisor.models.loader import dtype_policy, load_model
from carm_advisor.trials.predicted import PROBE_POLICY, ConfigPredictor
from carm_advisor.trials.space import TrialConfig


def pinned_output():
    inputs = keras.Input((32,))
    hidden = keras.layers.Dense(64, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(10, dtype="float32", name="out")(hidden))


def _costs(rows):
    return [(r.name, r.dtype, r.flops, r.bytes) for r in rows]


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_a_layer_the_builder_pins_keeps_its_dtype_as_in_a_real_build_under_the_trial_policy(precision):
    rows = ConfigPredictor(model_spec(pinned_output)).predict(TrialConfig("torch", precision, 8)).rows
    with dtype_policy(precision):   # the reference: the model as a trial builds it, each layer at its own policy
        real = pinned_output()
    from carm_advisor.predict import Predictor
    from carm_advisor.profiles.profile import load_profile

    reference = Predictor(load_profile(), {}, backend="torch").rows_for_costs(map_model(real, batch_size=8))
    assert _costs(rows) == _costs(reference)
    assert {r.name: r.dtype for r in rows}["out"] == "float32"


@pytest.mark.parametrize("app", ["mobilenetv3small", "convnexttiny"])
def test_applications_map_the_same_under_the_probe_policy_as_under_float32(app):
    """No keras.applications layer pins a policy: built under PROBE_POLICY or float32, every layer follows it."""
    m32, _ = load_model(app, precision="float32")
    probe, _ = load_model(app, precision=PROBE_POLICY)
    for dtype in ("float32", "bfloat16"):
        a = map_model(m32, batch_size=2, compute_dtype={model_policy(m32): dtype})
        b = map_model(probe, batch_size=2, compute_dtype={model_policy(probe): dtype})
        assert [(c.type, c.compute_dtype, c.flops, c.bytes_read, c.bytes_written) for c in a] == \
               [(c.type, c.compute_dtype, c.flops, c.bytes_read, c.bytes_written) for c in b]
