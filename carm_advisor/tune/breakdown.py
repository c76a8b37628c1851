"""Where the best configuration's time per batch goes, layer class by layer class on the CARM, and what would close
the distance to the roofs; with a reference (the same model run another way, measured by the user: a hand-written
PyTorch model, another framework), how far the best stands from it and where that distance can go.

A class's time is the sum of its rows' calibrated times where the calibration gives them, else their CARM bounds
(each class says which); its bound is the sum of its rows' CARM bounds, so time / bound is how far below its roofs
the class runs. The whole batch's time (measured where the trial was measured, else the calibrated or bound
prediction) less the layers' sum is what no layer accounts for: on an eager backend the host's dispatch of each
layer call, on any backend the launches between kernels.
"""

from __future__ import annotations

import math
from typing import Any

from carm_advisor.calibration.policy import MATMUL_CLASSES, layer_class

# What would bring a class nearer its roofs, by class (matmul classes apart: below).
CLASS_HINTS = {
    "attention": ("softmax(QK^T)V as separate kernels writes the score matrix to memory and back: a fused "
                  "attention kernel (keras.ops.dot_product_attention, flash attention where the backend has it) "
                  "keeps it on chip"),
    "softmax": ("memory-bound: fused with the matmul beside it by a compiled model (XLA, torch.compile) or a fused "
                "attention"),
    "normalization": "memory-bound: fused into the neighbouring kernels by a compiled model (XLA, torch.compile)",
    "elementwise": "memory-bound: fused into the neighbouring kernels by a compiled model (XLA, torch.compile)",
    "rotary": "memory-bound: fused into the projections beside it by a compiled model (XLA, torch.compile)",
    "embedding": "a gather bound by memory; little to win but a narrower dtype",
    "data-movement": "copies: a compiled model (XLA, torch.compile) folds most reshapes and transposes away",
    "pooling": "memory-bound: fused by a compiled model (XLA, torch.compile)",
}
MATMUL_HINT = ("below its Tensor Core roof: a larger batch fills the GPU, a compiled model (XLA, torch.compile) picks "
               "larger kernels, a 16-bit or quantised precision raises the roof")
HOST_HINT = ("outside every layer: the host's dispatch of each layer call (eager) and the launches between kernels; a "
             "compiled model (XLA, torch.compile) or one CUDA graph removes most of it")
SMALL_HINT = ("too little work per call for the GPU: the launch floor and dispatch dominate; a larger batch or a "
              "compiled model (fewer, larger kernels)")
# A class whose time is within AT_ROOF of its bound is at its roofs: nothing to say about it; beyond SMALL_CALLS its
# calls are too small for their work to set their time, whatever the class.
AT_ROOF = 1.25
SMALL_CALLS = 10.0


def time_by_class(rows, whole_s: float | None = None, whole_source: str | None = None) -> dict[str, Any] | None:
    """{"classes": [{"class", "layers", "time_s", "bound_s", "share", "below_roof", "source", "hint"}] (most time
    first), "layers_s", "whole_s", "outside_layers_s", "whole_source", "hint_outside"} of one configuration's rows (a
    Prediction's), per batch. None without a known row."""
    known = [r for r in rows if r.known and r.predicted_time_s]
    if not known:
        return None
    by: dict[str, dict[str, Any]] = {}
    for r in known:
        cls = layer_class(r.type)
        c = by.setdefault(cls, {"class": cls, "layers": 0, "time_s": 0.0, "bound_s": 0.0, "calibrated": 0})
        calibrated = getattr(r, "calibrated_time_s", None)
        c["layers"] += 1
        c["bound_s"] += r.predicted_time_s
        c["time_s"] += calibrated if calibrated else r.predicted_time_s
        c["calibrated"] += 1 if calibrated else 0
    layers_s = sum(c["time_s"] for c in by.values())
    whole = whole_s if whole_s and whole_s > 0 else layers_s
    outside = max(whole - layers_s, 0.0)
    classes = []
    for c in sorted(by.values(), key=lambda c: -c["time_s"]):
        below = c["time_s"] / c["bound_s"] if c["bound_s"] else math.nan
        source = ("calibrated prediction" if c["calibrated"] == c["layers"] else
                  "CARM bound" if not c["calibrated"] else f"calibrated for {c['calibrated']} of {c['layers']} layers")
        hint = None
        if below > SMALL_CALLS:
            hint = SMALL_HINT
        elif below > AT_ROOF:
            hint = MATMUL_HINT if c["class"] in MATMUL_CLASSES and c["class"] != "attention" else \
                CLASS_HINTS.get(c["class"], "below its roofs: a compiled model (XLA, torch.compile) fuses it")
        classes.append({"class": c["class"], "layers": c["layers"], "time_s": c["time_s"], "bound_s": c["bound_s"],
                        "share": c["time_s"] / whole, "below_roof": below, "source": source, "hint": hint})
    return {"classes": classes, "layers_s": layers_s, "whole_s": whole, "outside_layers_s": outside,
            "outside_share": outside / whole, "whole_source": whole_source or "the layers' sum",
            "hint_outside": HOST_HINT if outside / whole > 0.05 else None}


def parse_reference(text: str) -> tuple[str, float]:
    """(name, value) of "NAME=VALUE": a figure in the primary objective's unit, e.g. "hf-bert-bf16=25.7". ValueError
    in one line otherwise."""
    name, sep, value = str(text).rpartition("=")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not name.strip() or not math.isfinite(number) or number <= 0:
        raise ValueError(f"Expected a reference as NAME=VALUE with VALUE a positive number in the objective's unit "
                         f"(e.g. hf-bert-bf16=25.7), Received: {text!r}")
    return name.strip(), number


def reference_gap(best_value: float | None, reference: tuple[str, float], objective) -> dict[str, Any]:
    """The best against the reference, in the objective's direction: {"name", "value", "unit", "ratio" (best over
    reference for a maximised objective, reference over best for a minimised one: above 1 the best is better),
    "short": whether the best falls short of it}."""
    name, value = reference
    ratio = None
    if best_value:
        ratio = best_value / value if objective.direction == "maximize" else value / best_value
    return {"name": name, "value": value, "objective": objective.name, "unit": objective.unit, "ratio": ratio,
            "short": ratio is not None and ratio < 1.0}
