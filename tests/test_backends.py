"""Keras 3 is multi-backend: the mapping, the analysis and the CPU measurement path run on torch too.

The main suite runs on TensorFlow; this test reruns the backend-neutral test files in a child process
with KERAS_BACKEND=torch (skipped where torch is not installed; CI installs the CPU wheel).
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
BACKEND_NEUTRAL = ["test_mapping_layers.py", "test_mapping_walker.py", "test_analysis.py", "test_measure_layers.py",
                   "test_replay.py"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_backend_neutral_tests_pass_on_the_torch_backend():
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *[str(TESTS / f) for f in BACKEND_NEUTRAL]],
                          capture_output=True, text=True, env=env, timeout=600, cwd=TESTS.parent)
    tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
    assert proc.returncode == 0, tail
    assert " passed" in tail
