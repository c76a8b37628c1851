"""The conftest hook for @pytest.mark.gpu: one check decides, one reason is given, other tests are untouched."""

import conftest
import pytest


class Item:
    """Just what the hook reads and writes on a collected test."""

    def __init__(self, gpu):
        self.markers = [pytest.mark.gpu.mark] if gpu else []

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker):
        self.markers.append(marker.mark)


def skip_reasons(item):
    return [m.kwargs["reason"] for m in item.markers if m.name == "skip"]


def test_without_a_gpu_every_gpu_test_skips_for_the_one_reason(monkeypatch):
    monkeypatch.setattr(conftest, "gpu_present", lambda: False)
    gpu_a, gpu_b, cpu = Item(gpu=True), Item(gpu=True), Item(gpu=False)
    conftest.pytest_collection_modifyitems(None, [gpu_a, cpu, gpu_b])
    assert skip_reasons(gpu_a) == skip_reasons(gpu_b) == [conftest.NO_GPU_REASON]
    assert skip_reasons(cpu) == []


def test_with_a_gpu_nothing_is_skipped(monkeypatch):
    monkeypatch.setattr(conftest, "gpu_present", lambda: True)
    gpu = Item(gpu=True)
    conftest.pytest_collection_modifyitems(None, [gpu])
    assert skip_reasons(gpu) == []


def test_the_check_is_not_asked_when_no_test_needs_a_gpu(monkeypatch):
    def fail():
        raise AssertionError("gpu_present() called")

    monkeypatch.setattr(conftest, "gpu_present", fail)
    conftest.pytest_collection_modifyitems(None, [Item(gpu=False)])
