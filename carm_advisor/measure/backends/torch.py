"""The torch backend: CUDA sync, no_grad inference, CUDA graphs, TF32 switches, torch.profiler ranges."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from carm_advisor.measure.backends.base import Backend, Launch, Range, Trace


class TorchBackend(Backend):
    name = "torch"
    module = "torch"
    layer_profiler = True

    def has_gpu(self) -> bool:
        import torch

        try:
            return bool(torch.cuda.is_available())
        except RuntimeError:
            return False

    def gpu_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(torch.cuda.current_device())

    def sync(self, outputs: Any = None) -> None:
        """torch.cuda.synchronize() on a CUDA GPU; on a CPU every op has returned its result already."""
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def inference_context(self) -> AbstractContextManager[Any]:
        """torch.no_grad(): no autograd tape, as Keras' predict loop runs."""
        import torch

        return torch.no_grad()

    # ---- CUDA graphs ---------------------------------------------------------------------------------

    def can_capture_cuda_graphs(self) -> bool:
        return self.has_gpu()

    def capture_cuda_graph(self, fn: Callable[[], Any], *, warmup: int = 3) -> GraphReplay:
        """fn's device work captured once into a torch.cuda.CUDAGraph; its replay.

        fn runs `warmup` times on a side stream first (cuDNN/cuBLAS setup and workspace allocations stay
        out of the capture), then once under capture, all without autograd. A replay relaunches the
        captured kernels on the same input and output memory with no Python or framework dispatch: the GPU
        work of one call. The returned callable keeps the graph, its memory pool and fn's outputs alive.
        Raises what torch raises when fn does something a capture forbids (a host sync, a pageable copy...),
        and BackendUnavailable on a CPU.
        """
        if not self.has_gpu():
            return super().capture_cuda_graph(fn, warmup=warmup)
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

    # ---- math mode -----------------------------------------------------------------------------------

    def math_mode(self) -> dict:
        """torch.get_float32_matmul_precision() and the cuBLAS/cuDNN TF32 switches."""
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
        return {"conv": conv, "matmul": matmul,
                "source": "torch flags (defaults: cuDNN convolutions TF32 on, cuBLAS matmuls TF32 off)",
                "flags": flags, "gpu": self.has_gpu()}

    @contextlib.contextmanager
    def float32_math(self, tf32: bool | None) -> Iterator[None]:
        """torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32, both set to tf32."""
        if tf32 is None:
            yield
            return
        import torch

        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    def reset_compiled(self) -> None:
        """torch._dynamo.reset() (torch.compile stops recompiling after 8 shapes and falls back to eager),
        then the CUDA allocator's cached blocks go back to the device."""
        import torch

        super().reset_compiled()
        torch._dynamo.reset()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ---- profiler and NVTX -----------------------------------------------------------------------------

    def profiler_range(self, name: str) -> AbstractContextManager[Any]:
        """torch.profiler.record_function(name)."""
        from torch.profiler import record_function

        return record_function(name)

    def profile(self, fn: Callable[[], Any], range_prefix: str) -> Trace:
        """fn under torch.profiler (CPU, and CUDA activity on a GPU), then a sync, inside the profile.

        The profiler links each kernel to the CPU op that launched it (by correlation id): a Launch is that
        op's start and its kernels' summed duration; a range's own GPU-side annotation span is not kernel work.
        """
        import torch
        from torch.profiler import ProfilerActivity, profile

        cuda = bool(torch.cuda.is_available())
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            fn()
            self.sync()
        ranges, launches = _ranges_and_launches(prof.events(), range_prefix)
        return Trace(ranges, launches, kernels=cuda)

    def nvtx_functions(self) -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
        """torch.cuda.nvtx's range_push and range_pop; None where torch is not installed."""
        try:
            import torch
        except ImportError:
            return None
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


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


def _ranges_and_launches(events, range_prefix: str) -> tuple[list[Range], list[Launch]]:
    """torch.profiler FunctionEvents -> the prefixed ranges (CPU) and kernel launches (CPU op + its kernels)."""
    from torch.autograd import DeviceType

    ranges, launches = [], []
    for e in events:
        if e.device_type != DeviceType.CPU:
            continue
        if e.name.startswith(range_prefix):
            ranges.append(Range(e.name[len(range_prefix):], e.thread, e.time_range.start, e.time_range.end))
            continue
        gpu_us = sum(k.duration for k in e.kernels if not k.name.startswith(range_prefix))
        if gpu_us > 0:
            launches.append(Launch(e.thread, e.time_range.start, gpu_us))
    return ranges, launches
