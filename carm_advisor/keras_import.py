"""The package's first import of Keras: quiet, and a missing backend is a one-line error.

TensorFlow prints its C++ start-up lines (and, without a GPU, `failed call to cuInit ... (303)`) to
fd 2; they are not our output. TF_CPP_MIN_LOG_LEVEL is only a default: a user's setting is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys

from carm_advisor.errors import BackendUnavailableError

# The import name of each backend package -> what to install.
_INSTALL = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax", "jaxlib": "jax", "keras": "keras",
            "openvino": "openvino"}


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


def import_keras():
    """`import keras` once, quietly; BackendUnavailableError naming the pip install when a package is missing."""
    if "keras" in sys.modules:
        return sys.modules["keras"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")   # also hides the later cuInit line on CPU machines
    try:
        with native_stderr_silenced():
            import keras
    except ModuleNotFoundError as exc:
        package = (exc.name or "").partition(".")[0]
        if package not in _INSTALL:
            raise
        backend = os.environ.get("KERAS_BACKEND")
        what = f"the Keras backend '{backend}' (KERAS_BACKEND={backend})" if backend and package != "keras" else package
        raise BackendUnavailableError(f"{what} is not installed here: pip install {_INSTALL[package]}") from None
    return keras
