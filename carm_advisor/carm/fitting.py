"""Pure CARM fitting: from benchmark runs (plain records) to roofs, a power model and the sweep fitness.

Where several variants measure one roof (random vs zero data, HBM read/write/copy, ld.global vs TMA
bulk copies, L2 partition vs whole), the roof is the highest: a roof is an upper bound; variants whose
counters see less work than they declare are left out first. The power model: constant = idle power,
e_flop[path] = (P - idle) / FLOP rate of the random-data variant, e_byte[level] = (P - idle) / byte rate.
No hardware here: measure/ceilings.py produces the runs, measure/profile.py turns a selection into a Profile.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from typing import Any

from carm_advisor.carm.roofline import COMPUTE_PATHS, MEMORY_LEVELS

# Work per SM per clock, by compute capability (10*major+minor): FLOP (or OP) for compute paths,
# bytes for shared memory. From the architecture whitepapers' per-SM unit counts (dense Tensor Core).
PER_SM_PER_CLOCK: dict[int, dict[str, float]] = {
    90: {"fp64": 128, "fp32": 256, "fp16x2": 512, "tc_tf32": 2048, "tc_fp16": 4096, "tc_fp16_f16acc": 4096,
         "tc_bf16": 4096, "tc_fp8_e4m3": 8192, "tc_fp8_e5m2": 8192, "tc_int8": 8192, "shared": 128, "l1": 128},
    89: {"fp64": 4, "fp32": 256, "fp16x2": 256, "tc_tf32": 512, "tc_fp16": 1024, "tc_fp16_f16acc": 2048,
         "tc_bf16": 1024, "tc_fp8_e4m3": 2048, "tc_fp8_e5m2": 2048, "tc_int8": 2048, "shared": 128, "l1": 128},
    86: {"fp64": 4, "fp32": 256, "fp16x2": 256, "tc_tf32": 512, "tc_fp16": 1024, "tc_fp16_f16acc": 2048,
         "tc_bf16": 1024, "tc_int8": 2048, "shared": 128, "l1": 128},
    80: {"fp64": 64, "fp32": 128, "fp16x2": 512, "tc_tf32": 1024, "tc_fp16": 2048, "tc_fp16_f16acc": 2048,
         "tc_bf16": 2048, "tc_int8": 4096, "shared": 128, "l1": 128},
}
# A measurement this far above its per-clock maximum is a benchmark bug, not a fast GPU.
PER_CLOCK_TOLERANCE = 1.01


# Counters may see this much less work than a benchmark declares before its rate is distrusted
# (measure/verify.py judges its rows with the same tolerance).
COUNTER_TOLERANCE = 0.05


@dataclass
class BenchmarkRun:
    """One benchmark's measured figures: what measure/ceilings.py returns, a profile's "benchmarks" row."""

    name: str
    kind: str
    key: str
    memory_key: str
    variant: str
    rate: float                  # FLOP/s (compute, mixed) or B/s (memory)
    spread: float
    repeats: int
    power_w: float | None
    sm_clock_mhz: float | None
    seconds_per_call: float
    flops_per_s: float = 0.0
    bytes_per_s: float = 0.0
    intensity: float | None = None   # FLOP/byte, mixed rows
    per_clock_max: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def per_clock_max(key: str, arch: int, sm_count: int, sm_clock_mhz: float | None) -> float | None:
    per = PER_SM_PER_CLOCK.get(arch, {}).get(key)
    if per is None or not sm_clock_mhz:
        return None
    return per * sm_count * sm_clock_mhz * 1e6


def best_runs(runs: list[BenchmarkRun]) -> dict[str, BenchmarkRun]:
    """The highest-rate run of each roof key (compute) and level (memory)."""
    best: dict[str, BenchmarkRun] = {}
    for r in runs:
        if r.kind not in ("compute", "memory"):
            continue
        if r.key not in best or r.rate > best[r.key].rate:
            best[r.key] = r
    return best


def fit_power_model(runs: list[BenchmarkRun], idle_w: float | None, power_limit_w: float | None,
                    date: str | None = None) -> dict | None:
    if idle_w is None:
        return None
    e_flop: dict[str, float] = {}
    e_byte: dict[str, float] = {}
    for r in runs:
        if r.power_w is None or r.kind == "mixed":
            continue
        if r.kind == "compute" and r.variant == "zero":
            continue   # random data is what real layers feed the Tensor Cores
        dynamic_w = max(r.power_w - idle_w, 0.0)
        if r.kind == "compute":
            value = dynamic_w / r.flops_per_s
            e_flop[r.key] = max(e_flop.get(r.key, 0.0), value)
        else:
            value = dynamic_w / r.bytes_per_s
            e_byte[r.key] = max(e_byte.get(r.key, 0.0), value)
    return {
        "constant_w": idle_w,
        "power_limit_w": power_limit_w if power_limit_w and power_limit_w > idle_w else None,
        "joules_per_flop": e_flop,
        "joules_per_byte": e_byte,
        "provenance": {
            "source": "measured",
            "method": "constant_w = idle power before the run (NVML energy counter over 0.5 s); "
                      "e[path or level] = (average power of its benchmark - idle) / its rate, random-data variants",
            "date": date or _dt.date.today().isoformat(),   # the day the runs were measured
        },
    }


def sweep_fitness(runs: list[BenchmarkRun], peaks: dict[str, float], slopes: dict[str, float],
                  tolerance: float = 0.10) -> dict[str, Any]:
    """Fraction of mixed-intensity points within `tolerance` of min(roof, slope * AI).

    A point is one (compute path, memory level, AI); where several implementations measure it (4, 8 or 16
    loads per step, TMA-fed), the fastest stands for it, as the fastest variant stands for a roof. Any
    implementation above the roofs is listed in above_roofs: a roof that a kernel beats is wrong.
    Each point keeps the SM clock seen while it ran (the sweep's 50 ms calls are too short for the
    NVML energy counter, so no power is recorded for them).
    """
    points = []
    for r in runs:
        if r.kind != "mixed" or not r.intensity or r.key not in peaks or r.memory_key not in slopes:
            continue
        bound = min(peaks[r.key], slopes[r.memory_key] * r.intensity)
        points.append({"name": r.name, "path": r.key, "level": r.memory_key, "ai": r.intensity,
                       "flops_per_s": r.flops_per_s, "bound_flops_per_s": bound, "ratio": r.flops_per_s / bound,
                       "sm_clock_mhz": r.sm_clock_mhz})
    if not points:
        return {"fitness": None, "points": []}
    best: dict[tuple, dict] = {}
    for p in points:
        group = (p["path"], p["level"], round(math.log2(p["ai"]), 3))
        if group not in best or p["ratio"] > best[group]["ratio"]:
            best[group] = p
    for p in points:
        p["stands_for_point"] = any(b is p for b in best.values())
    within = sum(1 for p in best.values() if abs(p["ratio"] - 1) <= tolerance)
    return {"fitness": within / len(best), "tolerance": tolerance, "sweep_points": len(best), "points": points,
            "missed": sorted(p["name"] for p in best.values() if abs(p["ratio"] - 1) > tolerance),
            "above_roofs": [p["name"] for p in points if p["ratio"] > 1 + tolerance]}


def select_roofs(runs: list[BenchmarkRun], counter_check, idle_w: float | None, power_limit_w: float | None,
                 date: str, drop: dict[str, str] | None = None) -> dict[str, Any]:
    """The roofs, power model and sweep fitness that a set of benchmark runs supports.

    Left out first: runs the counters undercount, and `drop` ({name: reason}), runs known to be flawed.
    Returns {"ceilings", "flags", "power_model", "sweep"}; the flags also name every counter deviation.
    """
    flags = []
    untrusted = undercounted(counter_check)
    for name in sorted(untrusted):
        flags.append(f"{name}: left out of roofs and sweep: the counters see less work at its level than it declares")
    for name, reason in sorted((drop or {}).items()):
        flags.append(f"{name}: left out of roofs and sweep: {reason}")
    trusted = [r for r in runs if r.name not in untrusted and r.name not in (drop or {})]
    ceilings = {}
    for key, r in best_runs(trusted).items():
        if key not in COMPUTE_PATHS and key not in MEMORY_LEVELS:
            continue
        ratio = r.rate / r.per_clock_max if r.per_clock_max else None
        if ratio is not None and ratio > PER_CLOCK_TOLERANCE:
            flags.append(f"{r.name}: {ratio:.3f}x its per-clock maximum at {r.sm_clock_mhz:.0f} MHz (benchmark bug)")
        ceilings[key] = {
            "kind": "compute" if key in COMPUTE_PATHS else "memory",
            "value": r.rate, "sm_clock_mhz": r.sm_clock_mhz, "power_w": r.power_w, "repeats": r.repeats,
            "spread": r.spread,
            "provenance": {"source": "measured", "method": f"carm micro-benchmark {r.name} ({r.variant})",
                           "date": date, "per_clock_max_ratio": ratio},
        }
    peaks = {k: c["value"] for k, c in ceilings.items() if c["kind"] == "compute"}
    slopes = {k: c["value"] for k, c in ceilings.items() if c["kind"] == "memory"}
    pm = fit_power_model(trusted, idle_w, power_limit_w, date)
    flags += [f"{r['name']}: counters see flops x{r['flops_ratio']}, bytes x{r['bytes_ratio']} of what it declares"
              for r in counter_check or [] if not r["ok"]]
    return {"ceilings": ceilings, "flags": flags, "sweep": sweep_fitness(trusted, peaks, slopes),
            "power_model": pm if pm and pm["joules_per_flop"] and pm["joules_per_byte"] else None}


def undercounted(counter_check) -> set[str]:
    """Benchmarks whose Nsight Compute counters see fewer FLOPs, or fewer bytes at their level, than the
    table declares (beyond the check's tolerance): their rates would be inflated, so no roof or sweep point
    may rest on them. More bytes than declared (instruction fetches, say) only understates a rate."""
    out = set()
    for row in counter_check or []:
        ratios = [row.get("flops_ratio"), row.get("bytes_ratio")]
        if any(r is not None and r < 1 - COUNTER_TOLERANCE for r in ratios):
            out.add(row["name"])
    return out
