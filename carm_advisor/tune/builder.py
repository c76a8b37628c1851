"""How a study (re)builds the user's model for one configuration, in this process or in a worker.

A model is named by a string so a child process can rebuild it: a keras.applications name
(`vgg16`), a `.keras` file, or `"package.module:function"`, a builder called as `function(config)`
under the trial's dtype policy and image data format. From Python a builder function may be passed
directly; it is turned into its "module:function" name when trials run in child processes (a lambda
or a nested function cannot travel there: it is then refused with one line).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from carm_advisor.errors import ModelLoadError


@dataclass(frozen=True)
class ModelSpec:
    """What the user named. `kind`: "application", "file", "builder" (a "module:function") or "callable"."""

    kind: str
    spec: str
    name: str
    fn: Callable[..., Any] | None = None

    @property
    def rebuilds_per_precision(self) -> bool:
        """A saved file keeps its own dtype policy and layout; the others rebuild under the trial's."""
        return self.kind != "file"

    def portable(self) -> str:
        """The string a worker process can rebuild the model from."""
        if self.kind == "callable":
            raise ValueError(
                f"the builder {self.name!r} cannot run in a child process (a lambda or a nested function); "
                "pass 'package.module:function' or a top-level function"
            )
        return self.spec


def model_spec(model_or_builder: Any) -> ModelSpec:
    """Normalise what tune() was given: a name, a file, 'module:function', a function, or a built model."""
    from carm_advisor.model_loader import is_model_file

    if isinstance(model_or_builder, str):
        text = model_or_builder
        if is_model_file(text):
            from pathlib import Path

            return ModelSpec("file", text, Path(text).stem)
        if ":" in text:
            module, _, attr = text.partition(":")
            if not module or not attr.replace(".", "").replace("_", "").isalnum():
                raise ModelLoadError(f"Expected a builder as 'package.module:function', Received: {text!r}")
            return ModelSpec("builder", text, attr.split(".")[-1])
        return ModelSpec("application", text.lower(), text.lower())
    if callable(model_or_builder) and not hasattr(model_or_builder, "layers"):
        fn = model_or_builder
        qual = getattr(fn, "__qualname__", "")
        module = getattr(fn, "__module__", None)
        name = getattr(fn, "__name__", "builder")
        if module and module != "__main__" and "<" not in qual:
            return ModelSpec("builder", f"{module}:{qual}", name, fn)
        return ModelSpec("callable", repr(fn), name, fn)
    if hasattr(model_or_builder, "layers"):  # a built keras.Model: saved to a file for workers by the caller
        return ModelSpec("model", "", getattr(model_or_builder, "name", "model"), lambda cfg=None, m=model_or_builder: m)
    raise ModelLoadError(
        f"Expected a model name, a .keras file, 'module:function' or a builder function, Received: {type(model_or_builder).__name__}"
    )


def _resolve_builder(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(f"could not import the builder {spec!r}: {exc}") from None
    if not callable(obj):
        raise ModelLoadError(f"the builder {spec!r} is not callable")
    return obj


def build(spec: ModelSpec, policy: str = "float32", layout: str | None = "channels_last", seed: int | None = 0,
          config: Any = None):
    """A built keras.Model for one configuration. `seed` fixes the random weights (same for every trial)."""
    import keras

    from carm_advisor.model_loader import dtype_policy, image_data_format, load_model

    if seed is not None:
        keras.utils.set_random_seed(seed)
    if spec.kind == "file":
        model, _ = load_model(spec.spec)
        return model
    if spec.kind == "model":
        return spec.fn()
    with image_data_format(layout):
        if spec.kind == "application":
            model, _ = load_model(spec.spec, precision=policy)
            return model
        fn = spec.fn if spec.fn is not None else _resolve_builder(spec.spec)
        with dtype_policy(policy):
            try:
                model = fn(config) if _takes_argument(fn) else fn()
            except ModelLoadError:
                raise
            except Exception as exc:
                raise ModelLoadError(f"the builder {spec.name!r} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(model, "layers"):
        raise ModelLoadError(f"the builder {spec.name!r} returned a {type(model).__name__}, not a Keras model")
    return model


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return True
    return len(params) >= 1
