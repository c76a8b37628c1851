"""How a study (re)builds the user's model for one configuration, in this process or in a worker.

A model is named by a string so a child process can rebuild it: a keras.applications name
(`vgg16`, built at the image size its input shapes give: `model_spec(name, input_shapes=[(None, 160, 160, 3)])`), a
keras_hub preset (`bert_base_en`, built from its config without weights: loader.load_preset), a `.keras` file, or
`"package.module:function"`, a builder called as `function(config)` under the trial's dtype policy and image data
format. A model file is rebuilt at another precision
from its own config, its layers' dtype policies replaced (`rebuild_under_policy`), with its weights;
its layout cannot be changed so (its input shape and weights are laid out for it), and a file whose
policies cannot be replaced (quantized layers, float16 variables) keeps its precision too:
`file_traits` says which, and tune() narrows the space and says so in the result's warnings. From Python a builder function may be passed
directly; it is turned into its "module:function" name when trials run in child processes (a lambda
or a nested function cannot travel there: it is then refused with one line).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carm_advisor.errors import ModelLoadError
from carm_advisor.mapping import map_model
from carm_advisor.mapping.input_shapes import image_shape
from carm_advisor.mapping.registry import policy_name_of
from carm_advisor.mapping.walker import is_composite_user_layer
from carm_advisor.models.loader import (
    application_names,
    dtype_policy,
    image_data_format,
    is_model_file,
    is_preset,
    keras_file_config,
    load_model,
)


@dataclass(frozen=True)
class ModelSpec:
    """What the user named. `kind`: "application", "preset" (keras_hub), "file", "builder" (a "module:function"),
    "callable" or "model". `input_shape`: the image size an application is built at (its input shapes' one shape
    without the batch), else None."""

    kind: str
    spec: str
    name: str
    fn: Callable[..., Any] | None = None
    input_shape: tuple[int, ...] | None = None

    @property
    def rebuilds_per_precision(self) -> bool:
        """Every kind builds under the trial's dtype policy: a saved file is rebuilt from its config
        (rebuild_under_policy); one whose policies cannot be replaced is searched at its own precision only
        (tune() narrows the space: file_traits)."""
        return True

    @property
    def keeps_own_layout(self) -> bool:
        """A saved file and a built model keep their layout: their input shape and weights are laid out for it
        (a built model's predictions cannot tell layouts apart, and its measured trials run its saved copy)."""
        return self.kind in ("file", "model")

    def portable(self) -> str:
        """The string a worker process can rebuild the model from."""
        if self.kind == "callable":
            raise ValueError(
                f"the builder {self.name!r} cannot run in a child process (a lambda or a nested function); "
                "pass 'package.module:function' or a top-level function"
            )
        return self.spec


def model_spec(model_or_builder: Any, input_shapes=None) -> ModelSpec:
    """Normalise what tune() was given: a name, a file, 'module:function', a function, or a built model.
    input_shapes: the model's input shapes (mapping.input_shapes); an application's one shape is its image size,
    the others are applied to the built model where it is mapped and measured."""
    if isinstance(model_or_builder, str):
        text = model_or_builder
        if is_model_file(text):
            from pathlib import Path

            return ModelSpec("file", text, Path(text).stem)
        if text.startswith(("kaggle://", "hf://")):
            return ModelSpec("preset", text, text.rstrip("/").rsplit("/", 1)[-1])
        if ":" in text:
            module, _, attr = text.partition(":")
            if not module or not attr.replace(".", "").replace("_", "").isalnum():
                raise ModelLoadError(f"Expected a builder as 'package.module:function', Received: {text!r}")
            return ModelSpec("builder", text, attr.split(".")[-1])
        if text.lower().replace("-", "").replace("_", "") not in application_names() and is_preset(text):
            return ModelSpec("preset", text, text)
        return ModelSpec("application", text.lower(), text.lower(), input_shape=image_shape(input_shapes, text))
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


def _import_from_here(module_name: str):
    """The module, also from the current directory: a console script (carm-advise) does not put it on sys.path,
    as `python -m` does, and a builder beside the user is the common case (uvicorn and gunicorn do the same)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != module_name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)   # after everything installed: a local file never shadows a package
        return importlib.import_module(module_name)


def _resolve_builder(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = _import_from_here(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ModelLoadError(f"could not import the builder {spec!r}: {exc}") from None
    if not callable(obj):
        raise ModelLoadError(f"the builder {spec!r} is not callable")
    return obj


def build(spec: ModelSpec, policy: str = "float32", layout: str | None = "channels_last", seed: int | None = 0,
          config: Any = None, quantize: str | None = None):
    """A built keras.Model for one configuration. `seed` fixes the random weights (same for every trial).
    `quantize`: a Keras quantisation mode ("int8", "float8") applied to the model built under `policy`
    (quantize_model); a built model (kind "model") is quantised in a copy, never in the user's own object."""
    model = _build(spec, policy, layout, seed, config)
    if quantize is None:
        return model
    if spec.kind == "model":
        copy = rebuild_under_policy(model, policy, copy=True)
        if copy is model:
            raise ModelLoadError(f"cannot quantise the model {spec.name!r} to {quantize}: its dtype policies cannot "
                                 f"be replaced ({config_traits_of(model).fixed_precision}), so no copy of it can be "
                                 "made to quantise")
        model = copy
    return quantize_model(model, quantize, spec.name)


def quantize_model(model, mode: str, name: str | None = None):
    """`model` after `model.quantize(mode)` (Keras converts the layers that implement the mode, Dense and
    EinsumDense among them, and warns about and skips every other: those warnings are left out here). A model
    Keras cannot quantise in that mode (it raises: int8 under a float16 compute dtype, a layer quantised already)
    is a one-line ModelLoadError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.quantize(mode)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ModelLoadError(f"cannot quantise {name or model.name!r} to {mode}: {type(exc).__name__}: "
                             f"{first}") from None
    return model


def quantized_layers(model) -> dict[str, str]:
    """{layer path: quantisation mode} of every layer of `model` Keras quantised (its dtype policy's
    quantization_mode), nested models' and composite layers' sublayers included."""
    return {getattr(layer, "path", layer.name): layer.dtype_policy.quantization_mode
            for layer in model._flatten_layers(include_self=False)
            if getattr(getattr(layer, "dtype_policy", None), "quantization_mode", None)}


def config_traits_of(model) -> FileTraits:
    """FileTraits of a built model's serialised config (FileTraits(None, None, why) where it cannot be
    serialised)."""
    import keras

    try:
        return config_traits(keras.saving.serialize_keras_object(model))
    except Exception as exc:
        return FileTraits(None, None, f"its config cannot be serialised: {type(exc).__name__}")


def _build(spec: ModelSpec, policy: str, layout: str | None, seed: int | None, config: Any):
    import keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    if spec.kind == "file":
        model, _ = load_model(spec.spec)
        return rebuild_under_policy(model, policy)
    if spec.kind == "model":
        return spec.fn()
    with image_data_format(layout):
        if spec.kind in ("application", "preset"):
            model, _ = load_model(spec.spec, precision=policy, input_shape=spec.input_shape)
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


# ---- a model file at another precision ------------------------------------------------------------

# Policies a file's layers may hold for the file to be rebuilt at another precision: their variables are
# float32 in each, so its weights load into the rebuilt model as they are.
REBUILDABLE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


@dataclass(frozen=True)
class FileTraits:
    """What a model file fixes. policy: the dtype policy most of its layers hold (its own precision); layout:
    its layers' data_format (None: no layer has one, so the layout changes nothing); fixed_precision: why its
    precision cannot be changed here, None where rebuild_under_policy can change it."""

    policy: str | None
    layout: str | None
    fixed_precision: str | None = None


def _policies(node, found: list) -> None:
    """Every dtype policy object of a serialised Keras config's layers: (class name, policy name). A model's own
    policy (a Sequential's config carries one) is left out: its layers say what they compute at."""
    if isinstance(node, dict):
        name = node.get("class_name")
        conf = node.get("config")
        if isinstance(name, str) and name.endswith("DTypePolicy") and isinstance(conf, dict):
            found.append((name, conf.get("name") or f"{conf.get('mode')}_from_{conf.get('source_name')}"))
            return
        if isinstance(conf, dict) and isinstance(conf.get("layers"), list):   # a model: its layers, not its dtype
            node = {**node, "config": {k: v for k, v in conf.items() if k != "dtype"}}
        for value in node.values():
            _policies(value, found)
    elif isinstance(node, list):
        for value in node:
            _policies(value, found)


def _data_formats(node, found: list) -> None:
    if isinstance(node, dict):
        fmt = node.get("data_format")
        if isinstance(fmt, str) and fmt not in found:
            found.append(fmt)
        for value in node.values():
            _data_formats(value, found)
    elif isinstance(node, list):
        for value in node:
            _data_formats(value, found)


def config_traits(config: dict) -> FileTraits:
    """FileTraits of a serialised model (keras.saving.serialize_keras_object, or a .keras file's config.json)."""
    found: list = []
    _policies(config, found)
    formats: list = []
    _data_formats(config, formats)
    layout = formats[0] if formats else None
    names = [n for _, n in found]
    # The policy most layers hold; on a tie a mixed policy (a mixed model pins a few layers, such as its output, to
    # float32), then the first in layer order: never Python's set order, which varies between runs.
    own = max(dict.fromkeys(names), key=lambda n: (names.count(n), n.startswith("mixed_"))) if names else None
    odd = sorted({f"{n} ({c})" if c != "DTypePolicy" else n for c, n in found
                  if c != "DTypePolicy" or n not in REBUILDABLE_POLICIES})
    if not found:
        why = "its config names no dtype policy to replace"
    elif odd:
        why = f"its layers hold dtype polic{'ies' if len(odd) > 1 else 'y'} {', '.join(odd)}, which a rebuild cannot replace"
    else:
        why = None
    return FileTraits(own, layout, why)


def layer_policies(model) -> list[tuple[str, str]]:
    """(layer name, dtype policy name) of every layer the mapping costs that holds a policy: nested models' and
    user layers' sublayers (what mapping/walker.py opens: walker.is_composite_user_layer) rather than the
    container, a quantized policy by its source policy (mapping.registry.policy_name_of); input layers hold none
    that counts."""
    import keras

    found: list[tuple[str, str]] = []

    def walk(container) -> None:
        for layer in container._flatten_layers(include_self=False, recursive=False):
            if isinstance(layer, keras.layers.InputLayer):
                continue
            if getattr(layer, "layers", None) or is_composite_user_layer(layer):   # a nested model, a user layer
                walk(layer)
                continue
            name = policy_name_of(layer)
            if name:
                found.append((layer.name, name))

    walk(model)
    return found


def model_policy(model) -> str:
    """The dtype policy most of the model's layers hold (config_traits, over the policies of its
    layers, nested models' layers included): a model saved under mixed_bfloat16 with its output layer pinned to
    float32 is a mixed_bfloat16 model, whatever the policy of the Model object itself (a loaded file's is the
    global one). The model's own policy where no layer has one. (The layers' policies are read as config_traits
    reads a serialised config's, without serialising it: that imports TensorFlow on every backend.)"""
    policies = [{"class_name": "DTypePolicy", "config": {"name": name}} for _, name in layer_policies(model)]
    own = config_traits({"layers": policies}).policy
    if own:
        return own
    policy = getattr(model, "dtype_policy", None)
    return getattr(policy, "name", None) or "float32"


def file_config(path: str) -> dict:
    """The serialised model of a model file: a .keras archive's config.json (read without its weights), else
    the loaded model's (a bad file raises load_model's one-line ModelLoadError)."""
    config = keras_file_config(path)
    if config is not None:
        return config
    import keras

    with keras.device("cpu"):   # the tuner's own process takes no GPU memory from the trials
        model, _ = load_model(path)
    return keras.saving.serialize_keras_object(model)


def _layer_formats(model) -> list[str]:
    """The data_format of every layer of a built model, nested models' layers included, in order."""
    found: list[str] = []

    def walk(layer):
        fmt = getattr(layer, "data_format", None)
        if isinstance(fmt, str) and fmt not in found:
            found.append(fmt)
        for child in getattr(layer, "layers", None) or ():
            walk(child)

    for layer in model.layers:
        walk(layer)
    return found


def file_traits(spec: ModelSpec) -> FileTraits:
    """What a model file or a built model fixes (FileTraits). A built model is read from its serialised config
    (what its saved copy holds); its layout from its layers themselves, which a model whose config cannot be
    serialised still has (that one is searched at every precision: a predicted study sets the compute dtype,
    and a measured one cannot save it)."""
    if spec.kind != "model":
        return config_traits(file_config(spec.spec))
    import keras

    model = spec.fn()
    formats = _layer_formats(model)
    try:
        traits = config_traits(keras.saving.serialize_keras_object(model))
    except Exception:
        traits = FileTraits(None, None, None)
    return FileTraits(traits.policy, formats[0] if formats else traits.layout, traits.fixed_precision)


def _replace_policies(node, old: str, new: str):
    """A copy of a serialised config with every DTypePolicy named `old` named `new` (layers set to another
    policy, such as a float32 output layer of a mixed model, keep theirs)."""
    if isinstance(node, dict):
        if node.get("class_name") == "DTypePolicy" and isinstance(node.get("config"), dict) \
                and node["config"].get("name") == old:
            return {**node, "config": {**node["config"], "name": new}}
        return {k: _replace_policies(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_policies(v, old, new) for v in node]
    return node


def rebuild_under_policy(model, policy: str | None, copy: bool = False):
    """`model` (loaded from a file) at dtype policy `policy`: rebuilt from its config with its own policy (the
    one most of its layers hold) replaced, under that global policy (for layers whose config names none) and
    its own image data format, with its weights (float32 variables in every REBUILDABLE_POLICIES policy).
    The model itself where the policy is its own (unless `copy`: then a rebuilt copy at its own policy too), or
    where its policies cannot be replaced (FileTraits)."""
    import keras

    if policy is None and not copy:
        return model
    try:
        config = keras.saving.serialize_keras_object(model)
    except Exception as exc:
        raise ModelLoadError(f"cannot rebuild {model.name!r} at {policy}: its config cannot be serialised "
                             f"({type(exc).__name__}: {exc})") from None
    traits = config_traits(config)
    policy = policy or traits.policy
    if traits.fixed_precision or (traits.policy == policy and not copy):
        return model
    try:
        with image_data_format(traits.layout), dtype_policy(policy):
            rebuilt = keras.saving.deserialize_keras_object(_replace_policies(config, traits.policy, policy),
                                                            safe_mode=True)
        rebuilt.set_weights(model.get_weights())
    except Exception as exc:
        raise ModelLoadError(f"cannot rebuild {model.name!r} at {policy}: {type(exc).__name__}: {exc}") from None
    return rebuilt


def narrowing_note(spec: ModelSpec, traits: FileTraits, dropped: list[str]) -> str:
    """One line: what of the space a model file leaves out, why, and how to search it."""
    why = []
    if traits.fixed_precision:
        why.append(f"its precision stays its own ({traits.fixed_precision})")
    if any(d.startswith("channels_") for d in dropped):
        kind = "built" if spec.kind == "model" else "saved"
        why.append(f"its layout stays {traits.layout} (a {kind} model's input shape and weights are laid out for it)")
    name = f"the model {spec.name!r}" if spec.kind == "model" else Path(spec.spec).name
    return (f"{name}: {', '.join(dropped)} not searched: {'; '.join(why)}; to search "
            f"{'them' if len(dropped) > 1 else 'it'}, pass a builder 'module:function' that builds the model under "
            "the trial's dtype policy and image data format (README, 'Tune it for energy')")


# ---- what a study's fingerprint knows the model by ---------------------------------------------------


def content_hash(obj) -> str:
    """A short, stable hash of a JSON-able object (sorted keys): what a study fingerprint compares."""
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _layer_names(node, names: dict[str, int]) -> None:
    """Every layer (and model) name of a serialised config, numbered in order of first appearance. Dtype
    policies are objects with a config "name" too; theirs are not layer names (a policy stays as it is)."""
    if isinstance(node, dict):
        conf = node.get("config")
        cls = node.get("class_name")
        if isinstance(cls, str) and not cls.endswith("DTypePolicy") and isinstance(conf, dict) \
                and isinstance(conf.get("name"), str):
            names.setdefault(conf["name"], len(names))
        for value in node.values():
            _layer_names(value, names)
    elif isinstance(node, list):
        for value in node:
            _layer_names(value, names)


def _renamed(node, names: dict[str, int]):
    if isinstance(node, dict):
        return {k: _renamed(v, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamed(v, names) for v in node]
    if isinstance(node, str) and node in names:
        return f"#{names[node]}"
    return node


def config_identity(config: dict) -> str:
    """A hash of a serialised model with its layer names replaced by their order of appearance: names Keras
    generates (conv2d, conv2d_3) depend on what the saving process built before, not on the model."""
    names: dict[str, int] = {}
    _layer_names(config, names)
    return f"sha256:{content_hash(_renamed(config, names))}"


def structure_identity(model) -> str:
    """A hash of what the CARM maps of a built model, without layer names: each layer call's class, shapes, dtype,
    FLOPs, bytes and parameters at batch 1 (mapping/map_model); where the model cannot be mapped, each layer's
    class and weight shapes."""
    try:
        with warnings.catch_warnings():   # an identity, not a figure: a lower-bound mapping is not said from here
            warnings.simplefilter("ignore", RuntimeWarning)
            costs = map_model(model, batch_size=1)
        rows = [[c.type, c.op_class, c.compute_dtype, c.flops, c.bytes_read, c.bytes_written, c.params,
                 c.known, list(c.input_shapes), list(c.output_shapes)] for c in costs]
    except Exception:   # not mappable (an unbuilt subclassed layer): its layers and their weights
        layers = list(model._flatten_layers(include_self=False)) if hasattr(model, "_flatten_layers") else []
        rows = [[type(layer).__name__, [[list(w.shape), str(w.dtype)] for w in layer.weights]] for layer in layers]
    return f"sha256:{content_hash(rows)}"


def model_identity(spec: ModelSpec, model_for=None) -> str:
    """What a study's fingerprint knows the model by, whatever its file is called or where it lies: a
    keras.applications name itself; a model file the hash of its config (config_identity; its weights
    are left out: no stored value but a measured output error depends on them); a "module:function" that
    string and the hash of the model it builds in channels_last (structure_identity); a function or a built
    model that hash alone. `model_for(layout)` gives the built model (the predictor's, so it is built once);
    without it the model is built here, on the CPU."""
    if spec.kind in ("application", "preset"):
        return f"{spec.kind} {spec.spec}"
    if spec.kind == "file":
        return f"file {config_identity(file_config(spec.spec))}"
    if model_for is not None:
        model = model_for("channels_last")
    else:
        import keras

        with keras.device("cpu"):   # the tuner's own process takes no GPU memory from the trials
            model = build(spec, "float32", "channels_last", seed=0)
    prefix = spec.spec if spec.kind == "builder" else spec.kind
    return f"{prefix} {structure_identity(model)}"


def file_at_precision(model, precision: str | None):
    """(model, compute dtype override) for a model loaded from a file and analysed at Keras dtype policy
    `precision`: the model rebuilt with its own policy (the one most of its layers hold) replaced, layers pinned
    to another policy (a mixed model's float32 output layer) keeping theirs (rebuild_under_policy,
    what tune does), and None; where its policies cannot be replaced (config_traits: quantized
    layers, float16 variables, a config naming none, a config that cannot be serialised), the model as it is and
    `precision`, for analyze() to compute every layer at."""
    if precision is None:
        return model, None
    import keras

    try:
        traits = config_traits(keras.saving.serialize_keras_object(model))
    except Exception:
        return model, precision
    if traits.fixed_precision:
        return model, precision
    return rebuild_under_policy(model, precision), None
