"""What `carm-advise tune` and `carm-advise worker` say to a user who gives them something they cannot do, or stops
them: one line on stderr (exit 2; 130 for Ctrl-C), never a traceback, an overwritten file or a study file nobody
asked for; and what a study that stopped early says about why.

The studies are predicted (no GPU) on tests/tune_support/tiny_models.py:tiny_cnn (8x8x3 input, a 3x3 Conv2D of 4
filters, Dense 5), on the recorded H200 profile, so each takes seconds."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from _cli import run_cli

SUPPORT = Path(__file__).parent / "tune_support"
REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = "tiny_models:tiny_cnn"


@pytest.fixture(autouse=True)
def _tiny_models(monkeypatch):
    monkeypatch.syspath_prepend(str(SUPPORT))




def one_line(code, err, fragment, exit_code=2) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == exit_code, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("carm-advise: error:") and fragment in lines[0], lines[0]
    return lines[0]


def predicted(tmp_path, *extra, trials="2"):
    """A predicted study's arguments, its space added by each test."""
    return ["tune", TINY, "--predict", "--trials", trials, "--storage", str(tmp_path / "s.db"), *extra]


# ---- outputs: atomic together, as analyze's ------------------------------------------------------------------

def _full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_while_drawing_the_plots_leaves_the_json_that_was_there(capsys, tmp_path, monkeypatch):
    keep = tmp_path / "keep.json"
    keep.write_text("an earlier result\n")
    plots = tmp_path / "plots"
    plots.mkdir()
    monkeypatch.setattr(importlib.import_module("carm_advisor.tune.plots"), "_save", _full_disk)   # each figure
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--backends", "torch", "--batch-sizes", "32",
                                              "--json", str(keep), "--plot", str(plots)))
    one_line(code, err, f"cannot write --plot {plots}: No space left on device")
    assert keep.read_text() == "an earlier result\n"
    assert list(plots.iterdir()) == []                                   # no scratch folder or figure left
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db")) == ["keep.json", "plots"]


def test_ctrl_c_while_drawing_the_plots_leaves_the_json_that_was_there(capsys, tmp_path, monkeypatch):
    keep = tmp_path / "keep.json"
    keep.write_text("an earlier result\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("carm_advisor.tune.plots"), "_save", interrupted)
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--backends", "torch", "--batch-sizes", "32",
                                              "--json", str(keep), "--plot", str(tmp_path)))
    assert code == 130 and "Traceback" not in err
    assert keep.read_text() == "an earlier result\n"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db")) == ["keep.json"]


def test_the_json_and_the_plots_are_written_together(capsys, tmp_path):
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(capsys, *predicted(tmp_path, "--backends", "torch", "--batch-sizes", "32",
                                                   "--json", str(out), "--plot", str(tmp_path)))
    assert code == 0, err
    assert json.loads(out.read_text())["schema"] == "carm-advisor/tune/1"
    pngs = sorted(tmp_path.glob("*.png"))
    assert pngs and stdout.count("plot written to") == len(pngs)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # nothing staged left behind


# ---- the study file ----------------------------------------------------------------------------------------

def _study_file(path: Path, name: str = "a") -> Path:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(storage=f"sqlite:///{path}", study_name=name)
    return path


def test_a_study_file_opened_read_only_is_one_line_naming_it(capsys, tmp_path):
    path = _study_file(tmp_path / "ro.db")
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--storage", f"sqlite:///file:{path}?mode=ro&uri=true"))
    line = one_line(code, err, f"the study file {path} is read-only")
    assert "exceeding max length" not in line and "internal error" not in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a file without write permission")
def test_a_study_file_without_write_permission_is_one_line_naming_it(capsys, tmp_path):
    path = _study_file(tmp_path / "ro.db")
    path.chmod(0o444)
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--storage", str(path)))
    one_line(code, err, f"the study file {path} is read-only (no write permission)")


@pytest.mark.parametrize("form", ["{}", "journal:{}"])
def test_a_storage_that_is_a_directory_is_one_line(capsys, tmp_path, form):
    folder = tmp_path / "studies.db"
    folder.mkdir()
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--storage", form.format(folder)))
    one_line(code, err, f"the study file {folder} is a directory")


@pytest.mark.parametrize("name, fragment", [("two\nlines", "without control characters"),
                                            ("", "not empty"), ("x" * 513, "at most 512 characters")])
def test_a_study_name_optuna_cannot_hold_or_a_terminal_print_is_one_line(capsys, tmp_path, name, fragment):
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--study", name))
    one_line(code, err, fragment)
    assert not (tmp_path / "s.db").exists()


# ---- GPUs ----------------------------------------------------------------------------------------------------

def test_gpus_on_a_machine_without_one_are_refused_before_anything_starts(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.import_module("carm_advisor.tune.study"), "gpu_present", lambda: False)
    code, out, err = run_cli(capsys, "tune", TINY, "--gpus", "0,1", "--trials", "1",
                             "--storage", str(tmp_path / "s.db"))
    one_line(code, err, "--gpus 0,1: no NVIDIA GPU is visible here, so no GPU worker can start")
    assert "worker" not in out and not (tmp_path / "s.db").exists()


def test_gpus_for_a_predicted_study_are_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--gpus", "0,1"))
    one_line(code, err, "--gpus 0,1 names GPUs to measure on, but this study is predicted (--predict)")
    assert not (tmp_path / "s.db").exists()


# ---- why a study stopped -------------------------------------------------------------------------------------

