"""Start-up of the CLI: `ceilings` imports no framework, `analyze` no package its backend does not use,
and no second compile of the same library."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carm_advisor.measure import build

ROOT = Path(__file__).resolve().parents[1]


def test_the_ceilings_command_imports_no_ml_framework():
    code = ("import sys\nfrom carm_advisor.cli import main\nmain(['ceilings', '--show'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'keras', 'tensorflow', 'torch', 'jax', 'matplotlib'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


UNUSED_BY_TORCH_ANALYSIS = ("jax", "jaxlib", "tensorflow", "matplotlib", "optuna", "sqlalchemy")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs Keras' torch backend")
def test_analyze_on_torch_imports_nothing_its_analysis_does_not_use():
    # jax and matplotlib are installed here and Keras imports both at its own import when it can; the
    # CLI hides them while Keras loads (seconds of a cold GPU machine's start-up), and a later import works.
    installed = [m for m in ("jax", "matplotlib") if importlib.util.find_spec(m) is not None]
    if not installed:
        pytest.skip("neither jax nor matplotlib is installed: nothing for Keras to import needlessly")
    code = ("import importlib.util, sys\nfrom carm_advisor.cli import main\n"
            "rc = main(['analyze', 'mobilenetv2', '--input-shape', '32,32,3', '--no-measure', '--top', '1'])\n"
            f"print(rc, sorted({{m.split('.')[0] for m in sys.modules}} & set({UNUSED_BY_TORCH_ANALYSIS!r})),\n"
            f"      all(importlib.util.find_spec(m) is not None for m in {installed!r}))")
    # -X importtime: its report (fd 2) is not silenced with TensorFlow's start-up lines, Keras' part included.
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "0 [] True"   # none imported, each still importable after
    assert any(line.rstrip().endswith("| keras") for line in proc.stderr.splitlines()), proc.stderr[-2000:]


def test_hidden_modules_raise_on_import_only_while_hidden(tmp_path, monkeypatch):
    from carm_advisor.models.keras_import import modules_hidden, unused_at_import

    (tmp_path / "carm_hidden_probe").mkdir()
    (tmp_path / "carm_hidden_probe" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with modules_hidden(["carm_hidden_probe", "os"]):
        with pytest.raises(ModuleNotFoundError):
            import carm_hidden_probe  # noqa: F401
        import os as os_again  # already imported: left alone
        assert os_again is os
    import carm_hidden_probe  # noqa: F401,F811

    assert sys.modules["carm_hidden_probe"] is not None
    monkeypatch.delitem(sys.modules, "carm_hidden_probe")
    assert "jax" not in unused_at_import("jax") and "jax" in unused_at_import("torch")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs Keras' jax backend")
def test_a_lean_import_that_hid_what_the_backend_needs_imports_keras_whole_not_a_false_missing_package():
    # the backend as we read it (torch: jax hidden) is not the one Keras loads (jax): not "pip install jax"
    code = ("from carm_advisor.models import keras_import\n"
            "keras_import.configured_backend = lambda: 'torch'\n"
            "keras = keras_import.import_keras(lean=True)\n"
            "print(keras.backend.backend(), float(keras.ops.add(1, 2)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": "jax"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "jax 3.0"


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(build, "find_nvcc", lambda: Path("/usr/bin/nvcc-stub"))
    monkeypatch.setattr(build, "_nvcc_version", lambda nvcc: "nvcc 13.0 stub")

    def compile_refused(cmd, log):
        raise AssertionError(f"compiled again: {cmd[:3]}")

    monkeypatch.setattr(build, "_run", compile_refused)


def test_a_library_built_with_the_tf_op_serves_the_ceilings_run_without_compiling(tmp_path, no_compiler):
    # What `build-kernels` leaves on a TensorFlow machine: the CUDA library and the TF op, in a folder
    # whose key includes TensorFlow's flags.
    built = tmp_path / "sm_90a-0123456789abcdef"
    built.mkdir()
    (built / build.LIB_NAME).write_bytes(b"library")
    (built / build.TF_LIB_NAME).write_bytes(b"tf op")
    (built / build.CUDA_KEY_FILE).write_text(build.cache_key(build.kernels_dir(), ("sm_90a",), "nvcc 13.0 stub", False))
    result = build.build_kernels(arch="sm_90a", with_tf=False, cache_root=tmp_path)
    assert result.cached and result.lib_path == built / build.LIB_NAME


def test_a_library_of_other_sources_is_not_reused(tmp_path, no_compiler):
    built = tmp_path / "sm_90a-0123456789abcdef"
    built.mkdir()
    (built / build.LIB_NAME).write_bytes(b"library")
    (built / build.CUDA_KEY_FILE).write_text("key of older sources")
    with pytest.raises(AssertionError, match="compiled again"):
        build.build_kernels(arch="sm_90a", with_tf=False, cache_root=tmp_path)


def test_build_kernels_builds_for_the_visible_gpu_like_ceilings_does(monkeypatch, capsys):
    from carm_advisor.cli import main

    asked = {}

    def fake_build(arch=None, force=False):
        asked["arch"] = arch
        return build.BuildResult(Path("/x/lib.so"), None, (arch,), Path("/x"), True, Path("/usr/bin/nvcc"), Path("/x/log"))

    monkeypatch.setattr(build, "detect_arch", lambda: "sm_90a")
    monkeypatch.setattr(build, "build_kernels", fake_build)
    assert main(["build-kernels"]) == 0
    assert asked["arch"] == "sm_90a"


def test_the_measured_profile_says_how_long_loading_the_kernels_took(tmp_path, monkeypatch):
    from test_measure_ceilings import FakeLibrary

    from carm_advisor.measure import ceilings as C
    from carm_advisor.measure import profile as P
    from carm_advisor.power.fake import FakeGPU

    monkeypatch.setenv("CARM_ADVISOR_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "idle_power_w", lambda gpu, seconds=0.5: 100.0)
    gpu = FakeGPU(power_w=300.0, sm_clock_mhz=1980.0)
    profile = P.measure_ceilings(library=FakeLibrary(gpu), gpu=gpu, progress=False, clock=gpu.now_s, quick=True)
    assert set(profile.provenance["phases_s"]) == {"load_kernels", "benchmarks", "launch_floor"}
    assert all(v >= 0 for v in profile.provenance["phases_s"].values())


def test_choosing_the_kernel_binding_imports_no_keras(tmp_path):
    (tmp_path / "keras.json").write_text('{"backend": "torch"}')
    code = ("import sys\nfrom carm_advisor.measure.binding import default_binding\n"
            "print(default_binding(), 'keras' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**env, "KERAS_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ctypes", "False"]   # Keras set to torch: the ctypes binding, read from keras.json
