"""Every framework call measurement makes, behind one interface (base.Backend), one module per Keras backend.

    framework = backends.get()          # the active Keras backend's
    framework.sync(outputs); framework.math_mode(); framework.capture_cuda_graph(fn)  # torch on a GPU only

torch, jax and tensorflow are imported inside these modules' methods only (and by the kernel loader), so a
machine may lack any of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import keras

from carm_advisor.errors import MeasurementError
from carm_advisor.measure.backends.base import (
    Backend,
    BackendUnavailable,
    Launch,
    Range,
    Synchronizer,
    Trace,
    is_out_of_memory,
)
from carm_advisor.measure.backends.jax import JaxBackend
from carm_advisor.measure.backends.numpy import NumpyBackend
from carm_advisor.measure.backends.tensorflow import TensorFlowBackend
from carm_advisor.measure.backends.torch import GraphReplay, TorchBackend

__all__ = ["BACKENDS", "Backend", "BackendUnavailable", "GraphReplay", "Launch", "Range", "Synchronizer", "Trace",
           "active_backend", "get", "is_out_of_memory", "nvtx_functions", "nvtx_range"]

BACKENDS = ("tensorflow", "torch", "jax", "numpy")
_CLASSES: dict[str, type[Backend]] = {"tensorflow": TensorFlowBackend, "torch": TorchBackend, "jax": JaxBackend,
                                      "numpy": NumpyBackend}
_INSTANCES: dict[str, Backend] = {}


def active_backend() -> str:
    """The Keras backend this process runs: 'tensorflow', 'torch', 'jax' or 'numpy'."""
    return keras.backend.backend()


def get(name: str | None = None) -> Backend:
    """The Backend of the Keras backend `name` (None: the active one); one instance per name.

    Importing nothing of the framework: its calls import it. MeasurementError for a name Keras has no backend
    of here.
    """
    name = name or active_backend()
    if name not in _CLASSES:
        raise MeasurementError(f"Expected a Keras backend in {BACKENDS}, Received: backend={name!r}")
    if name not in _INSTANCES:
        _INSTANCES[name] = _CLASSES[name]()
    return _INSTANCES[name]


# ---- NVTX ranges (for Nsight Compute attribution) ---------------------------------------------


def nvtx_functions() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    """(push, pop) from the `nvtx` package, else torch.cuda.nvtx, else cupy; None if none is there.

    Whatever the active backend: Nsight Compute sees an NVTX range from any library in the process.
    """
    try:
        import nvtx  # the NVIDIA nvtx package

        return nvtx.push_range, nvtx.pop_range
    except ImportError:
        pass
    through_torch = get("torch").nvtx_functions()
    if through_torch is not None:
        return through_torch
    try:
        from cupy.cuda import nvtx as cupy_nvtx

        return cupy_nvtx.RangePush, cupy_nvtx.RangePop
    except ImportError:
        return None


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """A push/pop NVTX range named `name` around the block (Nsight Compute filters on it)."""
    functions = nvtx_functions()
    if functions is None:
        raise MeasurementError(
            "Expected an NVTX binding (pip install nvtx, or torch or cupy) to mark layers for Nsight "
            "Compute, Received: none importable"
        )
    push, pop = functions
    push(name)
    try:
        yield
    finally:
        pop()
