"""What a user reads in the tune panel: roofs named as analyze names them, throughput and time per batch said
apart, the two CARM pruning counts each with what it counts, figures in the units analyze prints them in.

The study is built by hand (no Optuna run): baseline tensorflow float32 at batch 32, 10 ms and 2 J a batch;
best at batch 256, 40 ms and 8 J a batch. Worked out: baseline 32 / 0.010 = 3200 samples/s, best 256 / 0.040 =
6400 samples/s, so 2.00x the throughput; a batch takes 0.040 / 0.010 = 4.00x as long."""

from __future__ import annotations

import io

from rich.console import Console

from carm_advisor.trials.space import SearchSpace, TrialConfig
from carm_advisor.tune.objectives import OBJECTIVES
from carm_advisor.tune.records import TrialRecord
from carm_advisor.tune.render import render
from carm_advisor.tune.result import TuneResult


def trial(number, batch_size, time_s, energy_j, precision="float32"):
    measurement = {"time_s": time_s, "energy_j": energy_j, "flops": 1e9 * batch_size, "batch_size": batch_size,
                   "source": "predicted", "power_w": energy_j / time_s}
    cfg = TrialConfig("tensorflow", precision, batch_size, "channels_last", "eager")
    return TrialRecord(number=number, state="COMPLETE", config=cfg, values=[batch_size / energy_j],
                       measurement=measurement, bound=None, feasible=True, value_source="CARM bound")


def study(**changes):
    baseline, best = trial(0, 32, 0.010, 2.0), trial(1, 256, 0.040, 8.0, "mixed_bfloat16")
    fields = {
        "objectives": [OBJECTIVES["samples_per_joule"]], "source": "predicted", "trials": [baseline, best],
        "baseline": baseline, "best": best, "next_best": [], "pareto": [best],
        "counts": {"trials": 12, "complete": 10, "measured": 0, "predicted": 10, "repeats_reused": 0,
                "pruned_by_carm": 2, "pruned_out_of_memory": 0, "failed": 0, "infeasible": 0},
        "blind_search": {"grid_size": 176, "ruled_out_by_carm_bound": 95},
        "layer_changes": [{"layer": "conv1_conv", "type": "Conv2D", "bound_before": "compute:tc_tf32",
                        "bound_after": "compute:tc_bf16", "path_before": "tc_tf32", "path_after": "tc_bf16",
                        "speedup": 2.0}],
        "clock_recommendation": None, "space": SearchSpace(backends=("tensorflow",)),
        "storage_url": "sqlite:///x.db", "study_name": "m", "device": {"name": "NVIDIA H200"},
    }
    fields.update(changes)
    return TuneResult(**fields)


def rendered(result, width=200) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width)
    for part in render(result):
        console.print(part)
    return buf.getvalue()


def test_layer_roofs_are_named_as_analyze_names_them_not_by_their_json_key():
    text = rendered(study())
    assert "TF32 Tensor Core" in text and "BF16 Tensor Core" in text
    assert "tc_tf32" not in text and "compute:" not in text


def test_a_memory_slope_is_named_as_analyze_names_it():
    change = {"layer": "pool", "type": "MaxPooling2D", "bound_before": "memory:hbm", "bound_after": "memory:l2",
              "path_before": "fp32", "path_after": "fp32", "speedup": 1.5}
    text = rendered(study(layer_changes=[change]))
    row = next(line for line in text.splitlines() if "pool" in line)
    assert "HBM" in row and "L2" in row and "memory:" not in row


def test_a_larger_batch_says_throughput_and_time_per_batch_apart():
    text = " ".join(rendered(study()).split())
    assert "throughput 2.00x the baseline's" in text
    assert "time per batch 4.00x the baseline's" in text
    assert "slowdown" not in text and "faster than the baseline" not in text


def test_the_same_batch_says_one_ratio_for_both():
    """Best at batch 32 too, 5 ms a batch: 2.00x the throughput and 0.50x the time per batch: one ratio."""
    best = trial(1, 32, 0.005, 1.0, "mixed_bfloat16")
    text = " ".join(rendered(study(best=best, trials=[study().baseline, best], pareto=[best])).split())
    assert "throughput 2.00x the baseline's" in text
    assert "time per batch 0.50x the baseline's" in text


def test_the_two_pruning_counts_say_what_each_counts():
    text = " ".join(rendered(study()).split())
    # the study's own: trials the sampler proposed that were not run
    assert "2 of the 12 trials the search proposed pruned by their CARM bound (not run)" in text
    # the whole space's: what a blind search would have run
    assert "of the 176 configurations of the whole space (clocks aside), the CARM bound rules out 95" in text


def test_throughput_and_samples_per_joule_read_as_analyze_prints_counts():
    """Baseline 3200 samples/s: '3.2 k', not '3200' in one place and '3.2e+03' in another."""
    text = rendered(study())
    row = next(line for line in text.splitlines() if line.strip("│ ").startswith("samples/s"))
    assert "3.2 k" in row and "6.4 k" in row and "e+" not in row


def test_the_objective_is_not_shown_twice_under_two_names():
    """Objective samples_per_joule: its row, not a second 'samples/J' row with the same figures."""
    rows = [line.strip("│ ") for line in rendered(study()).splitlines()]
    assert len([r for r in rows if r.startswith(("samples_per_joule", "samples/J"))]) == 1


def test_the_clock_advice_names_the_clock_it_is_compared_with_as_analyze_does():
    """tune said 'over the top clock' and analyze 'the time of the default clock (1980 MHz)' of the same clock (the
    profile's reference clock, the GPU's top one): one name, with its figure, in both."""
    clock = {"objective": "samples_per_joule", "source": "predicted", "recommended_sm_clock_mhz": 1005.0,
             "predicted_gain": 1.08, "clocks": [{"sm_clock_mhz": 1980.0}, {"sm_clock_mhz": 1005.0}]}
    text = " ".join(rendered(study(clock_recommendation=clock)).split())
    assert "over the top clock (1980 MHz)" in text


def test_the_gain_in_the_objective_is_not_repeated_under_another_name():
    """Objective samples_per_joule: 'gain 2.00x in samples_per_joule', not again as '2.00x samples/J'; another
    objective keeps the samples/J gain beside its own (16 -> 32 samples/J: 2.00x)."""
    text = " ".join(rendered(study()).split())
    assert "gain 2.00x in samples_per_joule" in text and "2.00x samples/J" not in text
    other = study(objectives=[OBJECTIVES["throughput"]])
    assert "2.00x samples/J" in " ".join(rendered(other).split())
