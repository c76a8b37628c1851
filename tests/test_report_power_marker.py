"""A layer whose CARM bound time the power limit stretched (its row's notes say so) is marked in analyze's layer
table and in the tuner's "layers baseline -> best" table, with a legend line: its bound time is then longer than
FLOPs / attainable, which the tables otherwise invite a reader to expect."""

from __future__ import annotations

import io
import re

import keras
from rich.console import Console

import carm_advisor as advisor
from carm_advisor.report.render import bound_label, print_report
from carm_advisor.trials.space import SearchSpace
from carm_advisor.tune.study import tune

POWER_MARK = "\u2021"   # double dagger (the dagger marks recurrent layers' times)


def _model():
    # VGG16's block1_conv2 (64 -> 64 channels, 3x3, 224x224): compute-bound on TF32 Tensor Cores, at the power
    # limit on the H200 profile; a pool (memory-bound) and a dense layer beside it.
    inputs = keras.Input((224, 224, 64))
    x = keras.layers.Conv2D(64, 3, padding="same", name="conv")(inputs)
    x = keras.layers.MaxPooling2D(name="pool")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="fc")(x), name="capped")


def _stretched(row) -> bool:
    """The bound time exceeds FLOPs / attainable: the roofs alone would give that time."""
    return bool(row.flops and row.attainable_flops_per_s
                and row.predicted_time_s > 1.001 * row.flops / row.attainable_flops_per_s)


def _line(lines, name):
    return next(line for line in lines if line.lstrip("│ ").startswith(name + " "))


def test_analyze_marks_the_bound_times_the_power_limit_stretched_and_explains_the_mark():
    report = advisor.analyze(_model(), batch_size=32, measure=False)
    rows = {r.name: r for r in report.layers}
    assert _stretched(rows["conv"]) and not _stretched(rows["pool"])
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=200))
    lines = buf.getvalue().splitlines()
    for name, row in rows.items():
        if row.flops or row.bytes:
            assert (POWER_MARK in _line(lines, name)) == _stretched(row), name
    legend = [i for i, line in enumerate(lines) if line.startswith(POWER_MARK)]
    assert len(legend) == 1   # the legend, wrapped under the table
    text = " ".join(line.strip() for line in lines[legend[0]:legend[0] + 3])
    assert "power limit" in text and "longer than FLOPs / attainable" in text


def test_a_table_without_a_stretched_bound_has_no_mark_and_no_legend():
    inputs = keras.Input((64,))
    report = advisor.analyze(keras.Model(inputs, keras.layers.Dense(64, name="fc")(inputs)), measure=False)
    assert not any(_stretched(r) for r in report.layers)
    buf = io.StringIO()
    print_report(report, Console(file=buf, width=200))
    assert POWER_MARK not in buf.getvalue()


def test_the_tuners_layer_table_marks_the_roofs_whose_bound_time_the_power_limit_stretched(tmp_path):
    space = SearchSpace(backends=("torch",), precisions=("float32", "mixed_bfloat16"), batch_sizes=(32,),
                        layouts=("channels_last",), compilers={"torch": ("eager",)})
    result = tune(_model(), n_trials=2, predict=True, progress=False, storage=str(tmp_path / "s.db"), space=space,
                  carm_pruning=False)
    changes = {c["layer"]: c for c in result.layer_changes}
    assert changes["conv"]["power_limited_before"] and not changes["pool"]["power_limited_before"]
    buf = io.StringIO()
    Console(file=buf, width=200).print(result)
    lines = buf.getvalue().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "layers baseline -> best" in line):]
    conv, pool = _line(table, "conv"), _line(table, "pool")
    # the roofs by name, as analyze names them ("TF32 Tensor Core"), each marked where its bound was stretched
    before, after = (bound_label(changes["conv"][k]) for k in ("bound_before", "bound_after"))
    cells = re.search(rf"{re.escape(before)}({POWER_MARK})?\s+{re.escape(after)}({POWER_MARK})?\s", conv)
    assert cells and cells.group(1) and POWER_MARK not in pool
    assert bool(cells.group(2)) == changes["conv"]["power_limited_after"]
    assert any(line.startswith(POWER_MARK) and "power limit" in line for line in table)
