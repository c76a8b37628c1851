"""The two bindings of kernels/carm_bench.h (measure/binding.py's interface): ctypes and the
TensorFlow custom ops. The only place that loads native code (ctypes, tf.load_op_library).

The benchmark table (FLOPs and bytes per work item) lives in C; both bindings read it through
``carm_bench_describe`` so rates are never typed twice. ``run`` is cheap to repeat: the library keeps
its stream, events and device buffers between calls.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

from carm_advisor.errors import KernelBuildError
from carm_advisor.measure.binding import (  # noqa: F401  (the records are re-exported: callers import them here)
    ABI_VERSION,
    BINDINGS,
    CARM_ERR_CUDA,
    CARM_ERR_INVALID,
    CARM_ERR_NO_GPU,
    CARM_ERR_UNSUPPORTED,
    CARM_OK,
    BenchmarkInfo,
    Binding,
    DeviceInfo,
    RunResult,
    default_binding,
    raise_for_status,
)
from carm_advisor.measure.build import LIB_NAME


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


def _s(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class KernelLibrary(Binding):
    """The loaded libcarm_bench.so, through ctypes. Use ``KernelLibrary.load()``; one per process is enough."""

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

    @classmethod
    def load(cls, path: str | Path | None = None, build_if_missing: bool = True, arch: str | None = None) -> KernelLibrary:
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

    def _message(self, rc: int) -> str:
        return _s(self._lib.carm_last_error() or b"") if rc != CARM_OK else ""

    def _check(self, rc: int, what: str) -> None:
        raise_for_status(rc, self._message(rc), what)

    def _describe(self, i: int) -> BenchmarkInfo:
        info = _Info()
        self._check(self._lib.carm_bench_describe(i, ctypes.byref(info)), "carm_bench_describe")
        return BenchmarkInfo(i, _s(info.name), _s(info.kind), _s(info.carm_key), _s(info.memory_key), _s(info.variant),
                             _s(info.instruction), _s(info.item), info.min_arch, info.max_arch, info.flops_per_item,
                             info.bytes_per_item, info.intensity_param, bool(info.size_is_bytes))

    def benchmarks(self) -> list[BenchmarkInfo]:
        return list(self._benchmarks)

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

    def _run(self, index: int, *, device: int, size_bytes: float, iterations: int, launches: int, warmup: int,
             config: int) -> tuple:
        p = _Params(device=device, warmup_launches=warmup, launches=launches, config=config,
                    size_bytes=size_bytes, iterations=iterations)
        r = _Result()
        rc = self._lib.carm_bench_run(index, ctypes.byref(p), ctypes.byref(r))
        return (rc, self._message(rc), r.flops, r.bytes, r.seconds, r.work_items, r.checksum, r.size_bytes, r.iterations,
                r.launches, r.grid_blocks, r.block_threads, r.dynamic_smem_bytes)

    def release(self) -> None:
        self._lib.carm_release()


def load_tf_ops(path: str | Path | None = None):
    """tf.load_op_library of the TF op library (built when missing): one op per function of carm_bench.h
    (carm_abi_version, carm_bench_count, carm_bench_describe, carm_bench_run, carm_device_count,
    carm_device_info, carm_release)."""
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


# What a status of carm_bench.h becomes in kernels/tf_carm_ops.cc (status_of), read back.
_TF_STATUS = {"UnavailableError": CARM_ERR_NO_GPU, "InvalidArgumentError": CARM_ERR_INVALID,
              "UnimplementedError": CARM_ERR_UNSUPPORTED}


def _tf_message(exc) -> str:
    """carm_last_error() as the op raised it, without the decorations TensorFlow adds around it."""
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", exc.message)
    return re.sub(r"\s*\[Op:\w+\].*$", "", text, flags=re.DOTALL)


class TensorFlowOps(Binding):
    """The same C ABI through the TensorFlow custom ops of kernels/tf_carm_ops.cc (one op per function).

    ``path`` is the C library the op library links against (what the counter check loads)."""

    def __init__(self, ops, path: Path, op_path: Path | None = None):
        import tensorflow as tf  # loaded already: `ops` came from tf.load_op_library

        self._ops, self._errors = ops, tf.errors.OpError
        self.path, self.op_path = Path(path), op_path
        version = int(ops.carm_abi_version())
        if version != ABI_VERSION:
            raise KernelBuildError(f"{op_path}: expected carm_bench ABI {ABI_VERSION}, received {version} (rebuild with force=True)")
        self._benchmarks = [self._describe(i) for i in range(int(ops.carm_bench_count()))]

    @classmethod
    def load(cls, path: str | Path | None = None, lib_path: str | Path | None = None,
             arch: str | None = None) -> TensorFlowOps:
        """Load the op library ``path`` (linked against ``lib_path``), or the cached build for ``arch``."""
        if path is None:
            from carm_advisor.measure import build

            built = build.build_kernels(arch=arch, with_tf=True)
            path, lib_path = built.tf_op_path, built.lib_path
        path = Path(path)
        return cls(load_tf_ops(path), Path(lib_path) if lib_path else path.with_name(LIB_NAME), path)

    def _call(self, what: str, op, **kwargs):
        """op(**kwargs) with the ABI's status translated as the ctypes binding translates it."""
        try:
            return op(**kwargs)
        except self._errors as exc:
            raise_for_status(_TF_STATUS.get(type(exc).__name__, CARM_ERR_CUDA), _tf_message(exc), what)

    def _describe(self, i: int) -> BenchmarkInfo:
        o = self._call("carm_bench_describe", self._ops.carm_bench_describe, index=i)
        text = [t.numpy().decode("utf-8", "replace") for t in o[:7]]
        return BenchmarkInfo(i, *text, int(o.min_arch), int(o.max_arch), float(o.flops_per_item),
                             float(o.bytes_per_item), float(o.intensity_param), bool(o.size_is_bytes))

    def benchmarks(self) -> list[BenchmarkInfo]:
        return list(self._benchmarks)

    def device_count(self) -> int:
        return int(self._call("carm_device_count", self._ops.carm_device_count))

    def device_info(self, device: int = 0) -> DeviceInfo:
        o = self._call("carm_device_info", self._ops.carm_device_info, device=device)
        return DeviceInfo(o.name.numpy().decode("utf-8", "replace"), int(o.cc_major), int(o.cc_minor), int(o.sm_count),
                          int(o.clock_khz) / 1e3, int(o.memory_clock_khz) / 1e3, int(o.memory_bus_bits),
                          int(o.l2_bytes), int(o.smem_per_sm_bytes), int(o.smem_per_block_optin_bytes),
                          int(o.global_mem_bytes), int(o.max_threads_per_sm), int(o.regs_per_sm), int(o.compiled_arch))

    def _run(self, index: int, *, device: int, size_bytes: float, iterations: int, launches: int, warmup: int,
             config: int) -> tuple:
        try:
            o = self._ops.carm_bench_run(index=index, size_bytes=size_bytes, iterations=iterations, launches=launches,
                                         device=device, warmup_launches=warmup, config=config)
        except self._errors as exc:
            return (_TF_STATUS.get(type(exc).__name__, CARM_ERR_CUDA), _tf_message(exc)) + (0,) * 11
        return (CARM_OK, "", float(o.flops), float(o.bytes), float(o.seconds), float(o.work_items), float(o.checksum),
                float(o.size_bytes_used), int(o.iterations_used), int(o.launches_used), int(o.grid_blocks),
                int(o.block_threads), int(o.dynamic_smem_bytes))

    def release(self) -> None:
        self._call("carm_release", self._ops.carm_release)


def open_binding(name: str | None = None, arch: str | None = None) -> Binding:
    """Build (or reuse the cached build for `arch`) and load binding `name` (None: default_binding())."""
    name = name or default_binding()
    if name == "ctypes":
        return KernelLibrary.load(arch=arch)
    if name == "tensorflow":
        return TensorFlowOps.load(arch=arch)
    raise KernelBuildError(f"unknown binding: expected one of {', '.join(BINDINGS)}, received {name!r}")
