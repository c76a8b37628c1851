"""tune() of a subclassed model the mapping can only bound from below: the mapping maps it for every
configuration, and its warning is said once in the result, not once per mapping on stderr."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest

from carm_advisor.trials.space import SearchSpace, TrialConfig
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


SPACE = dict(backends=("torch",), precisions=("float32",), batch_sizes=(32,), layouts=("channels_last",),
             compilers={"torch": ("eager",)})


def _tune(tmp_path, **kwargs):
    return tune(two_tensors, n_trials=1, storage=str(tmp_path / "s.db"), space=SearchSpace(**SPACE), predict=True,
                baseline=TrialConfig("torch", "float32", 32, "channels_last", "eager"), progress=False, **kwargs)


def test_a_predicted_study_maps_the_call_on_the_input_shapes_given(tmp_path):
    """Per sample: left 8 x (2 x 16 + 1) = 264 FLOPs, right 8 x (2 x 4 + 1) = 72, their add 8. The lower bound
    (no shapes: the layers from their build shapes) leaves the add out: 336."""
    whole = _tune(tmp_path, input_shapes=[(None, 16), (None, 4)], calibration=False)
    assert not [w for w in whole.warnings if "could not be traced" in w]
    assert whole.baseline.measurement["flops"] == 32 * (264 + 72 + 8)
    (tmp_path / "lower").mkdir()
    lower = _tune(tmp_path / "lower", calibration=False)
    assert lower.baseline.measurement["flops"] == 32 * (264 + 72)


def test_a_study_resumes_only_on_the_same_input_shapes(tmp_path):
    _tune(tmp_path, input_shapes={"a": (None, 16), "b": (None, 4)})
    _tune(tmp_path, input_shapes={"a": (5, 16), "b": (7, 4)})   # the same shapes: the batch is the configuration's
    from carm_advisor.tune.fingerprint import StudyMismatchError

    with pytest.raises(StudyMismatchError, match="made with a different input_shapes"):
        _tune(tmp_path, input_shapes={"a": (None, 16), "b": keras.Input((4,), dtype="float16")})


def test_input_shapes_reach_a_measured_study_and_are_checked_before_the_storage(tmp_path):
    from carm_advisor.errors import MappingError
    from carm_advisor.models.builder import model_spec
    from carm_advisor.trials.predicted import ConfigPredictor
    from carm_advisor.trials.runner import FakeRunner

    shapes = [(None, 16), (None, 4)]
    runner = FakeRunner(ConfigPredictor(model_spec(two_tensors), input_shapes=shapes))
    result = tune(two_tensors, n_trials=1, storage=str(tmp_path / "m.db"), space=SearchSpace(**SPACE), runner=runner,
                  input_shapes=shapes, progress=False, baseline=TrialConfig("torch", "float32", 32, "channels_last",
                                                                            "eager"))
    assert result.baseline.measurement["flops"] == 32 * (264 + 72 + 8)   # the call traced whole, the add counted
    with pytest.raises(MappingError, match=r"keys among the tensor arguments of TwoTensors.call\(\) \(a, b\)"):
        _tune(tmp_path, input_shapes={"c": (None, 4)})
    assert not (tmp_path / "s.db").exists()
