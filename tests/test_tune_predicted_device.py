"""A PREDICTED study's JSON and summary name the profile its figures came from (embedded or a file) and say
that no device was measured; its count of evaluated configurations is called "predicted", not "measured"."""

from __future__ import annotations

import io
import json

import keras
from rich.console import Console

from carm_advisor.profiles.profile import embedded_profile_doc
from carm_advisor.trials.space import SearchSpace
from carm_advisor.tune.study import tune

# Two configurations: float32 (the baseline) and mixed_float16.
SPACE = SearchSpace(backends=("torch",), precisions=("float32", "mixed_float16"), batch_sizes=(32,),
                    layouts=("channels_last",), compilers={"torch": ("eager",)})


def _model():
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, name="conv")(inputs)
    return keras.Model(inputs, keras.layers.Dense(4, name="fc")(keras.layers.Flatten()(x)), name="small")


def _tune(tmp_path, **kwargs):
    return tune(_model(), n_trials=4, predict=True, progress=False, storage=str(tmp_path / "s.db"), space=SPACE,
                carm_pruning=False, **kwargs)


def _rendered(result) -> str:
    buf = io.StringIO()
    Console(file=buf, width=400).print(result)
    return buf.getvalue()


def test_the_device_names_the_embedded_profile_and_says_it_was_not_measured(tmp_path):
    result = _tune(tmp_path)
    d = result.to_dict()["device"]
    # The shipped default profile (load_profile(None)): nvidia_h200.json, recorded on the H200 test machine.
    assert d["measured"] is False and d["source"] == "profile"
    assert d["profile"] == "NVIDIA H200" and d["profile_source"] == "recorded"
    assert "name" not in d   # the name of a device that ran (benchmarks name result files by it)
    assert d["profile_from"] == "embedded" and d["profile_embedded"] == "nvidia_h200" and d["profile_path"] is None
    assert d["note"].startswith("not measured")
    text = _rendered(result)
    assert "device not measured: every figure is predicted from the embedded recorded profile of NVIDIA H200" in text


def test_a_profile_file_is_named_by_its_path(tmp_path):
    path = tmp_path / "my-profile.json"
    path.write_text(json.dumps(embedded_profile_doc()))
    d = _tune(tmp_path, profile=str(path)).to_dict()["device"]
    assert d["profile_from"] == "file" and d["profile_path"] == str(path) and d["measured"] is False
    assert str(path) in d["note"]


def test_the_count_of_predicted_configurations_is_not_called_measured(tmp_path):
    result = _tune(tmp_path)
    c = result.to_dict()["counts"]
    # 4 trials asked over 2 configurations: each predicted once, then the study stops (another trial could only
    # repeat one of them) and says so.
    assert c["trials"] == 2 and c["predicted"] == 2 and c["repeats_reused"] == 0
    assert c["measured"] == 0
    assert "all 2 configurations of the space were predicted; stopped after 2 trials (4 asked for)" in result.warnings
    text = _rendered(result)
    assert "2 configurations predicted (nothing measured), 0 repeats reused" in text
    assert "configurations measured" not in text


def test_a_predicted_summary_shows_no_rows_only_a_measurement_fills(tmp_path):
    text = _rendered(_tune(tmp_path))
    for measured_only in ("spread over windows", "output error vs float32", "top-1 agreement", "compile s"):
        assert measured_only not in text, measured_only
    assert "\n* top-1" not in text                                    # nor the note their * pointed to


def test_where_the_top_clock_is_best_the_clock_line_says_keep_it(tmp_path):
    result = _tune(tmp_path, objective="latency")
    clock = result.clock_recommendation
    top = clock["clocks"][0]["sm_clock_mhz"]
    # A lower SM clock never shortens a time on the DVFS model: the top clock is the latency pick.
    assert clock["recommended_sm_clock_mhz"] == top
    text = _rendered(result)
    assert f"keep the top clock ({top:g} MHz): no lower clock gives a better latency" in text and "lock at" not in text
