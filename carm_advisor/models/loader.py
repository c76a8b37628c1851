"""Turning what a user names (a keras.applications model, a keras_hub preset or a .keras file) into a built Keras
model.

A keras_hub preset (`bert_base_en`, a `kaggle://` or `hf://` handle; keras-hub installed: `pip install
carm_advisor[hub]`) is built from its config alone, without its weights (`Backbone.from_preset(...,
load_weights=False)`); keras_hub still fetches that config from Kaggle or Hugging Face (its cache aside), so where
it cannot, the error says so and names a builder that makes the backbone from its config instead.

All model loading lives here; errors are one-line ModelLoadErrors.
"""

from __future__ import annotations

import contextlib
import json
import re
import zipfile
from pathlib import Path

from carm_advisor.errors import ModelLoadError
from carm_advisor.units import named_list

KERAS_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16")


def application_names() -> dict[str, str]:
    """Lower-case name -> keras.applications constructor name (vgg16 -> VGG16, mobilenetv3small -> MobileNetV3Small).

    The constructors keras.applications exports at its top level: some submodules (mobilenet_v3)
    export only preprocessing functions, so walking the submodules misses their models.
    """
    import keras

    return {
        attr.lower(): attr for attr in dir(keras.applications)
        if attr[:1].isupper() and callable(getattr(keras.applications, attr))
    }


@contextlib.contextmanager
def dtype_policy(precision: str | None):
    """Build layers under a Keras dtype policy, restoring the previous global policy afterwards."""
    import keras

    if precision is None:
        yield
        return
    if precision not in KERAS_POLICIES:
        raise ModelLoadError(f"precision must be one of {', '.join(KERAS_POLICIES)} to build a model, received: {precision!r}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)



@contextlib.contextmanager
def image_data_format(layout: str | None):
    """Build layers under a Keras image data format, restoring the previous global one afterwards."""
    import keras

    if layout is None:
        yield
        return
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format(layout)
    try:
        yield
    finally:
        keras.config.set_image_data_format(previous)

MODEL_FILE_SUFFIXES = (".keras", ".h5", ".hdf5")


def is_model_file(spec: str) -> bool:
    """True when `spec` names a model file (by its suffix, or because it exists), not an application."""
    path = Path(spec)
    return path.suffix in MODEL_FILE_SUFFIXES or path.exists()


def load_model(spec: str, precision: str | None = None, input_shape: tuple[int, ...] | None = None,
               layout: str | None = None):
    """A built keras.Model and its display name from an application name or a model file.

    layout: only said for a model file, to refuse it (an application is built under the caller's image data
    format): a saved model's layout is fixed by its weights and input shape."""
    import keras

    if not spec.strip():   # Path("") is ".", which exists: say what was expected instead
        raise ModelLoadError("expected a keras.applications model name (vgg16, resnet50, ...) or a .keras file, "
                             "received an empty name")
    if is_model_file(spec):
        if input_shape is not None:
            raise ModelLoadError(f"--input-shape applies to keras.applications models; {spec} is a model file "
                                 "with its own input shape")
        if layout is not None:
            raise ModelLoadError(f"--layout applies to keras.applications models; {spec} is a model file whose "
                                 "layout is fixed by its weights and input shape")
        path = Path(spec)
        return _load_file(path), path.stem
    apps = application_names()
    key = spec.lower().replace("-", "").replace("_", "")
    if key not in apps and input_shape is None and is_preset(spec):
        return load_preset(spec, precision), spec.rsplit("/", 1)[-1]
    if key not in apps:
        close = sorted(n for n in apps if n[:3] == key[:3])[:6]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(apps)[:12])}, ..."
        hub = "" if preset_names() is not None else " (a keras_hub preset needs keras-hub: pip install carm_advisor[hub])"
        raise ModelLoadError(f"'{spec}' is neither a model file nor a keras.applications model nor a keras_hub "
                             f"preset{hint}{hub}")
    attr = apps[key]
    constructor = getattr(keras.applications, attr)
    kwargs = {"weights": None}
    if input_shape is not None and len(input_shape) == 3:   # an image shape in the other layout's order
        first = keras.config.image_data_format() == "channels_first"
        channels, spatial = (input_shape[0], input_shape[1:]) if first else (input_shape[-1], input_shape[:-1])
        far_end = input_shape[-1] if first else input_shape[0]   # where the other layout puts its channels
        if channels > 4 and max(spatial) > 4 and far_end <= 4:
            order = "C,H,W (channels first)" if first else "H,W,C (channels last)"
            swapped = f"{input_shape[2]},{input_shape[0]},{input_shape[1]}" if first else \
                f"{input_shape[1]},{input_shape[2]},{input_shape[0]}"
            raise ModelLoadError(f"--input-shape is {order} in the {keras.config.image_data_format()} layout; "
                                 f"{','.join(map(str, input_shape))} has {channels} channels: did you mean {swapped}?")
    if input_shape is not None:
        kwargs.update(input_shape=tuple(input_shape), include_top=True)
    try:
        with dtype_policy(precision):
            model = constructor(**kwargs)
    except ModelLoadError:
        raise
    except Exception as exc:  # keras raises ValueError for bad input shapes etc.
        raise ModelLoadError(f"could not build {attr}: {_first_line(exc)}") from None
    if input_shape is None and _open_dimensions(model):
        # MobileNetV3* builds with (None, None, 3) when no shape is given: a CARM needs sizes, so build it
        # at the ImageNet size its weights are published for, in the current layout.
        channels_first = keras.config.image_data_format() == "channels_first"
        return load_model(spec, precision, (3, *DEFAULT_IMAGE_SIZE) if channels_first else (*DEFAULT_IMAGE_SIZE, 3))
    return model, attr.lower()


