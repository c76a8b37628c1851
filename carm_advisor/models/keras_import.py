"""The package's first import of Keras: quiet, and a missing backend is a one-line error.

TensorFlow prints its C++ start-up lines (and, without a GPU, `failed call to cuInit ... (303)`) to
fd 2; they are not our output. TF_CPP_MIN_LOG_LEVEL is only a default: a user's setting is kept.

Keras imports TensorFlow wherever it is installed, whatever the backend: keras.utils.set_random_seed seeds
tf.random too (models/builder.build calls it for every model it builds, so every study does), and saving checks
values against TensorFlow's types. The lines TensorFlow 2.21 prints while it loads ("WARNING: All log messages
before absl::InitializeLog() is called are written to STDERR", "oneDNN custom operations are on", "Could not find
cuda drivers on your machine") come before absl logging is set up: TF_CPP_MIN_LOG_LEVEL=3, GLOG_minloglevel=3 and
ABSL_MIN_LOG_LEVEL=3 each leave them on stderr (`python -c "import tensorflow"` under each, on this CPU machine).
`import_tensorflow_quietly` has Keras load it once with fd 2 silenced, before a model is built.

Keras 3 imports two optional packages at its own import whatever the backend, each inside
`try: ... except ImportError`: jax (keras.src.callbacks.orbax_checkpoint, a patch for old JAX
versions) and matplotlib.pyplot (keras.src.visualization.plot_image_gallery). With Keras on torch,
`carm-advise analyze` uses neither, and on a GPU machine jaxlib alone is hundreds of MB to load, so
the CLI hides them while Keras loads (`lean=True`) and unhides them right after.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

from carm_advisor.errors import BackendUnavailableError

# The import name of each backend package -> what to install.
_INSTALL = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax", "jaxlib": "jax", "keras": "keras",
            "openvino": "openvino"}


def configured_backend() -> str:
    """The backend Keras will load, read without importing it: KERAS_BACKEND, else keras.json's, else tensorflow."""
    backend = os.environ.get("KERAS_BACKEND")
    if backend:
        return backend
    import json
    from pathlib import Path

    config = Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras") / "keras.json"
    try:
        return str(json.loads(config.read_text()).get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def unused_at_import(backend: str) -> tuple[str, ...]:
    """Packages Keras imports optionally at its import that the analysis on `backend` does not use."""
    return ("matplotlib",) if backend == "jax" else ("jax", "matplotlib")


@contextlib.contextmanager
def modules_hidden(names):
    """While inside, `import NAME` (and its submodules) raises ModuleNotFoundError for each name not
    imported yet (a None entry in sys.modules, as the import system documents); afterwards it imports
    as usual. Names already imported are left alone."""
    hidden = [n for n in names if n not in sys.modules]
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def _profiling_imports() -> bool:
    """`python -X importtime` (or PYTHONPROFILEIMPORTTIME): its report goes to fd 2 and must not be silenced."""
    return "importtime" in sys._xoptions or bool(os.environ.get("PYTHONPROFILEIMPORTTIME"))


@contextlib.contextmanager
def native_stderr_silenced():
    """TensorFlow's C++ start-up lines go to fd 2 before absl logging is set up, whatever
    TF_CPP_MIN_LOG_LEVEL says; keep them off the user's terminal while Keras loads its backend."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_keras(lean: bool = False):
    """`import keras` once, quietly; BackendUnavailableError naming the pip install when a package is missing.

    lean=True hides the optional packages the configured backend's analysis does not use
    (`unused_at_import`) while Keras loads: for a process of our own (the CLI), not a user's, whose
    Keras would otherwise lack e.g. keras.visualization's matplotlib for the rest of the process.
    """
    if "keras" in sys.modules:
        return sys.modules["keras"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # also hides the later cuInit line on CPU machines
    hidden = unused_at_import(configured_backend()) if lean else ()
    quiet = contextlib.nullcontext() if _profiling_imports() else native_stderr_silenced()
    try:
        with quiet, modules_hidden(hidden):
            import keras
    except ModuleNotFoundError as exc:
        package = (exc.name or "").partition(".")[0]
        if package in hidden:   # Keras needs it after all (a backend read elsewhere than we read it): unhidden
            return import_keras(lean=False)
        if package not in _INSTALL:
            raise
        backend = os.environ.get("KERAS_BACKEND")
        what = f"the Keras backend '{backend}' (KERAS_BACKEND={backend})" if backend and package != "keras" else package
        raise BackendUnavailableError(f"{what} is not installed here: pip install {_INSTALL[package]}") from None
    return keras


def import_tensorflow_quietly() -> None:
    """Let Keras import TensorFlow now, with its C++ start-up lines kept off fd 2, where it would import it later
    anyway (see the module docstring): Keras does so in keras.utils.set_random_seed, to seed tf.random, so this
    makes that call, with the seed every model build uses (models/builder.build seeds 0 before it builds). Nothing
    where TensorFlow is imported already (or hidden) or not installed."""
    if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
        return
    keras = import_keras()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # its later lines (cuInit on a CPU machine)
    quiet = contextlib.nullcontext() if _profiling_imports() else native_stderr_silenced()
    with quiet:
        keras.utils.set_random_seed(0)
