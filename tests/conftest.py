import os
import shutil
import tempfile
from pathlib import Path

# Every cache and config directory that the package, Keras, matplotlib, torch and the CUDA driver write goes into
# one temporary directory for the whole run, removed at its end: set here, before anything imports Keras, and
# inherited by every child process the tests start. The tests then never touch the user's own caches
# (~/.cache/carm_advisor: built kernels, measured profiles, calibrations; ~/.keras; matplotlib's font cache),
# and never read them either (a user's ~/.keras/keras.json picking another backend).
RUN_DIR = Path(tempfile.mkdtemp(prefix="carm-advisor-tests-"))
RUN_STAMP = RUN_DIR / "started"
RUN_STAMP.touch()
CACHE_DIRS = {
    "CARM_ADVISOR_CACHE": "carm_advisor",   # the package's cache (profiles/, calibration/, kernels/)
    "KERAS_HOME": "keras",
    "XDG_CACHE_HOME": "xdg-cache",
    "XDG_CONFIG_HOME": "xdg-config",
    "XDG_DATA_HOME": "xdg-data",
    "MPLCONFIGDIR": "matplotlib",
    "TORCH_HOME": "torch",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "CUDA_CACHE_PATH": "nv-compute-cache",
}
for _var, _name in CACHE_DIRS.items():
    os.environ[_var] = str(RUN_DIR / _name)
    (RUN_DIR / _name).mkdir()

import pytest  # noqa: E402
from _gpu import NO_GPU_REASON, gpu_present  # noqa: E402  (imports carm_advisor: after the directories are set)
from _isolation import home_caches_written_since  # noqa: E402

# TensorFlow's start-up chatter would bury test output; the CLI sets the same.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HOME_CHECK = "test_isolation.py::test_the_suite_wrote_nothing_into_the_home_directorys_caches"


def pytest_sessionfinish(session, exitstatus):
    """With worker processes (pytest-xdist), the controlling process checks the home directory's caches once every
    worker has finished: a worker's own check (test_isolation.py) cannot run after the other workers' tests. Its
    stamp was made before any worker started."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return
    written = home_caches_written_since(RUN_STAMP.stat().st_mtime)
    if written:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"written into the home directory's caches during the run: {written[:20]}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    shutil.rmtree(RUN_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def run_cache_dirs():
    """(the run's temporary directory, the file stamped when it was made, {variable: directory})."""
    return RUN_DIR, RUN_STAMP, {var: RUN_DIR / name for var, name in CACHE_DIRS.items()}


def pytest_collection_modifyitems(config, items):
    """Every @pytest.mark.gpu test skips, for one reason, where NVML sees no GPU. The check that nothing was
    written into the home directory runs last, after every test it checks."""
    last = [item for item in items if getattr(item, "nodeid", "").endswith(HOME_CHECK)]
    items[:] = [item for item in items if item not in last] + last
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not gpu_present():
        skip = pytest.mark.skip(reason=NO_GPU_REASON)
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _keras_globals_restored():
    """The CLI sets Keras' image data format (--layout) for its process; in this one process every test starts
    from the same format and dtype policy."""
    import keras

    fmt, policy = keras.config.image_data_format(), keras.config.dtype_policy()
    yield
    keras.config.set_image_data_format(fmt)
    keras.config.set_dtype_policy(policy)