DEFAULT_IMAGE_SIZE = (224, 224)

# Where a keras_hub preset's config comes from when keras_hub has no copy: what a one-line error names instead.
PRESET_BUILDERS = "examples/transformers.py (examples.transformers:bert_base, :gemma_like_decoder, :vit_b16)"


def preset_names() -> frozenset[str] | None:
    """The keras_hub presets of its Backbone classes (bert_base_en, gemma_2b_en, ...): read from the installed
    keras_hub, no network; None where keras_hub is not installed."""
    try:
        import keras_hub
    except ImportError:
        return None
    return frozenset(keras_hub.models.Backbone.presets)


def is_preset(spec: str) -> bool:
    """A keras_hub preset: a built-in preset's name, or a kaggle:// / hf:// handle."""
    if spec.startswith(("kaggle://", "hf://")):
        return True
    names = preset_names()
    return names is not None and spec in names


def load_preset(spec: str, precision: str | None = None):
    """A keras_hub preset's backbone, built from its config without its weights (under `precision`'s policy where
    given); a one-line ModelLoadError where keras_hub is missing or cannot fetch the config."""
    try:
        import keras_hub
    except ImportError:
        raise ModelLoadError(f"{spec} is a keras_hub preset: install keras-hub (pip install carm_advisor[hub])") \
            from None
    kwargs = {"dtype": precision} if precision is not None else {}
    try:
        with dtype_policy(precision):
            return keras_hub.models.Backbone.from_preset(spec, load_weights=False, **kwargs)
    except Exception as exc:   # a network error (requests' ConnectionError), an unknown handle, an HTTP error
        raise ModelLoadError(f"could not fetch the config of keras_hub preset {spec} ({_first_line(exc)[:160]}): "
                             "keras_hub downloads it even without the weights; pass a builder that makes the backbone "
                             f"from its config instead, as 'module:function' (e.g. {PRESET_BUILDERS})") from None


def _open_dimensions(model) -> bool:
    """True when an input of `model` has an unknown dimension besides the batch."""
    return any(d is None for x in model.inputs for d in tuple(x.shape)[1:])


