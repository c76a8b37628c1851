"""Everything execution needs from the active Keras 3 backend: device sync, CUDA graphs, math mode, GPU
name, NVTX.

The only module of carm_advisor.measure that touches torch, jax or tensorflow, and only inside
functions: the GPU machine has no TensorFlow, CPU machines may have no torch or jax.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import warnings
from typing import Any, Callable, Iterator

import keras

from carm_advisor.errors import MeasurementError

BACKENDS = ("tensorflow", "torch", "jax", "numpy")


def active_backend() -> str:
    """The Keras backend this process runs: 'tensorflow', 'torch', 'jax' or 'numpy'."""
    return keras.backend.backend()


def _resolve(backend: str | None) -> str:
    backend = backend or active_backend()
    if backend not in BACKENDS:
        raise MeasurementError(f"Expected a Keras backend in {BACKENDS}, Received: backend={backend!r}")
    return backend


def backend_version(backend: str | None = None) -> str:
    backend = _resolve(backend)
    module = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax", "numpy": "numpy"}[backend]
    return str(importlib.import_module(module).__version__)


# ---- device queries ----------------------------------------------------------------------------


def has_gpu(backend: str | None = None) -> bool:
    """Whether the backend itself will run on a CUDA GPU (not merely whether one is plugged in)."""
    backend = _resolve(backend)
    try:
        if backend == "torch":
            import torch

            return bool(torch.cuda.is_available())
        if backend == "jax":
            import jax

            return any(d.platform == "gpu" for d in jax.devices())
        if backend == "tensorflow":
            import tensorflow as tf

            return bool(tf.config.list_physical_devices("GPU"))
    except RuntimeError:  # jax raises when no platform is initialised
        return False
    return False


def device_name(backend: str | None = None) -> str:
    """The name of the device the backend computes on: the GPU's name, or 'cpu'."""
    backend = _resolve(backend)
    if not has_gpu(backend):
        return "cpu"
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(torch.cuda.current_device())
    if backend == "jax":
        import jax

        return next(d.device_kind for d in jax.devices() if d.platform == "gpu")
    import tensorflow as tf

    gpu = tf.config.list_physical_devices("GPU")[0]
    return tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)


# ---- synchronisation ---------------------------------------------------------------------------


def sync(outputs: Any = None, backend: str | None = None) -> None:
    """Wait until the device has finished the work issued so far (or at least `outputs`).

    torch: torch.cuda.synchronize(). jax: block on `outputs` (jax has no global device sync; XLA runs
    one stream in order, so the last outputs being ready means all earlier work is). tensorflow:
    tf.test.experimental.sync_devices() on a GPU, else pull `outputs` to the host. numpy: nothing.
    """
    backend = _resolve(backend)
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    elif backend == "jax":
        if outputs is not None:
            import jax

            jax.block_until_ready(outputs)
    elif backend == "tensorflow":
        import tensorflow as tf

        sync_devices = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
        if sync_devices is not None and tf.config.list_physical_devices("GPU"):
            sync_devices()
        elif outputs is not None:
            for tensor in keras.tree.flatten(outputs):
                if hasattr(tensor, "numpy"):
                    tensor.numpy()


