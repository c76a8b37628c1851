"""A model's whole measurement as `analyze` takes it: every layer, then the whole model (inference, a training
step, a CUDA-graph replay), and Nsight Compute's counters where asked for, in one record."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from carm_advisor.measure.counters import measure_counters
from carm_advisor.measure.layers import measure_layers_with
from carm_advisor.measure.model import measure_model_graph_with, measure_model_with
from carm_advisor.measure.records import RunMeasurement
from carm_advisor.measure.windows import MeasureOptions, RunWindows
from carm_advisor.power._base import GPU

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.12


def measure_run(
    model,
    *,
    batch_size: int,
    gpu: GPU | None = None,
    training_step: bool = True,
    counters: bool = False,
    progress: bool = True,
    only: Collection[str] | None = None,
    command: str | None = None,
    graphs: bool = True,
    **windows: Unpack[RunWindows],
) -> RunMeasurement:
    """Every layer, then the whole model (inference and a training step), in one record.

    `min_window_s` / `repeats` override the preset's layer windows, `model_min_window_s` /
    `model_repeats` its whole-model windows.

    torch on a CUDA GPU (unless graphs=False): layers are replayed from CUDA graphs
    (execution="cuda_graph") and `inference_graph` holds the whole model replayed from one graph,
    with the layer windows; `inference` stays eager, as the user runs the model.

    counters=True also runs the layers under Nsight Compute (measure/counters.py) when `ncu` is on
    PATH, and attaches per-layer FLOPs, bytes and intensities; without ncu they stay None and
    `intensity_source` stays "analytic".
    """
    start_s = time.perf_counter()
    o = MeasureOptions.resolve(**windows)
    run = measure_layers_with(model, batch_size, gpu, o, progress=progress, only=only, command=command,
                              graphs=graphs)
    run.inference, run.training_step = measure_model_with(model, batch_size, gpu, o, training_step=training_step)
    if graphs:
        run.inference_graph = measure_model_graph_with(model, batch_size, gpu, o)
    run.settings.update(model_window_s=o.model_window_s, model_repeats=o.model_repeats)
    if counters:
        run.attach_counters(measure_counters(model, batch_size=batch_size, only=only))
    run.wall_s = time.perf_counter() - start_s
    return run
