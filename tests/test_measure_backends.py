"""The Backend contract, checked the same way against every backend module whose framework is installed here.

Each check states what the interface promises (base.Backend's docstrings) and tests it with the framework's own
calls as the reference: versions from the installed distributions' metadata, TF32 switches read back through
the framework, jax's compiled-executable cache, torch's autograd and profiler. This machine has no GPU: every
backend must say so and refuse a CUDA-graph capture with one clear error.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util

import numpy as np
import pytest
from _gpu import gpu_present
from packaging.version import Version

from carm_advisor.errors import MeasurementError
from carm_advisor.measure import backends
from carm_advisor.measure.backends import Backend, BackendUnavailable, Trace

INSTALLED = [name for name in backends.BACKENDS if importlib.util.find_spec(backends.get(name).module) is not None]
cpu_only = pytest.mark.skipif(gpu_present(), reason="checks the CPU answers; this machine has a GPU")


def _native_ones(name: str, n: int = 4):
    """A tensor of the framework itself (not of the active Keras backend)."""
    module = importlib.import_module(backends.get(name).module)
    return {"torch": lambda: module.ones(n), "jax": lambda: module.numpy.ones(n),
            "tensorflow": lambda: module.ones(n), "numpy": lambda: module.ones(n)}[name]()


@pytest.fixture(params=INSTALLED)
def backend(request) -> Backend:
    return backends.get(request.param)


def test_every_keras_backend_name_gets_its_own_single_backend(backend):
    assert isinstance(backend, Backend) and backends.get(backend.name) is backend
    assert backends.get(None) is backends.get(backends.active_backend())


def test_an_unknown_backend_name_is_one_clear_error():
    with pytest.raises(MeasurementError, match=r"^Expected a Keras backend in .*Received: backend='mxnet'$"):
        backends.get("mxnet")


def test_the_version_is_the_installed_distribution_version(backend):
    # the public part: a CUDA wheel's torch.__version__ carries a local tag ("+cu130") its metadata may not
    assert Version(backend.version()).public == Version(importlib.metadata.version(backend.module)).public


@cpu_only
def test_on_a_cpu_machine_no_gpu_and_the_device_is_cpu(backend):
    assert backend.has_gpu() is False
    assert backend.device_name() == "cpu"
    assert backend.math_mode()["gpu"] is False


def test_sync_returns_with_nothing_issued_and_on_nested_outputs(backend):
    assert backend.sync() is None
    assert backend.sync([_native_ones(backend.name), {"b": _native_ones(backend.name, 2)}]) is None


def test_the_synchronizer_syncs_on_the_last_outputs_of_the_tracked_call(backend, monkeypatch):
    seen, calls = [], iter(range(10, 20))
    monkeypatch.setattr(backend, "sync", lambda outputs=None: seen.append(outputs))
    syncer = backends.Synchronizer(backend)
    tracked = syncer.track(lambda: next(calls))
    assert (tracked(), tracked()) == (10, 11)
    syncer()
    assert seen == [11]


def test_the_inference_context_is_a_context_and_records_no_autograd_tape_on_torch(backend):
    with backend.inference_context():
        if backend.name == "torch":
            import torch

            x = torch.ones(3, requires_grad=True)
            assert (x * 2).requires_grad is False
    if backend.name == "torch":
        import torch

        assert torch.is_grad_enabled()   # restored on exit


def test_math_mode_names_the_arithmetic_of_float32_convolutions_and_matmuls(backend):
    mode = backend.math_mode()
    assert set(mode) == {"conv", "matmul", "source", "flags", "gpu"}
    assert mode["conv"] in ("tf32", "fp32", "bf16") and mode["matmul"] in ("tf32", "fp32", "bf16")
    assert isinstance(mode["flags"], dict) and mode["source"]


@pytest.mark.parametrize("tf32, expected", [(False, "fp32"), (True, "tf32")])
def test_float32_math_sets_the_switches_inside_and_puts_them_back_on_exit(backend, tf32, expected):
    before = backend.math_mode()
    with backend.float32_math(tf32):
        inside = backend.math_mode()
    after = backend.math_mode()
    if backend.name == "numpy":   # no TF32 switch: float32 stays float32
        expected = "fp32"
    assert (inside["conv"], inside["matmul"]) == (expected, expected)
    assert after["flags"] == before["flags"]


def test_float32_math_none_keeps_the_framework_defaults(backend):
    before = backend.math_mode()
    with backend.float32_math(None):
        assert backend.math_mode() == before


def test_float32_math_off_is_read_back_through_the_framework_itself(backend):
    with backend.float32_math(False):
        if backend.name == "torch":
            import torch

            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        elif backend.name == "tensorflow":
            import tensorflow as tf

            assert not tf.config.experimental.tensor_float_32_execution_enabled()
        elif backend.name == "jax":
            import jax

            assert jax.config.jax_default_matmul_precision == "float32"


def test_reset_compiled_returns_and_on_jax_drops_compiled_executables(backend):
    if backend.name == "jax":
        import jax

        f = jax.jit(lambda x: x + 1)
        f(np.float32(1))
        assert f._cache_size() == 1
    assert backend.reset_compiled() is None
    if backend.name == "jax":
        assert f._cache_size() == 0


@cpu_only
def test_a_cuda_graph_capture_on_a_cpu_is_one_clear_error_and_runs_nothing(backend):
    ran = []
    assert backend.can_capture_cuda_graphs() is False
    with pytest.raises(BackendUnavailable) as err:
        backend.capture_cuda_graph(lambda: ran.append(1), warmup=2)
    message = str(err.value)
    assert "CUDA-graph capture" in message and f"the {backend.name} backend on a CPU" in message
    assert "\n" not in message and ran == []
    assert isinstance(err.value, MeasurementError)


def test_jit_compiles_a_stateless_call_on_jax_and_is_refused_elsewhere(backend):
    def pure(vs, ts):
        return ts[0] * vs[0]

    values, tensors = [np.float32(3.0)], [np.arange(4, dtype="float32")]
    if not backend.jit_execution:
        with pytest.raises(BackendUnavailable, match=f"jit compilation.*the {backend.name} backend"):
            backend.jit(pure)
        with pytest.raises(BackendUnavailable, match=f"back-to-back.*the {backend.name} backend"):
            backend.back_to_back(pure, 3)
        return
    np.testing.assert_array_equal(np.asarray(backend.jit(pure)(values, tensors)), [0.0, 3.0, 6.0, 9.0])
    outs = backend.back_to_back(pure, 3)(values, tensors)
    assert len(outs) == 3
    for out in outs:   # the probe adds isnan(finite) = 0: every call sees the same data
        np.testing.assert_array_equal(np.asarray(out), [0.0, 3.0, 6.0, 9.0])


def test_the_profiler_records_named_ranges_on_torch_and_is_refused_elsewhere(backend):
    if not backend.layer_profiler:
        with pytest.raises(BackendUnavailable, match=f"profiler ranges.*the {backend.name} backend"):
            backend.profiler_range("carm::a")
        with pytest.raises(BackendUnavailable, match=f"profiled pass.*the {backend.name} backend"):
            backend.profile(lambda: None, "carm::")
        return
    tensor = _native_ones(backend.name, 64)

    def run():
        with backend.profiler_range("carm::outer"):
            with backend.profiler_range("carm::inner"):
                tensor.sum()
        with backend.profiler_range("other"):
            tensor.sum()

    trace = backend.profile(run, "carm::")
    assert isinstance(trace, Trace)
    assert sorted(r.name for r in trace.ranges) == ["inner", "outer"]   # prefix removed, "other" left out
    outer, = (r for r in trace.ranges if r.name == "outer")
    inner, = (r for r in trace.ranges if r.name == "inner")
    assert outer.start_us <= inner.start_us <= inner.end_us <= outer.end_us
    if not backend.has_gpu():
        assert trace.kernels is False and trace.launches == []


def test_nvtx_ranges_come_through_torch_only(backend):
    functions = backend.nvtx_functions()
    if backend.name == "torch":
        import torch

        assert functions == (torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop)
    else:
        assert functions is None


def test_out_of_memory_is_recognised_in_each_frameworks_wording():
    assert backends.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))   # torch
    assert backends.is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert backends.is_out_of_memory(type("ResourceExhaustedError", (Exception,), {})("OOM when allocating"))
    assert not backends.is_out_of_memory(ValueError("shapes (3,) and (4,) are incompatible"))


def test_a_nvtx_range_without_any_binding_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(backends, "nvtx_functions", lambda: None)
    with pytest.raises(MeasurementError, match=r"^Expected an NVTX binding"):
        with backends.nvtx_range("x"):
            pass
    events = []
    monkeypatch.setattr(backends, "nvtx_functions", lambda: (events.append, lambda: events.append("pop")))
    with contextlib.suppress(ZeroDivisionError), backends.nvtx_range("r"):
        raise ZeroDivisionError
    assert events == ["r", "pop"]   # popped even when the block raises
