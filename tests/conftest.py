import os

import pytest
from _gpu import NO_GPU_REASON, gpu_present

# TensorFlow's start-up chatter would bury test output; the CLI sets the same.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def pytest_collection_modifyitems(config, items):
    """Every @pytest.mark.gpu test skips, for one reason, where NVML sees no GPU."""
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
