"""One contract for both bindings of the C ABI (ctypes and the TensorFlow op), run against the host-only
build (kernels/host_fake.cc): same table, same device, same records, same errors, and the same arguments
reaching carm_bench_run. Expected figures are computed by hand from host_fake.cc's documented formulas.

The host-only build is cached under $CARM_ADVISOR_CACHE (default ~/.cache/carm_advisor): a cold build
takes ~20 s on 2 cores (the TF op is most of it), a warm one nothing. The TensorFlow binding runs in a
spawned child process: TensorFlow registers an op name once per process, so the host-only op library
loaded here would shadow the CUDA one that test_kernels.py loads (and the reverse).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import shutil

import pytest

from carm_advisor.errors import GPUUnavailableError, MeasurementError
from carm_advisor.measure import build
from carm_advisor.measure.binding import Binding, default_binding
from carm_advisor.measure.kernels import (
    BenchmarkInfo,
    DeviceInfo,
    KernelLibrary,
    RunResult,
    TensorFlowOps,
    _Params,
    open_binding,
)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="no C++ compiler")
HAVE_TF = build._tf_available()


@pytest.fixture(scope="module")
def host_build():
    return build.build_host_fake()


def _serve(conn, op_path, lib_path) -> None:
    """Child process: hold a TensorFlowOps binding and answer (function or method name, args, kwargs)."""
    binding = TensorFlowOps.load(op_path, lib_path)
    while (request := conn.recv()) is not None:
        what, args, kwargs = request
        try:
            fn = getattr(binding, what) if isinstance(what, str) else (lambda *a, **k: what(binding, *a, **k))
            conn.send((True, fn(*args, **kwargs)))
        except Exception as exc:  # sent back and raised in the test
            conn.send((False, exc))


class InChild:
    """A TensorFlowOps binding in a spawned process; methods, and apply(fn) = fn(binding), run there."""

    def __init__(self, op_path, lib_path):
        self.path = lib_path
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, op_path, lib_path), daemon=True)
        self._process.start()

    def apply(self, what, *args, **kwargs):
        self._conn.send((what, args, kwargs))
        ok, value = self._conn.recv()
        if not ok:
            raise value
        return value

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.apply(name, *args, **kwargs)

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(timeout=30)


@pytest.fixture(scope="module")
def tf_binding(host_build):
    if not HAVE_TF:
        pytest.skip("tensorflow not importable")
    child = InChild(host_build.tf_op_path, host_build.lib_path)
    yield child
    child.close()


@pytest.fixture(scope="module", params=["ctypes", "tensorflow"])
def binding(request, host_build) -> Binding:
    if request.param == "ctypes":
        return KernelLibrary.load(host_build.lib_path)
    return request.getfixturevalue("tf_binding")


def last_run(binding):
    """What the host-only library last received in carm_bench_run, read in the binding's own process
    (there, the binding and this read share the one loaded copy of the library)."""
    return binding.apply(_last_run) if isinstance(binding, InChild) else _last_run(binding)


def _last_run(binding):
    lib = ctypes.CDLL(str(binding.path))
    runs, index, params = ctypes.c_int(), ctypes.c_int(), _Params()
    assert lib.carm_host_fake_last_run(ctypes.byref(runs), ctypes.byref(index), ctypes.byref(params)) == 0
    return runs.value, index.value, (params.device, params.warmup_launches, params.launches, params.config,
                                     params.size_bytes, params.iterations)


def test_binding_lists_the_host_table_with_every_field(binding):
    assert [b.name for b in binding.benchmarks()] == ["fp32_fma", "hbm_read", "mix_fp32_hbm_c8"]
    assert binding.benchmark("mix_fp32_hbm_c8") == BenchmarkInfo(
        2, "mix_fp32_hbm_c8", "mixed", "fp32", "hbm", "c8", "FFMA", "one float4 load and 32 FMAs", 80, 0,
        64.0, 16.0, 8.0, True)
    assert binding.benchmark(1).name == "hbm_read" and binding.benchmark("mix_fp32_hbm_c8").flops_per_byte == 4.0


def test_binding_reports_the_host_device(binding):
    assert binding.device_count() == 1
    assert binding.device_info(0) == DeviceInfo("CARM host fake", 9, 0, 4, 1000.0, 2000.0, 1024, 2**20, 228 * 1024,
                                                227 * 1024, 2**30, 2048, 65536, 0)


def test_memory_run_with_full_config_returns_the_hand_computed_record(binding):
    r = binding.run("hbm_read", device=0, size=2 * 2**20, iterations=3, launches=2, warmup=2, config=1)
    # items = 2 launches x 3 iterations x 2 MiB / 16 B = 786432; bytes = 16 x items = 12 MiB; index 1 -> 2 ns/item
    assert r == RunResult("hbm_read", 0.0, 12 * 2**20, pytest.approx(786432 * 2e-9), 786432.0, 2.5, 2 * 2**20, 3, 2,
                          8, 256, 1024)


def test_defaults_fill_in_launches_iterations_and_size(binding):
    r = binding.run("mix_fp32_hbm_c8", iterations=0, launches=0, warmup=0)
    # 1 launch x 1000 iterations x 1 MiB / 16 B = 65536000 items; 64 FLOP and 16 B each; index 2 -> 3 ns/item
    assert (r.launches, r.iterations, r.size_bytes, r.work_items) == (1, 1000, 2**20, 65536000.0)
    assert (r.flops, r.bytes) == (64 * 65536000.0, 16 * 65536000.0)
    assert r.seconds == pytest.approx(65536000 * 3e-9) and r.checksum == 0.0


def test_every_argument_reaches_carm_bench_run_unchanged(binding):
    before, _, _ = last_run(binding)
    binding.run("fp32_fma", device=0, size=5.0, iterations=7, launches=3, warmup=4, config=2)
    runs, index, params = last_run(binding)
    assert runs == before + 1 and index == 0
    assert params == (0, 4, 3, 2, 5.0, 7)


def test_bindings_return_identical_records_for_the_same_calls(host_build, tf_binding):
    c, t = KernelLibrary.load(host_build.lib_path), tf_binding
    assert c.benchmarks() == t.benchmarks() and c.device_info() == t.device_info()
    for name in ("fp32_fma", "hbm_read", "mix_fp32_hbm_c8"):
        for kw in ({}, {"size": 3e6, "iterations": 11, "launches": 2, "warmup": 0, "config": 3}):
            assert c.run(name, **kw) == t.run(name, **kw), (name, kw)


def test_a_missing_device_is_gpu_unavailable_with_the_abi_message(binding):
    with pytest.raises(GPUUnavailableError, match=r"^no usable NVIDIA GPU 2: the host-only build has one fake device \(0\)$"):
        binding.run("hbm_read", device=2)
    with pytest.raises(GPUUnavailableError, match=r"^no usable NVIDIA GPU 3:"):
        binding.device_info(3)


def test_unknown_benchmarks_are_measurement_errors(binding):
    with pytest.raises(MeasurementError, match="unknown benchmark"):
        binding.run("no_such_kernel")
    with pytest.raises(MeasurementError, match="out of range"):
        binding.benchmark(3)


def test_release_succeeds(binding):
    binding.release()


def test_default_binding_follows_the_keras_backend(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert default_binding() == "ctypes"
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert default_binding() == ("tensorflow" if HAVE_TF else "ctypes")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert default_binding() == "ctypes"   # Keras on tensorflow, but tensorflow cannot be imported


def test_open_binding_rejects_an_unknown_name():
    from carm_advisor.errors import KernelBuildError

    with pytest.raises(KernelBuildError, match="unknown binding: expected one of ctypes, tensorflow, received 'cuda'"):
        open_binding("cuda")


def _quick_runs(lib):
    from carm_advisor.measure.ceilings import run_ceilings

    return run_ceilings(lib, None, quick=True, progress=False).runs


def test_ceilings_runner_gives_the_same_runs_through_either_binding(host_build, tf_binding):
    runs = [_quick_runs(KernelLibrary.load(host_build.lib_path)), tf_binding.apply(_quick_runs)]
    # the calls per window follow each binding's wall time per call; every per-call figure must agree
    strip = lambda rs: [{k: v for k, v in r.to_dict().items() if k not in ("extra", "repeats")} for r in rs]  # noqa: E731
    assert [r.name for r in runs[0]] == ["fp32_fma", "hbm_read", "mix_fp32_hbm_c8"]
    assert strip(runs[0]) == strip(runs[1])
