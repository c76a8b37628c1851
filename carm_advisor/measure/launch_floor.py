"""The launch + synchronisation floor: the shortest time one kernel call takes on this GPU, however
little work it does. The roofs alone predict nanoseconds for a tiny layer; no kernel finishes that fast.

Measured through the existing C ABI (no kernel of its own): the cheapest CUDA-core compute benchmark,
run with one inner iteration and one launch, ends each call on a CUDA event synchronisation; the floor
is the median host time of many such calls (launch, a near-empty kernel, sync), as a framework's
layer call sees it. The CUDA-event time of the same calls (GPU side only) is kept beside it.
"""

from __future__ import annotations

import statistics
import time

from carm_advisor.errors import MeasurementError
from carm_advisor.power.energy import relative_spread

REPEATS = 200
# Near-empty with 1 inner iteration; CUDA-core FMA rows run on every architecture we support.
_PREFERRED = ("fp32_fma", "fp64_fma", "fp16x2_fma")


def floor_benchmark(lib, arch: int | None = None):
    compute = [b for b in lib.benchmarks() if b.kind == "compute" and (arch is None or b.runs_on(arch))]
    for name in _PREFERRED:
        for b in compute:
            if b.name == name:
                return b
    if not compute:
        raise MeasurementError("no compute benchmark to time the launch floor with")
    return compute[0]


def measure_launch_floor(lib, device: int = 0, repeats: int = REPEATS, arch: int | None = None,
                         clock=time.perf_counter) -> dict:
    """{"value_s": median host seconds of one launch + sync, "provenance": {...}}, the profile's launch_floor."""
    bench = floor_benchmark(lib, arch)
    lib.run(bench.name, device=device, iterations=1, launches=1, warmup=1)   # first-call costs are not the floor
    host_s, gpu_s = [], []
    for _ in range(repeats):
        t0 = clock()
        result = lib.run(bench.name, device=device, iterations=1, launches=1, warmup=0)
        host_s.append(clock() - t0)
        gpu_s.append(result.seconds)
    return {
        "value_s": statistics.median(host_s),
        "provenance": {
            "source": "measured",
            "method": f"median host time of {repeats} calls of {bench.name} with 1 inner iteration, "
                      "each one launch + CUDA event synchronisation (carm_bench_run)",
            "benchmark": bench.name,
            "repeats": repeats,
            "spread": relative_spread(host_s),
            "gpu_time_s": statistics.median(gpu_s),
        },
    }
