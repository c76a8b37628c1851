"""The numpy backend: Keras' reference backend, on the CPU, every op finished when it returns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from carm_advisor.measure.backends.base import Backend


class NumpyBackend(Backend):
    name = "numpy"
    module = "numpy"

    def has_gpu(self) -> bool:
        return False

    def sync(self, outputs: Any = None) -> None:
        """Nothing to wait for: numpy computes on the host, synchronously."""

    def math_mode(self) -> dict:
        return {"conv": "fp32", "matmul": "fp32", "source": "numpy backend computes on the CPU", "flags": {},
                "gpu": False}

    @contextlib.contextmanager
    def float32_math(self, tf32: bool | None) -> Iterator[None]:
        """No switch: numpy's float32 is float32."""
        yield
