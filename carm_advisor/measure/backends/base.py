"""What measurement needs from a framework: the Backend interface each Keras backend module implements.

A Backend is stateless: it reads and sets the framework's own global switches (device, math mode, compiler
caches) and wraps its calls (sync, CUDA graphs, jit, profiler). The framework itself is imported inside the
methods of its module only, so any of torch, jax and tensorflow may be missing where another one runs (the
GPU machines have no TensorFlow; CPU machines may have no torch or jax). An operation the framework does not
have raises BackendUnavailable (a MeasurementError) from this class, naming the operation and the backend.

Units: times in microseconds in profiler traces (Range, Launch), seconds everywhere else.
"""

from __future__ import annotations

import abc
import contextlib
import gc
import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from carm_advisor.errors import MeasurementError


class BackendUnavailable(MeasurementError):
    """The active backend has no such operation (a CUDA graph off torch or off a GPU, jit off jax...)."""


@dataclass(frozen=True)
class Range:
    """One named range on the CPU timeline (us) of one thread."""

    name: str
    thread: int
    start_us: float
    end_us: float


@dataclass(frozen=True)
class Launch:
    """An op that launched GPU kernels: when it started (CPU us, thread) and its kernels' GPU us."""

    thread: int
    t_us: float
    gpu_us: float


@dataclass(frozen=True)
class Trace:
    """What a profiled run recorded: the named ranges (their prefix removed), the kernel launches, and whether
    kernel durations were recorded (a CUDA GPU) or only CPU ranges (kernels=False, launches empty)."""

    ranges: list[Range]
    launches: list[Launch]
    kernels: bool


class Backend(abc.ABC):
    """The operations measurement needs from the framework of one Keras backend.

    Class attributes say what measurement does with it:
    - name: the Keras backend name ('tensorflow', 'torch', 'jax', 'numpy'); module: its importable framework.
    - jit_execution: a layer, or the whole model, measured alone runs as a jitted stateless call (jit()), not
      eagerly: per-op dispatch would dominate a small layer's time.
    - compiles_train_step: Keras' train_on_batch runs compiled by default (XLA or a traced graph).
    - layer_profiler: profile() and profiler_range() attribute device time to named ranges of one pass.
    """

    name: str = ""
    module: str = ""
    jit_execution: bool = False
    compiles_train_step: bool = False
    layer_profiler: bool = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # ---- what the framework runs on ----------------------------------------------------------------

    def version(self) -> str:
        """The framework's version string (its __version__)."""
        return str(importlib.import_module(self.module).__version__)

    @abc.abstractmethod
    def has_gpu(self) -> bool:
        """Whether the framework itself will run on a CUDA GPU (not merely whether one is plugged in)."""

    def device_name(self) -> str:
        """The name of the device the framework computes on: the GPU's name, or 'cpu'."""
        return self.gpu_name() if self.has_gpu() else "cpu"

    def gpu_name(self) -> str:
        """The name of the CUDA GPU the framework computes on; called only where has_gpu() is True."""
        raise self._unavailable("a GPU name", "a backend that runs on a CUDA GPU")

    # ---- running work ------------------------------------------------------------------------------

    @abc.abstractmethod
    def sync(self, outputs: Any = None) -> None:
        """Return once the device has finished the work issued so far, or at least the work producing
        `outputs` (a framework with no global device sync blocks on them; None: nothing to wait on there)."""

    def inference_context(self) -> AbstractContextManager[Any]:
        """What the framework's own predict loop runs under (torch: no autograd tape); default: nothing."""
        return contextlib.nullcontext()

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn compiled into one device program, traced on its first call; fn must be stateless (its state
        passed in as arguments)."""
        raise self._unavailable("jit compilation of a stateless call", "the jax backend")

    def back_to_back(self, pure: Callable[[list, list], Any], calls: int) -> Callable[[list, list], Any]:
        """One compiled program calling pure(values, tensors) `calls` times in a row in one dispatch, each
        call's output kept and fed into the next call's first input so that the compiler can neither merge
        nor hoist the calls; the program returns the list of outputs."""
        raise self._unavailable("back-to-back calls in one compiled program", "the jax backend")

    # ---- CUDA graphs -------------------------------------------------------------------------------

    def can_capture_cuda_graphs(self) -> bool:
        """Whether capture_cuda_graph() works here: the framework has CUDA graphs and runs on a CUDA GPU."""
        return False

    def capture_cuda_graph(self, fn: Callable[[], Any], *, warmup: int = 3) -> Callable[[], Any]:
        """fn's device work captured once into a CUDA graph (after `warmup` calls), as a zero-argument replay
        that relaunches it on the same input and output memory, with no Python or framework dispatch."""
        raise self._unavailable("a CUDA-graph capture", "the torch backend on a CUDA GPU")

    # ---- math mode, compiler caches -----------------------------------------------------------------

    @abc.abstractmethod
    def math_mode(self) -> dict:
        """Which arithmetic float32 convolutions and matmuls get: {"conv", "matmul", "source", "flags", "gpu"}.

        "tf32": the framework allows TF32 Tensor Cores for float32 work (Ampere and later GPUs); "fp32": true
        float32 on CUDA cores; "bf16": bfloat16 passes. "flags" are the framework's switches as set, even on
        a CPU, where TF32 does not exist ("gpu": False says so); "source" says where the answer comes from.
        """

    @abc.abstractmethod
    def float32_math(self, tf32: bool | None) -> AbstractContextManager[None]:
        """A context in which float32 convolutions and matmuls run with TF32 on (True), off (False) or as
        the framework defaults (None); the previous switches come back on exit."""

    def reset_compiled(self) -> None:
        """Forget compiled functions between configurations and hand cached device memory back."""
        gc.collect()

    # ---- profiler and NVTX ---------------------------------------------------------------------------

    def profiler_range(self, name: str) -> AbstractContextManager[Any]:
        """A context that opens a range named `name` on the profiler's CPU timeline (see profile())."""
        raise self._unavailable("profiler ranges", "the torch backend")

    def profile(self, fn: Callable[[], Any], range_prefix: str) -> Trace:
        """Run fn once under the framework's profiler and sync; the ranges whose name starts with
        `range_prefix` (the prefix removed) and every op that launched GPU kernels (start time, thread, the
        kernels' summed GPU duration), times in microseconds."""
        raise self._unavailable("a profiled pass attributing kernels to layers", "the torch backend")

    def nvtx_functions(self) -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
        """(push, pop) of NVTX ranges through this framework, or None where it has none."""
        return None

    # ----------------------------------------------------------------------------------------------------

    def _unavailable(self, operation: str, needs: str) -> BackendUnavailable:
        return BackendUnavailable(f"Expected {needs} for {operation}, Received: the {self.name} backend"
                                  f"{'' if self.has_gpu() else ' on a CPU'}")


class Synchronizer:
    """A zero-argument sync for measure_energy: remembers the last outputs, which jax must block on."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.last_outputs: Any = None

    def track(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Wrap fn so that its outputs are kept for the next sync()."""

        def tracked() -> Any:
            self.last_outputs = fn()
            return self.last_outputs

        return tracked

    def __call__(self) -> None:
        self.backend.sync(self.last_outputs)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether a framework error means the device ran out of memory (torch, jax/XLA and tensorflow wording)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return ("outofmemory" in text or "out of memory" in text or "resource_exhausted" in text
            or "resourceexhausted" in text or "failed to allocate" in text)
