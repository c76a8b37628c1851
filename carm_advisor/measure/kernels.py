"""ctypes binding of kernels/carm_bench.h, and a thin loader of the TensorFlow op library.

The benchmark table (FLOPs and bytes per work item) lives in C; everything here reads it through
``carm_bench_describe`` so rates are never typed twice. ``KernelLibrary.run`` is cheap to repeat:
the library keeps its stream, events and device buffers between calls.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from carm_advisor.errors import GPUUnavailableError, KernelBuildError, MeasurementError

CARM_OK, CARM_ERR_NO_GPU, CARM_ERR_INVALID, CARM_ERR_UNSUPPORTED, CARM_ERR_CUDA = range(5)
ABI_VERSION = 1


class _Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 48), ("kind", ctypes.c_char * 16), ("carm_key", ctypes.c_char * 24),
                ("memory_key", ctypes.c_char * 16), ("variant", ctypes.c_char * 24),
                ("instruction", ctypes.c_char * 32), ("item", ctypes.c_char * 64),
                ("min_arch", ctypes.c_int), ("max_arch", ctypes.c_int),
                ("flops_per_item", ctypes.c_double), ("bytes_per_item", ctypes.c_double),
                ("intensity_param", ctypes.c_double), ("size_is_bytes", ctypes.c_int)]


class _Params(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("warmup_launches", ctypes.c_int), ("launches", ctypes.c_int),
                ("config", ctypes.c_int), ("size_bytes", ctypes.c_double), ("iterations", ctypes.c_longlong)]


class _Result(ctypes.Structure):
    _fields_ = [("flops", ctypes.c_double), ("bytes", ctypes.c_double), ("seconds", ctypes.c_double),
                ("work_items", ctypes.c_double), ("checksum", ctypes.c_double), ("size_bytes", ctypes.c_double),
                ("iterations", ctypes.c_longlong), ("launches", ctypes.c_int), ("grid_blocks", ctypes.c_int),
                ("block_threads", ctypes.c_int), ("dynamic_smem_bytes", ctypes.c_int)]


class _DeviceInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("cc_major", ctypes.c_int), ("cc_minor", ctypes.c_int),
                ("sm_count", ctypes.c_int), ("clock_khz", ctypes.c_int), ("memory_clock_khz", ctypes.c_int),
                ("memory_bus_bits", ctypes.c_int), ("l2_bytes", ctypes.c_longlong),
                ("smem_per_sm_bytes", ctypes.c_longlong), ("smem_per_block_optin_bytes", ctypes.c_longlong),
                ("global_mem_bytes", ctypes.c_longlong), ("max_threads_per_sm", ctypes.c_int),
                ("regs_per_sm", ctypes.c_int), ("compiled_arch", ctypes.c_int)]


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


def _s(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class KernelLibrary:
    """The loaded libcarm_bench.so. Use ``KernelLibrary.load()``; one instance per process is enough."""

    def __init__(self, lib: ctypes.CDLL, path: Path):
        self._lib = lib
        self.path = path
        lib.carm_abi_version.restype = ctypes.c_int
        lib.carm_bench_count.restype = ctypes.c_int
        lib.carm_bench_describe.argtypes = [ctypes.c_int, ctypes.POINTER(_Info)]
        lib.carm_bench_find.argtypes = [ctypes.c_char_p]
        lib.carm_bench_run.argtypes = [ctypes.c_int, ctypes.POINTER(_Params), ctypes.POINTER(_Result)]
        lib.carm_device_info.argtypes = [ctypes.c_int, ctypes.POINTER(_DeviceInfo)]
        lib.carm_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.carm_last_error.restype = ctypes.c_char_p
        version = lib.carm_abi_version()
        if version != ABI_VERSION:
            raise KernelBuildError(f"{path}: expected carm_bench ABI {ABI_VERSION}, received {version} (rebuild with force=True)")
        self._benchmarks = [self._describe(i) for i in range(lib.carm_bench_count())]
        self._by_name = {b.name: b for b in self._benchmarks}

    @classmethod
    def load(cls, path: str | Path | None = None, build_if_missing: bool = True, arch: str | None = None) -> "KernelLibrary":
        """Load ``path``, or the cached build for ``arch`` (built first when missing and allowed)."""
        if path is None:
            from carm_advisor.measure import build

            if not build_if_missing:
                raise KernelBuildError("no kernel library path given and build_if_missing=False")
            path = build.build_kernels(arch=arch, with_tf=False).lib_path
        path = Path(path)
        if not path.is_file():
            raise KernelBuildError(f"kernel library not found: expected a file at {path}")
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise KernelBuildError(f"cannot load {path}: {exc}") from exc
        return cls(lib, path)

    def _check(self, rc: int, what: str) -> None:
        if rc == CARM_OK:
            return
        msg = _s(self._lib.carm_last_error() or b"") or f"error code {rc}"
        if rc == CARM_ERR_NO_GPU:
            raise GPUUnavailableError(msg)
        raise MeasurementError(f"{what}: {msg}")

    def _describe(self, i: int) -> BenchmarkInfo:
        info = _Info()
        self._check(self._lib.carm_bench_describe(i, ctypes.byref(info)), "carm_bench_describe")
        return BenchmarkInfo(i, _s(info.name), _s(info.kind), _s(info.carm_key), _s(info.memory_key), _s(info.variant),
                             _s(info.instruction), _s(info.item), info.min_arch, info.max_arch, info.flops_per_item,
                             info.bytes_per_item, info.intensity_param, bool(info.size_is_bytes))

    def benchmarks(self) -> list[BenchmarkInfo]:
        return list(self._benchmarks)

    def benchmark(self, name_or_index: str | int) -> BenchmarkInfo:
        if isinstance(name_or_index, int):
            if not 0 <= name_or_index < len(self._benchmarks):
                raise MeasurementError(f"benchmark index out of range: expected 0..{len(self._benchmarks) - 1}, received {name_or_index}")
            return self._benchmarks[name_or_index]
        try:
            return self._by_name[name_or_index]
        except KeyError:
            raise MeasurementError(f"unknown benchmark: received {name_or_index!r}, expected one of {sorted(self._by_name)}") from None

    def device_count(self) -> int:
        n = ctypes.c_int(0)
        self._check(self._lib.carm_device_count(ctypes.byref(n)), "carm_device_count")
        return n.value

    def device_info(self, device: int = 0) -> DeviceInfo:
        d = _DeviceInfo()
        self._check(self._lib.carm_device_info(device, ctypes.byref(d)), "carm_device_info")
        return DeviceInfo(_s(d.name), d.cc_major, d.cc_minor, d.sm_count, d.clock_khz / 1e3, d.memory_clock_khz / 1e3,
                          d.memory_bus_bits, d.l2_bytes, d.smem_per_sm_bytes, d.smem_per_block_optin_bytes,
                          d.global_mem_bytes, d.max_threads_per_sm, d.regs_per_sm, d.compiled_arch)

    def run(self, name_or_index: str | int, *, device: int = 0, size: float = 0, iterations: int = 0,
            launches: int = 1, warmup: int = 1, config: int = 0) -> RunResult:
        """Run one benchmark. size: working set in bytes (memory and mixed rows; 0 = default from the
        device's L2 size); iterations: inner iterations or passes (0 = default); launches: timed launches."""
        b = self.benchmark(name_or_index)
        p = _Params(device=device, warmup_launches=warmup, launches=launches, config=config,
                    size_bytes=float(size), iterations=int(iterations))
        r = _Result()
        self._check(self._lib.carm_bench_run(b.index, ctypes.byref(p), ctypes.byref(r)), b.name)
        return RunResult(b.name, r.flops, r.bytes, r.seconds, r.work_items, r.checksum, r.size_bytes, r.iterations,
                         r.launches, r.grid_blocks, r.block_threads, r.dynamic_smem_bytes)

    def release(self) -> None:
        """Free the device buffers the library keeps between runs."""
        self._lib.carm_release()


def load_tf_ops(path: str | Path | None = None):
    """tf.load_op_library of the TF op library (built when missing); exposes carm_bench_run, carm_bench_count."""
    try:
        import tensorflow as tf  # lazy: the package never needs TensorFlow at import time
    except ImportError as exc:
        raise KernelBuildError(f"the TensorFlow op needs tensorflow installed: {exc}") from exc
    if path is None:
        from carm_advisor.measure import build

        path = build.build_kernels(with_tf=True).tf_op_path
    path = Path(path)
    if not path.is_file():
        raise KernelBuildError(f"TensorFlow op library not found: expected a file at {path}")
    try:
        return tf.load_op_library(str(path))
    except Exception as exc:  # TF raises NotFoundError/others for bad libraries
        raise KernelBuildError(f"tf.load_op_library({path}) failed: {exc}") from exc