class Synchronizer:
    """A zero-argument sync for measure_energy: remembers the last outputs, which jax must block on."""

    def __init__(self, backend: str | None = None) -> None:
        self.backend = _resolve(backend)
        self.last_outputs: Any = None

    def track(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Wrap fn so that its outputs are kept for the next sync()."""

        def tracked() -> Any:
            self.last_outputs = fn()
            return self.last_outputs

        return tracked

    def __call__(self) -> None:
        sync(self.last_outputs, self.backend)


def inference_context(backend: str | None = None):
    """What the backend's own predict loop runs under: torch.no_grad() for torch (no autograd tape)."""
    if _resolve(backend) == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


# ---- CUDA graphs (torch) ----------------------------------------------------------------------


def capture_cuda_graph(fn: Callable[[], Any], *, warmup: int = 3) -> "GraphReplay":
    """torch on a CUDA GPU: capture fn's device work once into a torch.cuda.CUDAGraph; return its replay.

    fn runs `warmup` times on a side stream first (cuDNN/cuBLAS setup and workspace allocations stay
    out of the capture), then once under capture, all without autograd. A replay relaunches the
    captured kernels on the same input and output memory with no Python or framework dispatch: the GPU
    work of one call. The returned callable keeps the graph, its memory pool and fn's outputs alive.
    Raises what torch raises when fn does something a capture forbids (a host sync, a pageable copy...).
    """
    import torch

    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(max(int(warmup), 1)):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        # capture_begin/capture_end rather than `with torch.cuda.graph(g)`: that context manager's exit
        # leaves the capture stream current when capture_end raises, and it empties the allocator cache
        # before every capture (slow over dozens of layers).
        with torch.cuda.stream(stream), warnings.catch_warnings():
            # a layer with no kernel (a view) captures an empty graph: a no-op replay, not a problem
            warnings.filterwarnings("ignore", message=".*CUDA Graph is empty.*")
            graph.capture_begin()
            try:
                outputs = fn()
            except BaseException:
                with contextlib.suppress(Exception):  # ends the broken capture; fn's error is the one to see
                    graph.capture_end()
                raise
            graph.capture_end()
    torch.cuda.synchronize()
    return GraphReplay(graph, outputs)


class GraphReplay:
    """A captured CUDA graph: calling it replays the graph on the current stream (asynchronously).

    It holds the graph (and with it its private memory pool) and the captured call's outputs, which
    live in that pool and are overwritten by every replay.
    """

    def __init__(self, graph: Any, outputs: Any) -> None:
        self.graph = graph
        self.outputs = outputs

    def __call__(self) -> None:
        self.graph.replay()


# ---- what "float32" means ----------------------------------------------------------------------


def math_mode(backend: str | None = None) -> dict:
    """Which arithmetic float32 convolutions and matmuls get: {"conv", "matmul", "source", "flags", "gpu"}.

    "tf32" means the framework allows TF32 Tensor Cores for float32 work (Ampere and later GPUs);
    "fp32" means true float32 on CUDA cores; "bf16" (torch "medium") means bfloat16 passes. The flags
    are reported as set even on a CPU, where TF32 does not exist ("gpu": False says so).
    """
    backend = _resolve(backend)
    gpu = has_gpu(backend)
    if backend == "torch":
        import torch

        precision = torch.get_float32_matmul_precision()  # "highest" | "high" | "medium"
        matmul_tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        matmul = {"highest": "tf32" if matmul_tf32 else "fp32", "high": "tf32", "medium": "bf16"}.get(
            precision, "tf32" if matmul_tf32 else "fp32"
        )
        conv = "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
        flags = {
            "torch.backends.cuda.matmul.allow_tf32": matmul_tf32,
            "torch.get_float32_matmul_precision()": precision,
            "torch.backends.cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        }
        source = "torch flags (defaults: cuDNN convolutions TF32 on, cuBLAS matmuls TF32 off)"
    elif backend == "tensorflow":
        import tensorflow as tf

        enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        conv = matmul = "tf32" if enabled else "fp32"
        flags = {"tf.config.experimental.tensor_float_32_execution_enabled()": enabled}
        source = "tensorflow TF32 execution flag (default on; covers convolutions and matmuls)"
    elif backend == "jax":
        import jax

        precision = jax.config.jax_default_matmul_precision
        name = None if precision is None else str(precision).lower()
        # XLA's DEFAULT precision lets cuBLAS/cuDNN use TF32 for float32 on Ampere+ GPUs.
        if name in ("highest", "float32", "precision.highest"):
            conv = matmul = "fp32"
        elif name in ("bfloat16", "fastest"):
            conv = matmul = "bf16" if gpu else "fp32"
        else:  # None, "default", "high", "tensorfloat32", "bfloat16_3x"
            conv = matmul = "tf32"
        flags = {"jax.config.jax_default_matmul_precision": precision}
        source = "jax default matmul precision (None = DEFAULT: TF32 for float32 on Ampere+ GPUs)"
    else:
        conv = matmul = "fp32"
        flags = {}
        source = "numpy backend computes on the CPU"
    return {"conv": conv, "matmul": matmul, "source": source, "flags": flags, "gpu": gpu}


# ---- NVTX ranges (for Nsight Compute attribution) ---------------------------------------------


def nvtx_functions() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    """(push, pop) from the `nvtx` package, else torch.cuda.nvtx, else cupy; None if none is there."""
    try:
        import nvtx  # the NVIDIA nvtx package

        return nvtx.push_range, nvtx.pop_range
    except ImportError:
        pass
    try:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except ImportError:
        pass
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


# ---- for the tuner: float32 math switches, compiler caches, out-of-memory -----------------------


@contextlib.contextmanager
def float32_math(tf32: bool | None, backend: str | None = None) -> Iterator[None]:
    """Run float32 convolutions and matmuls with TF32 on (True), off (False) or as the backend defaults
    (None); the previous switches come back on exit."""
    backend = _resolve(backend)
    if tf32 is None:
        yield
        return
    if backend == "torch":
        import torch

        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    elif backend == "jax":
        import jax

        with jax.default_matmul_precision("tensorfloat32" if tf32 else "float32"):
            yield
    elif backend == "tensorflow":
        import tensorflow as tf

        saved = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(saved)
    else:
        yield


def reset_compiled(backend: str | None = None) -> None:
    """Forget compiled functions between configurations (torch.compile stops recompiling after 8 shapes
    and falls back to eager; jax keeps every executable), and hand cached device memory back."""
    backend = _resolve(backend)
    gc.collect()
    if backend == "torch":
        import torch

        torch._dynamo.reset()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    elif backend == "jax":
        import jax

        jax.clear_caches()
    elif backend == "tensorflow":
        keras.backend.clear_session(free_memory=True)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether a framework error means the device ran out of memory."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return ("outofmemory" in text or "out of memory" in text or "resource_exhausted" in text
            or "resourceexhausted" in text or "failed to allocate" in text)
