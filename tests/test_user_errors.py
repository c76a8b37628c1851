"""Cases a new user met: each is one clear line (exit 2) or a said warning, never silence or a traceback."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest
from _cli import assert_one_line_error, run_cli

import carm_advisor as advisor
from carm_advisor.errors import MappingError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="jax is installed here")
def test_a_keras_backend_that_is_not_installed_says_what_to_install():
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", "analyze", "vgg16"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert_one_line_error(proc.returncode, proc.stderr, "pip install jax")
    assert "internal error" not in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="jax is installed here")
def test_the_python_api_names_the_missing_backend_too():
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    code = "import carm_advisor\ntry:\n    carm_advisor.analyze\nexcept carm_advisor.CarmError as e:\n    print(e)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert "KERAS_BACKEND=jax" in proc.stdout and "pip install jax" in proc.stdout, proc.stdout + proc.stderr


def test_analyzing_a_bare_layer_says_it_is_a_layer_and_how_to_wrap_it():
    with pytest.raises(MappingError, match=r"received a layer, Dense .*keras\.Sequential"):
        advisor.analyze(keras.layers.Dense(3), measure=False)


def test_an_empty_model_name_is_a_clear_error(capsys):
    code, _, err = run_cli(capsys, "analyze", "")
    assert_one_line_error(code, err, "empty name")
    assert "directory" not in err


def test_counters_and_training_step_without_a_gpu_are_said_to_be_ignored(capsys, tmp_path):
    inputs = keras.Input(shape=(16,))
    path = tmp_path / "tiny.keras"
    keras.Model(inputs, keras.layers.Dense(8)(inputs)).save(path)
    code, out, err = run_cli(capsys, "analyze", str(path), "--counters", "--training-step")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "--counters ignored: no NVIDIA GPU is usable here" in flat
    assert "--training-step ignored: no NVIDIA GPU is usable here" in flat


def test_ceilings_show_refuses_an_unknown_benchmark_to_exclude(capsys):
    code, _, err = run_cli(capsys, "ceilings", "--show", "--exclude", "nosuchbench")
    assert_one_line_error(code, err, "nosuchbench")


def test_ceilings_show_accepts_a_recorded_benchmark_to_exclude(capsys):
    code, out, err = run_cli(capsys, "ceilings", "--show", "--exclude", "hbm_read")
    assert code == 0, err


def test_dir_of_the_package_lists_its_public_names():
    assert {"analyze", "load_profile", "Profile", "Report", "CARM", "CarmError", "measure_ceilings"} <= set(dir(advisor))


def test_the_python_api_prints_nothing_to_stderr_on_a_machine_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = ("from carm_advisor import analyze\nimport keras\ni = keras.Input(shape=(16,))\n"
            "r = analyze(keras.Model(i, keras.layers.Dense(8)(i)))\nprint(len(r.layers))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_build_kernels_says_what_was_built_where_for_which_archs_and_how_long(capsys, monkeypatch, tmp_path):
    from carm_advisor.measure import build

    result = build.BuildResult(lib_path=tmp_path / "libcarm_bench.so", tf_op_path=None, archs=("sm_90a", "sm_80"),
                               cache_dir=tmp_path, cached=False, nvcc=Path("/usr/bin/nvcc"), log_path=tmp_path / "build.log")
    monkeypatch.setattr(build, "build_kernels", lambda arch=None, force=False: result)
    code, out, err = run_cli(capsys, "build-kernels")
    assert code == 0, err
    assert "BuildResult(" not in out
    assert "sm_90a, sm_80" in out and str(tmp_path / "libcarm_bench.so") in out and "/usr/bin/nvcc" in out
    assert " s\n" in out.splitlines()[0] + "\n"   # how long it took, in seconds
    assert "not built" in out   # the TensorFlow op


@pytest.mark.parametrize("precision", ["int8", "float8", "float64", "fp8", 8])
def test_the_python_api_accepts_the_precisions_the_cli_accepts_and_no_other(precision):
    from carm_advisor.models.loader import KERAS_POLICIES

    inputs = keras.Input(shape=(16,))
    model = keras.Model(inputs, keras.layers.Dense(8)(inputs))
    with pytest.raises(ValueError, match="precision must be one of " + ", ".join(KERAS_POLICIES)):
        advisor.analyze(model, precision=precision, measure=False)


def test_every_precision_the_cli_accepts_the_python_api_accepts_too():
    from carm_advisor.advise.analyze import PRECISIONS
    from carm_advisor.models.loader import KERAS_POLICIES

    assert PRECISIONS == KERAS_POLICIES
