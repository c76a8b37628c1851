"""What a study optimises: small strategy classes, one per `--objective` (zeus' OptimumSelector style).

Every objective reads one `Measurement` (measured or predicted: a batch of `batch_size` samples in
`time_s` seconds for `energy_j` joules, `flops` FLOPs, 1 multiply-add = 2 FLOPs) and says whether
larger is better. Nothing here knows how the figures were obtained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Figures(Protocol):
    """Per-batch figures of one configuration. Units: s, J, FLOP, samples."""

    time_s: float
    energy_j: float | None
    flops: float
    batch_size: int


@dataclass(frozen=True)
class Objective:
    """One figure of merit; `direction` is Optuna's ('maximize' or 'minimize')."""

    name: str
    direction: str
    unit: str
    description: str

    def value(self, m: Figures) -> float:
        raise NotImplementedError

    def better(self, a: float, b: float) -> bool:
        """Whether value a is strictly better than value b."""
        return a > b if self.direction == "maximize" else a < b

    def gain(self, value: float, baseline: float) -> float:
        """How many times better `value` is than `baseline` (>1: better), whatever the direction."""
        if not baseline or not value:
            return math.nan
        return value / baseline if self.direction == "maximize" else baseline / value

    def select(self, values: Sequence[float]) -> int:
        """Index of the best of several values (NaN never wins)."""
        finite = [i for i, v in enumerate(values) if v == v]
        if not finite:
            raise ValueError("Expected at least one finite objective value, Received: none")
        pick = max if self.direction == "maximize" else min
        return pick(finite, key=lambda i: values[i])


def _energy(m: Figures) -> float:
    if m.energy_j is None or not m.energy_j > 0:
        return math.nan
    return m.energy_j


class GflopsPerWatt(Objective):
    def value(self, m: Figures) -> float:
        return m.flops / _energy(m) / 1e9  # GFLOP/s per W is GFLOP per J


class SamplesPerJoule(Objective):
    def value(self, m: Figures) -> float:
        return m.batch_size / _energy(m)


class Throughput(Objective):
    def value(self, m: Figures) -> float:
        return m.batch_size / m.time_s


class Latency(Objective):
    def value(self, m: Figures) -> float:
        return m.time_s  # of one call on one batch: smaller batches win on latency


class EnergyDelayProduct(Objective):
    def value(self, m: Figures) -> float:
        # Per sample: joules per sample times seconds per sample, so batch sizes compare fairly.
        return (_energy(m) / m.batch_size) * (m.time_s / m.batch_size)


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        GflopsPerWatt("gflops_per_watt", "maximize", "GFLOP/s per W", "FLOPs per joule (GFLOP/s per W)"),
        SamplesPerJoule("samples_per_joule", "maximize", "samples/J", "samples per joule"),
        Throughput("throughput", "maximize", "samples/s", "samples per second"),
        Latency("latency", "minimize", "s per batch", "seconds per call of one batch"),
        EnergyDelayProduct("edp", "minimize", "J*s per sample^2", "energy-delay product per sample"),
    )
}

# --pareto: energy efficiency against speed.
PARETO_DEFAULT = ("gflops_per_watt", "throughput")


def get_objective(name: str) -> Objective:
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, received: {name!r}") from None
