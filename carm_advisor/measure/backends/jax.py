"""The jax backend: block on outputs, jax.jit of stateless calls, default matmul precision, cache clearing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from carm_advisor.measure.backends.base import Backend


class JaxBackend(Backend):
    name = "jax"
    module = "jax"
    jit_execution = True        # jax dispatches op by op eagerly; a model runs as one jitted program
    compiles_train_step = True  # Keras jits the train step on jax

    def has_gpu(self) -> bool:
        import jax

        try:
            return any(d.platform == "gpu" for d in jax.devices())
        except RuntimeError:  # jax raises when no platform is initialised
            return False

    def gpu_name(self) -> str:
        import jax

        return next(d.device_kind for d in jax.devices() if d.platform == "gpu")

    def sync(self, outputs: Any = None) -> None:
        """jax.block_until_ready(outputs). jax has no global device sync; XLA runs one stream in order, so the
        last outputs being ready means all earlier work is."""
        if outputs is not None:
            import jax

            jax.block_until_ready(outputs)

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import jax

        return jax.jit(fn)

    def back_to_back(self, pure: Callable[[list, list], Any], calls: int) -> Callable[[list, list], Any]:
        """jax.jit of a Python loop of `calls` calls. Call k+1's first input is call k's with one element
        changed by isnan(one element of call k's output): 0 for finite outputs, so the data are the same, but
        XLA cannot prove it, so it can neither merge the calls nor hoist them. The extra work per call is one
        one-element update (in place after the first)."""
        import jax
        import jax.numpy as jnp

        def looped(vs, ts):
            first, rest = ts[0], list(ts[1:])
            outs = []
            for _ in range(calls):
                out = pure(vs, [first, *rest])
                outs.append(out)
                leaf = jax.tree_util.tree_leaves(out)[0]
                probe = jnp.isnan(jnp.ravel(leaf)[0].astype("float32")).astype(first.dtype)
                first = first.at[(0,) * first.ndim].add(probe)
            return outs

        return jax.jit(looped)

    def math_mode(self) -> dict:
        """jax.config.jax_default_matmul_precision; XLA's DEFAULT precision lets cuBLAS/cuDNN use TF32 for
        float32 on Ampere+ GPUs."""
        import jax

        gpu = self.has_gpu()
        precision = jax.config.jax_default_matmul_precision
        name = None if precision is None else str(precision).lower()
        if name in ("highest", "float32", "precision.highest"):
            conv = matmul = "fp32"
        elif name in ("bfloat16", "fastest"):
            conv = matmul = "bf16" if gpu else "fp32"
        else:  # None, "default", "high", "tensorfloat32", "bfloat16_3x"
            conv = matmul = "tf32"
        return {"conv": conv, "matmul": matmul,
                "source": "jax default matmul precision (None = DEFAULT: TF32 for float32 on Ampere+ GPUs)",
                "flags": {"jax.config.jax_default_matmul_precision": precision}, "gpu": gpu}

    @contextlib.contextmanager
    def float32_math(self, tf32: bool | None) -> Iterator[None]:
        """jax.default_matmul_precision("tensorfloat32" or "float32")."""
        if tf32 is None:
            yield
            return
        import jax

        with jax.default_matmul_precision("tensorfloat32" if tf32 else "float32"):
            yield

    def reset_compiled(self) -> None:
        """jax.clear_caches(): jax keeps every compiled executable otherwise."""
        import jax

        super().reset_compiled()
        jax.clear_caches()
