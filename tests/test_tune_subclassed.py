"""tune() of a subclassed model the mapping can only bound from below: the mapping maps it for every
configuration, and its warning is said once in the result, not once per mapping on stderr."""

from __future__ import annotations

import warnings

import keras
import numpy as np

from carm_advisor.tune.space import SearchSpace, TrialConfig
from carm_advisor.tune.study import tune


class TwoTensors(keras.Model):
    """call(a, b): Keras records a's build shape only, so the call cannot be traced without input_shapes."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.left = keras.layers.Dense(8, name="left")
        self.right = keras.layers.Dense(8, name="right")

    def call(self, a, b):
        return self.left(a) + self.right(b)


def two_tensors():
    model = TwoTensors()
    model(np.zeros((1, 16), "float32"), np.zeros((1, 4), "float32"))
    return model


def test_the_lower_bound_warning_is_in_the_result_once_and_not_on_stderr(tmp_path):
    space = SearchSpace(backends=("torch",), precisions=("float32", "mixed_bfloat16"), batch_sizes=(32, 64),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        result = tune(two_tensors, n_trials=4, storage=str(tmp_path / "s.db"), space=space, predict=True,
                      baseline=TrialConfig("torch", "float32", 32, "channels_last", "eager"), progress=False)
    assert not [w for w in shown if "could not be traced" in str(w.message)]
    said = [w for w in result.warnings if "could not be traced" in w]
    assert len(said) == 1 and "model 'two_tensors'" in said[0] and "lower bound" in said[0]
    assert "pass input_shapes for (a, b)" in said[0]
    assert result.to_dict()["warnings"][0] == said[0]
