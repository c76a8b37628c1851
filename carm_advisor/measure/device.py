"""The header of a measured record: where it ran (the GPU NVML sees, the device the backend computes on),
which backend, framework and Keras versions, precision, layout and float32 math mode, when and by what command."""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from typing import Any

import keras

from carm_advisor.errors import PowerError
from carm_advisor.measure import backends
from carm_advisor.measure.backends import Backend
from carm_advisor.measure.records import RunMeasurement
from carm_advisor.power._base import GPU


def device_info(gpu: GPU | None, framework: Backend) -> dict:
    """The record's device: the backend's device name, and what NVML tells of `gpu` (each query the driver
    answers); "name" is the GPU's, else the backend's device."""
    info: dict[str, Any] = {"backend_device": framework.device_name()}
    if gpu is None:
        info["name"] = info["backend_device"]
        return info
    queries = {"name": gpu.name, "uuid": gpu.uuid, "driver": gpu.driver_version,
               "power_limit_w": gpu.power_limit_w, "max_sm_clock_mhz": gpu.max_sm_clock_mhz}
    for key, query in queries.items():
        try:
            info[key] = query()
        except PowerError:  # a query the driver does not support leaves its key out
            pass
    info.setdefault("name", info["backend_device"])
    return info


def run_record(model, *, batch_size: int, gpu: GPU | None, command: str | None) -> RunMeasurement:
    """An empty record of a run of `model` in the active backend (no layers or whole-model figures yet)."""
    framework = backends.get()
    policy = getattr(model, "dtype_policy", None) or keras.config.dtype_policy()
    return RunMeasurement(
        device=device_info(gpu, framework),
        backend=framework.name,
        backend_version=framework.version(),
        keras_version=keras.__version__,
        batch_size=batch_size,
        precision=str(getattr(policy, "name", policy)),
        layout=keras.config.image_data_format(),
        math_mode=framework.math_mode(),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command if command is not None else shlex.join(sys.argv),
        model_name=str(getattr(model, "name", "")),
    )
