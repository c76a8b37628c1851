"""The one interface through which the ceilings runner reaches the kernels' C ABI (kernels/carm_bench.h).

Two implementations call the same ABI functions with the same arguments and return the same records
(measure/kernels.py): ``KernelLibrary`` through ctypes, ``TensorFlowOps`` through the TensorFlow custom
ops of kernels/tf_carm_ops.cc. ``open_binding`` builds (or reuses) and loads one by name.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from carm_advisor.errors import GPUUnavailableError, MeasurementError
from carm_advisor.models.keras_import import configured_backend

CARM_OK, CARM_ERR_NO_GPU, CARM_ERR_INVALID, CARM_ERR_UNSUPPORTED, CARM_ERR_CUDA = range(5)
ABI_VERSION = 1
BINDINGS = ("ctypes", "tensorflow")


@dataclass(frozen=True)
class BenchmarkInfo:
    """One row of the C benchmark table. flops = work_items * flops_per_item (1 multiply-add = 2)."""

    index: int
    name: str
    kind: str            # "compute" | "memory" | "mixed"
    carm_key: str        # compute roof (compute, mixed rows) or memory level (memory rows)
    memory_key: str      # level the bytes are counted at; "" for compute rows
    variant: str
    instruction: str
    item: str            # what one work item is
    min_arch: int        # 10*major + minor
    max_arch: int        # 0 = no upper bound
    flops_per_item: float
    bytes_per_item: float
    intensity_param: float  # mixed rows: compute iterations per loaded element
    size_is_bytes: bool     # run(size=...) is a working set in bytes

    @property
    def flops_per_byte(self) -> float | None:
        """Arithmetic intensity of one work item (None for compute-only rows)."""
        return self.flops_per_item / self.bytes_per_item if self.bytes_per_item else None

    def runs_on(self, arch: int) -> bool:
        return arch >= self.min_arch and (self.max_arch == 0 or arch <= self.max_arch)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    cc_major: int
    cc_minor: int
    sm_count: int
    clock_mhz: float
    memory_clock_mhz: float
    memory_bus_bits: int
    l2_bytes: int
    smem_per_sm_bytes: int
    smem_per_block_optin_bytes: int
    global_mem_bytes: int
    max_threads_per_sm: int
    regs_per_sm: int
    compiled_arch: int  # arch of the machine code this library runs on the device (0 = none)

    @property
    def arch(self) -> int:
        return self.cc_major * 10 + self.cc_minor


@dataclass(frozen=True)
class RunResult:
    """Totals over the timed launches of one run; seconds from CUDA events."""

    name: str
    flops: float
    bytes: float
    seconds: float
    work_items: float
    checksum: float
    size_bytes: float
    iterations: int
    launches: int
    grid_blocks: int
    block_threads: int
    dynamic_smem_bytes: int

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


def raise_for_status(rc: int, message: str, what: str) -> None:
    """The one translation of a carm_bench.h status into the package's errors, for every binding."""
    if rc == CARM_OK:
        return
    message = message or f"error code {rc}"
    if rc == CARM_ERR_NO_GPU:
        raise GPUUnavailableError(message)
    raise MeasurementError(f"{what}: {message}")


class Binding(ABC):
    """A loaded build of the C ABI. ``path`` is the C library itself (the counter check's child process
    loads it); ``source_hash`` names the kernel sources it was built from, when known.

    Implementations call the ABI function of the same name with the same arguments and return the same
    records, so the ceilings runner cannot tell them apart (tests/test_binding_contract.py).
    """

    path: Path
    source_hash: str | None = None

    @abstractmethod
    def benchmarks(self) -> list[BenchmarkInfo]:
        """Every row of the benchmark table (carm_bench_count, carm_bench_describe), in index order."""

    @abstractmethod
    def device_count(self) -> int:
        """carm_device_count."""

    @abstractmethod
    def device_info(self, device: int = 0) -> DeviceInfo:
        """carm_device_info."""

    @abstractmethod
    def _run(self, index: int, *, device: int, size_bytes: float, iterations: int, launches: int, warmup: int,
             config: int) -> tuple:
        """carm_bench_run: (rc, message, the 11 fields of carm_bench_result in header order)."""

    @abstractmethod
    def release(self) -> None:
        """Free the device buffers the library keeps between runs (carm_release)."""

    def benchmark(self, name_or_index: str | int) -> BenchmarkInfo:
        table = self.benchmarks()
        if isinstance(name_or_index, int):
            if not 0 <= name_or_index < len(table):
                raise MeasurementError(f"benchmark index out of range: expected 0..{len(table) - 1}, received {name_or_index}")
            return table[name_or_index]
        found = next((b for b in table if b.name == name_or_index), None)
        if found is None:
            raise MeasurementError(f"unknown benchmark: received {name_or_index!r}, expected one of {sorted(b.name for b in table)}")
        return found

    def run(self, name_or_index: str | int, *, device: int = 0, size: float = 0, iterations: int = 0,
            launches: int = 1, warmup: int = 1, config: int = 0) -> RunResult:
        """Run one benchmark. size: working set in bytes (memory and mixed rows; 0 = default from the
        device's L2 size); iterations: inner iterations or passes (0 = default); launches: timed launches;
        warmup: untimed launches first; config: 0 = default (wgmma rows: warpgroups per CTA)."""
        b = self.benchmark(name_or_index)
        rc, message, *fields = self._run(b.index, device=int(device), size_bytes=float(size), iterations=int(iterations),
                                         launches=int(launches), warmup=int(warmup), config=int(config))
        raise_for_status(rc, message, b.name)
        return RunResult(b.name, *fields)


def default_binding() -> str:
    """'tensorflow' when Keras runs on TensorFlow and TensorFlow is importable, else 'ctypes'."""
    if importlib.util.find_spec("tensorflow") is None:
        return "ctypes"
    backend = os.environ.get("KERAS_BACKEND")
    if backend is None:
        keras = sys.modules.get("keras")
        # Not imported yet: read Keras' own setting rather than import it (and TensorFlow, seconds) here.
        backend = keras.backend.backend() if keras is not None else configured_backend()
    return "tensorflow" if backend == "tensorflow" else "ctypes"