def _load_file(path: Path):
    import keras

    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"{path} is a directory; expected a .keras file (a SavedModel is not supported)")
    if path.suffix == ".keras" and not zipfile.is_zipfile(path):
        raise ModelLoadError(f"{path} is not a valid .keras file (not a zip archive)")
    try:
        model = keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as exc:  # corrupt archives, unknown classes, unsafe lambdas: all one line
        unknown = unknown_classes(path, exc)
        if unknown:
            raise ModelLoadError(f"could not load {path}: {_unknown_classes_text(unknown)}") from None
        raise ModelLoadError(f"could not load {path}: {_first_line(exc)}") from None
    if not isinstance(model, keras.Model):
        raise ModelLoadError(f"{path} holds a {type(model).__name__}, not a Keras model")
    if not model.built:
        raise ModelLoadError(f"{path} holds a model that was never built; build or call it before saving")
    return model


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# Keras 3 ("Could not locate class 'Scale'", "... function 'swish2'") and legacy .h5 ("Unknown layer: 'Scale'").
_UNKNOWN_OBJECT = re.compile(r"Could not locate (?:class|function) '([^']+)'|Unknown (?:layer|object|activation|"
                             r"initializer|regularizer|constraint|loss|metric)(?: type)?: '?([A-Za-z_][\w.>]*)'?")


def unknown_classes(path: Path, exc: BaseException) -> list[tuple[str, str | None]]:
    """(class name, registered name) of the custom objects a model file uses and this process has not
    registered: the one Keras names in `exc` first, then the others of the .keras file's config.json
    (Keras stops at the first). [] when the error is not about an unknown object."""
    match = _UNKNOWN_OBJECT.search(str(exc))
    if not match:
        return []
    first = match.group(1) or match.group(2)
    custom = _unregistered_in_config(path)
    registered_as = dict(custom)
    found = [(first, registered_as.get(first))]
    found += [(name, reg) for name, reg in custom if name != first]
    return found


def keras_file_config(path: str | Path) -> dict | None:
    """A .keras archive's config.json, read without loading the model or its weights; None for another file
    (.h5) or an unreadable one."""
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return config if isinstance(config, dict) else None


def _unregistered_in_config(path: Path) -> list[tuple[str, str | None]]:
    """Objects of a .keras file's config.json from outside Keras that are not registered here."""
    import keras

    config = keras_file_config(path)
    if config is None:   # an .h5 file, or no readable config: the exception's name alone
        return []
    found: dict[str, str | None] = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            name, module = node.get("class_name"), node.get("module")
            if (isinstance(name, str) and not name.startswith("__") and "config" in node
                    and not (isinstance(module, str) and (module == "keras" or module.startswith("keras.")))):
                registered = node.get("registered_name")
                key = registered if isinstance(registered, str) else name
                if keras.saving.get_registered_object(key) is None:
                    found.setdefault(name, registered if isinstance(registered, str) else None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return list(found.items())


def _unknown_classes_text(unknown: list[tuple[str, str | None]]) -> str:
    name, registered = unknown[0]
    key = registered or name
    package = registered.split(">")[0] if registered and ">" in registered else None
    others = [n for n, _ in unknown[1:]]
    decorator = f"@keras.saving.register_keras_serializable(package={package!r})" if package else \
        "@keras.saving.register_keras_serializable()"
    saved_as = [f"saved as {registered!r}"] if registered and registered != name else []
    if others:
        saved_as.append(f"also not registered: {named_list(others, 5)}")
    return (f"unknown custom class {name}" + (f" ({'; '.join(saved_as)})" if saved_as else "")
            + f": it is not registered in this process; register it with {decorator} on the class, in a module "
            f"imported before loading, or load the model in Python with keras.saving.load_model(path, "
            f"custom_objects={{{key!r}: {name}}}) and pass it to carm_advisor.analyze()")
