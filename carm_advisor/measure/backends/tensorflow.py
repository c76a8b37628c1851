"""The tensorflow backend: device sync, the TF32 execution flag, Keras' global state dropped between runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras

from carm_advisor.measure.backends.base import Backend


class TensorFlowBackend(Backend):
    name = "tensorflow"
    module = "tensorflow"
    compiles_train_step = True  # Keras runs the train step as a tf.function (XLA where jit_compile)

    def has_gpu(self) -> bool:
        import tensorflow as tf

        try:
            return bool(tf.config.list_physical_devices("GPU"))
        except RuntimeError:
            return False

    def gpu_name(self) -> str:
        import tensorflow as tf

        gpu = tf.config.list_physical_devices("GPU")[0]
        return tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)

    def sync(self, outputs: Any = None) -> None:
        """tf.test.experimental.sync_devices() on a GPU, else `outputs` pulled to the host."""
        import tensorflow as tf

        sync_devices = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
        if sync_devices is not None and tf.config.list_physical_devices("GPU"):
            sync_devices()
        elif outputs is not None:
            for tensor in keras.tree.flatten(outputs):
                if hasattr(tensor, "numpy"):
                    tensor.numpy()

    def math_mode(self) -> dict:
        """tf.config.experimental.tensor_float_32_execution_enabled(): one flag for convolutions and matmuls."""
        import tensorflow as tf

        enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
        conv = matmul = "tf32" if enabled else "fp32"
        return {"conv": conv, "matmul": matmul,
                "source": "tensorflow TF32 execution flag (default on; covers convolutions and matmuls)",
                "flags": {"tf.config.experimental.tensor_float_32_execution_enabled()": enabled},
                "gpu": self.has_gpu()}

    @contextlib.contextmanager
    def float32_math(self, tf32: bool | None) -> Iterator[None]:
        """tf.config.experimental.enable_tensor_float_32_execution(tf32)."""
        if tf32 is None:
            yield
            return
        import tensorflow as tf

        saved = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        try:
            yield
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(saved)

    def reset_compiled(self) -> None:
        """keras.backend.clear_session(free_memory=True): traced functions and cached device memory."""
        super().reset_compiled()
        keras.backend.clear_session(free_memory=True)
