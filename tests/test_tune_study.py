"""tune() with hand-built CARM bounds and scripted measurements: baseline first, CARM pruning, OOM,
failures, constraints, repeats, Pareto front. Every expected figure is worked out in the comments."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

from stubs import ScriptedRunner, TablePredictor  # noqa: E402

from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.objective import carm_prune_reason
from carm_advisor.tune.objectives import OBJECTIVES  # noqa: E402
from carm_advisor.tune.records import TrialRecord
from carm_advisor.tune.study import tune

BASELINE = TrialConfig("torch", "float32", 32, "channels_last", "eager")


def space(precisions, batch_sizes=(32,)):
    return SearchSpace(backends=("torch",), precisions=tuple(precisions), batch_sizes=tuple(batch_sizes),
                       layouts=("channels_last",), compilers={"torch": ("eager",)})


def run(tmp_path, precisions, bounds, measured, n_trials=8, batch_sizes=(32,), **kwargs):
    runner = kwargs.pop("runner", None) or ScriptedRunner(measured)
    result = tune("vgg16", n_trials=n_trials, storage=str(tmp_path / "s.db"), space=space(precisions, batch_sizes),
                  baseline=BASELINE, runner=runner, predictor=TablePredictor(bounds), progress=False, **kwargs)
    return result, runner


# Batch 32, 1e9 FLOPs per sample: 32e9 FLOPs per batch. GFLOP/s per W = 32 / energy_j.
BOUNDS = {"float32": (0.010, 2.0), "float32_no_tf32": (0.050, 8.0), "mixed_bfloat16": (0.005, 1.0)}
#          bound GF/W:  16                 4                               32
MEASURED = {"float32": (0.02, 4.0, 0.0), "float32_no_tf32": (0.1, 16.0, 0.0), "mixed_bfloat16": (0.01, 2.0, 0.01)}
#          measured GF/W: 8                  2                                 16


def test_baseline_runs_first_then_the_best_carm_bound(tmp_path):
    result, runner = run(tmp_path, BOUNDS, BOUNDS, MEASURED)
    assert runner.calls[0] == BASELINE.key
    assert runner.calls[1] == "torch/mixed_bfloat16/b32/channels_last/eager/auto"  # bound 32 GF/W, the best
    assert result.trials[0].role == "baseline"


def test_a_configuration_whose_bound_cannot_beat_the_best_measured_is_pruned_unmeasured(tmp_path):
    result, runner = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=10)
    # float32_no_tf32: bound 4 GF/W, +10% = 4.4 < 8 measured by the baseline: never run.
    assert not any("float32_no_tf32" in k for k in runner.calls)
    pruned = [t for t in result.trials if t.pruned_reason == "carm_bound"]
    assert pruned and all(t.config.precision == "float32_no_tf32" for t in pruned)
    assert result.counts["pruned_by_carm"] == len(pruned)
    assert "cannot beat the best measured 16" in pruned[-1].pruned_detail or "cannot beat" in pruned[-1].pruned_detail
    # Best bf16: 16 GF/W over the baseline's 8: gain 2.0; samples/J 32/2 over 32/4: 2.0.
    assert result.best.config.precision == "mixed_bfloat16"
    assert result.gain() == pytest.approx(2.0)
    assert result.gain("samples_per_joule") == pytest.approx(2.0)
    # The whole space (3 configurations, the baseline aside): only no_tf32's bound (4.4 < 16) is ruled out.
    assert result.blind_search == {**result.blind_search, "grid_size": 3, "ruled_out_by_carm_bound": 1}


def test_prune_rule_by_hand():
    gfw = OBJECTIVES["gflops_per_watt"]
    assert carm_prune_reason([gfw], [9.0], [[10.0]], 0.10) is not None    # 9.9 cannot beat 10
    assert carm_prune_reason([gfw], [9.2], [[10.0]], 0.10) is None        # 10.12 might
    lat = OBJECTIVES["latency"]
    assert carm_prune_reason([lat], [0.12], [[0.10]], 0.10) is not None   # 0.109 s is still slower than 0.10 s
    assert carm_prune_reason([gfw], [1.0], [], 0.10) is None              # nothing measured yet: run it


def test_a_configuration_measured_before_is_not_measured_again(tmp_path):
    result, runner = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=10, carm_pruning=False)
    assert len(runner.calls) == len(set(runner.calls))
    assert result.counts["repeats_reused"] >= 1
    assert result.counts["complete"] == 10


def test_out_of_memory_prunes_the_trial_and_the_study_goes_on(tmp_path):
    bounds = {"float32": (0.010, 2.0), "mixed_bfloat16": (0.005, 1.0)}
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.01, 2.0, 0.0)}
    runner = ScriptedRunner(measured, oom_from_batch=64)
    result, _ = run(tmp_path, bounds, bounds, measured, n_trials=8, batch_sizes=(32, 64), runner=runner,
                    carm_pruning=False)
    oom = [t for t in result.trials if t.pruned_reason == "out_of_memory"]
    assert oom and all(t.state == "PRUNED" and t.config.batch_size == 64 for t in oom)
    assert len(result.trials) == 8 and result.best is not None and result.best.config.batch_size == 32


def test_a_failing_trial_is_recorded_failed_and_the_study_continues(tmp_path):
    bounds = {"float32": (0.010, 2.0), "mixed_float16": (0.005, 1.0)}
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_float16": (0.01, 2.0, 0.0)}
    runner = ScriptedRunner(measured, fail_precisions={"mixed_float16"})
    result, _ = run(tmp_path, bounds, bounds, measured, n_trials=5, runner=runner)
    failed = [t for t in result.trials if t.state == "FAIL"]
    assert failed and "worker died on mixed_float16" in failed[0].error
    assert len(result.trials) == 5 and result.best.config.precision == "float32"


def test_constraints_make_trials_over_the_error_or_slowdown_limit_infeasible(tmp_path):
    precisions = ("float32", "float32_tf32", "mixed_float16", "mixed_bfloat16")
    measured = {
        "float32": (0.020, 4.0, 0.0),          # 8 GF/W, 1600 samples/s: the baseline
        "float32_tf32": (0.015, 3.0, 0.001),   # 10.7 GF/W, feasible
        "mixed_bfloat16": (0.010, 2.0, 0.01),  # 16 GF/W, but output error 0.01 > 0.005: infeasible
        "mixed_float16": (0.040, 2.5, 0.0),    # 12.8 GF/W, but 800 samples/s: slowdown 2.0 > 1.2: infeasible
    }
    bounds = {p: (t / 2, e / 2) for p, (t, e, _) in measured.items()}
    result, runner = run(tmp_path, precisions, bounds, measured, n_trials=14, max_output_error=0.005,
                         max_slowdown=1.2)
    assert set(runner.calls) == {f"torch/{p}/b32/channels_last/eager/auto" for p in precisions}
    by_precision = {t.config.precision: t for t in result.trials if t.state == "COMPLETE" and t.repeat_of is None}
    assert not by_precision["mixed_bfloat16"].feasible and not by_precision["mixed_float16"].feasible
    assert by_precision["float32_tf32"].feasible
    assert result.best.config.precision == "float32_tf32"
    assert result.gain() == pytest.approx(4.0 / 3.0)   # 32/3 over 32/4


def _rec(n, values):
    return TrialRecord(number=n, state="COMPLETE", config=None, values=values, measurement=None, bound=None,
                       feasible=True)


def test_multi_objective_study_reports_its_front(tmp_path):
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.04, 1.0, 0.0), "float32_tf32": (0.04, 8.0, 0.0)}
    # samples/J, samples/s: float32 8, 1600; bf16 32, 800; tf32 4, 800 (dominated by float32)
    result, _ = run(tmp_path, measured, {p: (t, e) for p, (t, e, _) in measured.items()}, measured, n_trials=8,
                    objective=["samples_per_joule", "throughput"], carm_pruning=False)
    assert {t.config.precision for t in result.pareto} == {"float32", "mixed_bfloat16"}
    assert len(result.study.directions) == 2


def test_result_renders_and_writes_json(tmp_path):
    import io
    import json

    from rich.console import Console

    result, _ = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=4)
    out = io.StringIO()
    Console(file=out, width=160).print(result)
    text = out.getvalue()
    assert "FAKE" in text and "gain 2.00x in gflops_per_watt" in text
    result.to_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["source"] == "fake" and data["best"]["config"]["precision"] == "mixed_bfloat16"
    assert data["gain"]["gflops_per_watt"] == pytest.approx(2.0)


def test_resuming_the_same_study_adds_only_the_missing_trials(tmp_path):
    first, runner1 = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=3, carm_pruning=False)
    second, runner2 = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=6, carm_pruning=False)
    assert len(first.trials) == 3 and len(second.trials) == 6
    assert not set(runner2.calls) & set(runner1.calls)   # nothing measured twice across the two runs
    optuna.delete_study(study_name=second.study_name, storage=second.storage_url)


# --- several objectives: the best is a member of Optuna's front, picked by a stated rule -------------------

LAT_SPJ = ["latency", "samples_per_joule"]


def _rendered(result) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=250, color_system=None).print(result)
    return out.getvalue()


def test_a_best_beaten_in_both_objectives_is_never_reported(tmp_path):
    # float32 (the baseline, evaluated first): 0.02 s per batch, 32 / 4 J = 8 samples/J
    # bf16: the same 0.02 s, 32 / 2 J = 16 samples/J: as fast, twice as frugal: it dominates float32.
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.02, 2.0, 0.0)}
    bounds = {p: (t / 2, e / 2) for p, (t, e, _) in measured.items()}
    result, _ = run(tmp_path, measured, bounds, measured, n_trials=4, objective=LAT_SPJ, carm_pruning=False)
    assert [t.config.precision for t in result.pareto] == ["mixed_bfloat16"]
    assert result.best.config.precision == "mixed_bfloat16"
    assert result.best in result.pareto
    d = result.to_dict()
    assert d["best"]["key"] == "torch/mixed_bfloat16/b32/channels_last/eager/auto"
    assert [p["key"] for p in d["pareto"]] == [d["best"]["key"]]
    # the next best never repeats the best
    assert all(t is not result.best for t in result.next_best)


def test_a_first_objective_tie_to_the_shown_digits_goes_to_the_second_objective(tmp_path):
    # float32: 0.02 s, 8 samples/J; bf16: 0.0200000001 s (a float hair slower, shown as 0.02 too), 16 samples/J;
    # tf32: 0.03 s, 32 / 1 J = 32 samples/J. None dominates another: all three on the front. float32 is the
    # fastest by a hair, but bf16 ties with it to 4 significant digits and has twice its samples/J: bf16 is
    # the best. tf32's 32 samples/J does not count: its 0.03 s is no tie.
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.0200000001, 2.0, 0.0),
                "float32_tf32": (0.03, 1.0, 0.0)}
    bounds = {p: (t / 2, e / 2) for p, (t, e, _) in measured.items()}
    result, _ = run(tmp_path, measured, bounds, measured, n_trials=6, objective=LAT_SPJ, carm_pruning=False)
    assert {t.config.precision for t in result.pareto} == {"float32", "mixed_bfloat16", "float32_tf32"}
    assert result.best.config.precision == "mixed_bfloat16"


def test_the_summary_and_json_say_how_the_best_was_picked(tmp_path):
    measured = {"float32": (0.02, 4.0, 0.0), "mixed_bfloat16": (0.02, 2.0, 0.0)}
    bounds = {p: (t / 2, e / 2) for p, (t, e, _) in measured.items()}
    result, _ = run(tmp_path, measured, bounds, measured, n_trials=4, objective=LAT_SPJ, carm_pruning=False)
    stated = result.to_dict()["best_rule"]
    assert stated.startswith("the Pareto front member best in latency")
    assert "equal to 4 significant digits tie" in stated and "the best in samples_per_joule among them wins" in stated
    text = _rendered(result)
    assert f"best: {stated} (1 configuration on the front)" in text


def test_one_objective_needs_no_rule(tmp_path):
    result, _ = run(tmp_path, BOUNDS, BOUNDS, MEASURED, n_trials=4)
    assert result.best_rule is None and result.to_dict()["best_rule"] is None
    assert "best: the Pareto front" not in _rendered(result)


def test_pick_best_by_hand():
    from carm_advisor.tune.result import pick_best

    lat, spj, thr = OBJECTIVES["latency"], OBJECTIVES["samples_per_joule"], OBJECTIVES["throughput"]
    # latencies 1.0000 and 1.00001 tie to 4 digits; the second has more samples/J: it wins
    a, b, c = _rec(0, [1.0, 5.0]), _rec(1, [1.00001, 6.0]), _rec(2, [2.0, 9.0])
    assert pick_best([lat, spj], [a, b, c]).number == 1
    # 1.001 is no tie with 1.000 (4 digits: '1.001' vs '1'): the faster wins though less frugal
    d = _rec(3, [1.001, 50.0])
    assert pick_best([lat, spj], [a, d]).number == 0
    # maximised first objective, three objectives: throughput 100 ties; samples/J 7 ties; latency 0.5 < 0.6
    e, f = _rec(4, [100.0, 7.0, 0.6]), _rec(5, [100.0, 7.0, 0.5])
    assert pick_best([thr, spj, lat], [e, f]).number == 5
    # all equal: the earliest trial
    assert pick_best([lat, spj], [_rec(7, [1.0, 1.0]), _rec(6, [1.0, 1.0])]).number == 6
    assert pick_best([lat, spj], []) is None


# --- a model none of whose layers the CARM can cost: one line, no storage ---------------------------------

def _only(layer_fn, shape, name):
    import keras

    inputs = keras.Input(shape)
    return keras.Model(inputs, layer_fn(inputs), name=name)


def test_a_model_of_unknown_layers_only_is_refused_in_one_line(tmp_path):
    import keras

    from carm_advisor.errors import MappingError

    model = _only(keras.layers.Lambda(lambda t: t * 2.0, name="lam"), (8,), "onlylambda")
    with pytest.raises(MappingError) as exc:
        tune(model, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "l.db"))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("nothing to tune in onlylambda: no layer of the model could be costed "
                          "(no cost model for lam (Lambda))")
    assert not (tmp_path / "l.db").exists()   # refused before the storage is made


def test_a_model_of_views_only_is_refused_in_one_line(tmp_path):
    import keras

    from carm_advisor.errors import MappingError

    model = _only(lambda x: keras.layers.Flatten(name="flat")(keras.layers.Reshape((2, 8), name="resh")(x)),
                  (8, 2), "onlyviews")
    with pytest.raises(MappingError, match=r"^nothing to tune in onlyviews: no layer of the model does work the "
                                           r"CARM can cost \(resh \(Reshape\), flat \(Flatten\): views"):
        tune(model, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "v.db"))


def test_unknown_layers_are_named_up_to_four():
    from types import SimpleNamespace

    from carm_advisor.errors import MappingError
    from carm_advisor.models.builder import ModelSpec
    from carm_advisor.trials.predicted import Prediction
    from carm_advisor.tune.study_setup import check_costed

    rows = [SimpleNamespace(name=f"l{i}", type="Lambda", known=False) for i in range(6)]

    class Nothing:
        def predict(self, config):
            return Prediction(0.0, None, 0.0, 32, rows=rows)

    with pytest.raises(MappingError, match=r"no cost model for l0 \(Lambda\), l1 \(Lambda\), l2 \(Lambda\), "
                                           r"l3 \(Lambda\) and 2 more\)"):
        check_costed(ModelSpec("model", "", "six"), Nothing(), BASELINE)


def test_a_predicted_study_says_which_layers_no_value_counts(tmp_path):
    """A Lambda has no cost model: a predicted study's values leave it out, and its warnings say so in one line."""
    import keras

    from carm_advisor.tune.study import tune

    inputs = keras.Input((64,))
    x = keras.layers.Dense(64, name="fc1")(inputs)
    x = keras.layers.Lambda(lambda t: t * 2.0, name="double")(x)
    model = keras.Model(inputs, keras.layers.Dense(8, name="fc2")(x), name="lam")
    result = tune(model, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "s.db"), backends=("torch",))
    said = [w for w in result.warnings if "no cost model" in w]
    assert said == ["1 layer(s) have no cost model and are left out of every predicted value, so each is a lower "
                    "bound: double (Lambda)"]
    # its Dense layers carry the FLOPs, but a copy to quantise cannot be rebuilt from a Python lambda: not searched
    (quantized,) = [w for w in result.warnings if w.startswith("int8/float8 not searched")]
    assert "cannot rebuild 'lam'" in quantized and "Lambda" in quantized
    assert not {"int8", "float8"} & {t.config.precision for t in result.trials if t.config}


