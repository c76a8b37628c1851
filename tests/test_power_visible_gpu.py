"""The CUDA-visible device mapped to its NVML device (power/nvml.py), on four fake GPUs: with
CUDA_VISIBLE_DEVICES set, NVML still lists every GPU, so the tuner's worker must not read NVML index 0."""

from __future__ import annotations

import pytest

from carm_advisor.errors import NotSupportedError
from carm_advisor.power.fake import FakeGPU
from carm_advisor.power.nvml import NVMLUnavailableError, gpu_identity, open_visible_gpu, visible_nvml_index

UUIDS = ["GPU-0a1b2c3d-0000-0000-0000-000000000000", "GPU-1f2e3d4c-0000-0000-0000-000000000001",
         "GPU-2a2a2a2a-0000-0000-0000-000000000002", "GPU-3b3b3b3b-0000-0000-0000-000000000003"]
GPUS = [FakeGPU(uuid=u, power_w=100.0 + 10 * i) for i, u in enumerate(UUIDS)]


@pytest.mark.parametrize("visible, nvml_index", [
    (None, 0),                      # unpinned: CUDA device 0 is NVML device 0
    ("2", 2), ("3,1", 3),           # an index (PCI bus order): the first listed is the process's device 0
    (UUIDS[1], 1),                  # a full UUID
    ("GPU-2a2a", 2), ("3b3b3b3b", 3),  # a unique UUID prefix, with or without "GPU-" (CUDA accepts both)
])
def test_the_visible_device_is_found_among_all_gpus(visible, nvml_index):
    assert visible_nvml_index(visible, UUIDS) == nvml_index


def test_a_pinned_process_reads_the_energy_of_its_own_gpu_only():
    env = {"CUDA_VISIBLE_DEVICES": "GPU-2a2a2a2a"}
    gpu = open_visible_gpu(env, GPUS)
    assert gpu.uuid() == UUIDS[2]
    GPUS[2].advance(2.0)            # each fake has its own clock: 2 s on GPU 2 at 120 W = 240 J
    assert gpu.total_energy_mj() == 240_000 and GPUS[0].total_energy_mj() == 0
    assert gpu_identity(gpu, 2) == {"index": 2, "uuid": UUIDS[2], "name": "NVIDIA H200 (fake)",
                                    "host": gpu_identity(gpu, 2)["host"]}


@pytest.mark.parametrize("visible, error, match", [
    ("7", NVMLUnavailableError, r"\[0, 4\)"),
    ("GPU-", NVMLUnavailableError, "names 4 GPUs"),          # a prefix every UUID shares is ambiguous
    ("GPU-ffff", NVMLUnavailableError, "names no GPU"),
    ("", NVMLUnavailableError, "hides every GPU"), ("-1", NVMLUnavailableError, "hides every GPU"),
    ("MIG-1234", NotSupportedError, "MIG"),
])
def test_a_device_nvml_cannot_match_is_one_clear_error(visible, error, match):
    with pytest.raises(error, match=match):
        visible_nvml_index(visible, UUIDS)