def test_a_predicted_study_stops_once_every_configuration_of_its_space_is_predicted(capsys, tmp_path):
    # jax, batch 32: 7 precision names, of which float32 and float32_tf32 run the same on jax (one key), so
    # 6 precisions x 2 layouts x 1 compiler (xla) = 12 configurations, the baseline among them; int8 and float8 are
    # searched since tiny_cnn's Dense (2 x 256 x 5 MACs) carries about 15% of its FLOPs (the Conv2D 2 x 8 x 8 x 4 x 27)
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--backends", "jax", "--batch-sizes", "32", "--json", str(out),
                                              "--timeout", "90", trials="1000000000"))
    assert code == 0, err
    doc = json.loads(out.read_text())
    finished = [t for t in doc["trials"] if t["state"] in ("COMPLETE", "PRUNED")]
    assert len({t["key"] for t in finished}) == 12
    assert (f"all 12 configurations of the space were predicted; stopped after {len(finished)} trials "
            "(1000000000 asked for)") in doc["warnings"]
    assert not any(w.startswith("stopped at the timeout") for w in doc["warnings"])


def test_a_timeout_stop_says_so(capsys, tmp_path):
    # Optuna checks the timeout after each trial: the first one runs whatever the timeout.
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--timeout", "0.001", "--json", str(out), trials="50"))
    assert code == 0, err
    note = "stopped at the timeout of 0.001 s after 1 of the 50 trials asked for; rerun the same command to resume"
    assert any(w.startswith(note) for w in json.loads(out.read_text())["warnings"])


def test_ctrl_c_during_the_trials_says_where_the_study_is_and_what_it_keeps(capsys, tmp_path, monkeypatch):
    from carm_advisor.trials.runner import PredictedRunner

    real, calls = PredictedRunner.run, []

    def second_is_interrupted(self, config):
        calls.append(config)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, config)

    monkeypatch.setattr(PredictedRunner, "run", second_is_interrupted)
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--study", "s", "--no-carm-pruning", trials="5"))
    one_line(code, err, f"interrupted: study 's' in sqlite:///{tmp_path / 's.db'} keeps its 1 finished trial; "
                        "rerun the same command to resume it", exit_code=130)


# ---- batch sizes that cannot fit -----------------------------------------------------------------------------
# tiny_cnn at batch 1e9: the Conv2D's input alone is 8 * 8 * 3 * 1e9 values, 384 GB even at 2 bytes (float16),
# more than the recorded H200's memory in every precision; at batch 32 it is 12 KB.

def test_batch_sizes_that_never_fit_are_named_and_the_best_comes_from_the_others(capsys, tmp_path):
    out = tmp_path / "r.json"
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--backends", "torch", "--batch-sizes", "32,1000000000",
                                              "--json", str(out), trials="4"))
    assert code == 0, err
    doc = json.loads(out.read_text())
    (note,) = [w for w in doc["warnings"] if "never fits" in w]
    assert note.startswith("batch size 1000000000 asked for never fits the GPU's memory by the predicted memory "
                           "lower bound (batch 1000000000 needs at least ")
    assert note.endswith("; the best comes from batch 32") and doc["best"]["config"]["batch_size"] == 32


def test_a_study_none_of_whose_batch_sizes_fits_is_refused_before_it_starts(capsys, tmp_path):
    code, _, err = run_cli(capsys, *predicted(tmp_path, "--batch-sizes", "1000000000"))
    one_line(code, err, "no batch size asked for fits the GPU's memory by the predicted memory lower bound "
                        "(batch 1000000000 needs at least ")
    assert not (tmp_path / "s.db").exists()


# ---- carm-advise worker joins an existing study only ---------------------------------------------------------

def test_a_worker_given_a_study_file_that_is_not_there_creates_none(capsys, tmp_path):
    missing = tmp_path / "missing.db"
    code, _, err = run_cli(capsys, "worker", "--storage", str(missing), "--study", "s")
    one_line(code, err, f"no study 's' to join: there is no study file {missing}")
    assert list(tmp_path.iterdir()) == []


def test_a_worker_given_an_empty_storage_creates_no_study_file_here(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "worker", "--storage", "", "--study", "s")
    one_line(code, err, "--storage: a worker joins an existing study")
    assert list(tmp_path.iterdir()) == []


def test_a_worker_given_a_study_name_that_is_not_there_names_those_that_are(capsys, tmp_path):
    path = _study_file(tmp_path / "s.db", "vgg16-gflops_per_watt")
    code, _, err = run_cli(capsys, "worker", "--storage", str(path), "--study", "nope")
    line = one_line(code, err, f"no study 'nope' in sqlite:///{path} (studies there: 'vgg16-gflops_per_watt')")
    assert "ValueError" not in line


# ---- TensorFlow's start-up lines -----------------------------------------------------------------------------

TF_LINES = ("All log messages before absl::InitializeLog()", "oneDNN custom operations", "Could not find cuda drivers")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("tensorflow") is None,
                    reason="needs Keras' torch backend with TensorFlow installed beside it")
def test_tensorflow_start_up_lines_stay_off_stderr_under_the_torch_backend(tmp_path):
    # Keras imports TensorFlow wherever it is installed (keras.utils.set_random_seed seeds it), under torch too.
    env = {**os.environ, "KERAS_BACKEND": "torch",
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "carm_advisor.cli", "tune", TINY, "--predict", "--trials", "1",
                           "--backends", "torch", "--batch-sizes", "32", "--storage", str(tmp_path / "t.db")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not [line for line in proc.stderr.splitlines() if any(s in line for s in TF_LINES)], proc.stderr[-3000:]