def test_a_fully_costed_model_has_no_such_line(tmp_path):
    import keras

    from carm_advisor.tune.study import tune

    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(8, name="fc")(inputs), name="plain")
    result = tune(model, n_trials=2, predict=True, progress=False, storage=str(tmp_path / "s.db"), backends=("torch",))
    assert not [w for w in result.warnings if "no cost model" in w]


def test_a_resumed_study_says_when_nothing_new_ran_and_refuses_another_space(tmp_path):
    first, _ = run(tmp_path, ["float32", "mixed_bfloat16"], BOUNDS, MEASURED, n_trials=2)
    assert not [w for w in first.warnings if "already holds" in w or "another search space" in w]
    again, runner = run(tmp_path, ["float32", "mixed_bfloat16"], BOUNDS, MEASURED, n_trials=2)
    assert any(w.startswith("the study already holds 2 finished trials and 2 were asked for in all: nothing new ran")
               for w in again.warnings)
    assert not any("another search space" in w for w in again.warnings)
    from carm_advisor.tune.fingerprint import StudyMismatchError

    # Optuna refuses new choices for a stored parameter: every new trial failed on "dynamic value space"
    with pytest.raises(StudyMismatchError, match=r"made with another search space \(precisions: stored "
                                                 r"\['float32', 'mixed_bfloat16'\], now \['float32', "
                                                 r"'mixed_bfloat16', 'float32_no_tf32'\]\)"):
        run(tmp_path, ["float32", "mixed_bfloat16", "float32_no_tf32"], BOUNDS, MEASURED, n_trials=3)
    more, _ = run(tmp_path, ["float32", "mixed_bfloat16"], BOUNDS, MEASURED, n_trials=3)
    assert not any("already holds" in w for w in more.warnings) and len(more.trials) == 3
