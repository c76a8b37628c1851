"""Where tune() keeps the copy of a built Keras model that its worker processes rebuild the run from.

The study's "run" attributes name that file for workers joining later (a resumed tune(), `carm-advise
worker`, the workers of several GPUs) and for fit_calibration.py --studies, so it must last as long as
the study: beside a SQLite file, one folder per study. Before, every measured study of a built model
left a carm-tune-* directory with a copy in the temp dir, and the fix that removed it when tune()
returned (36fbeaa, reverted) broke those later readers. An in-memory study can have no later reader:
its temporary copy goes when tune() returns."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import optuna
import pytest

sys.path.insert(0, str(Path(__file__).parent / "tune_support"))

from stubs import ScriptedRunner, TablePredictor  # noqa: E402
from tiny_models import tiny_cnn  # noqa: E402

from carm_advisor.models.builder import build, model_spec  # noqa: E402
from carm_advisor.trials.space import SearchSpace, TrialConfig  # noqa: E402
from carm_advisor.tune.study import tune  # noqa: E402

BASELINE = TrialConfig("torch", "float32", 32, "channels_last", "eager")
SPACE = SearchSpace(backends=("torch",), precisions=("float32",), batch_sizes=(32, 64, 128),
                    layouts=("channels_last",), compilers={"torch": ("eager",)})
BOUNDS = {"float32": (0.010, 2.0)}
MEASURED = {"float32": (0.02, 4.0, 0.0)}


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The temp dir tempfile.mkdtemp uses, empty: a carm-tune-* directory left there is seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


class CopyWatcher(ScriptedRunner):
    """Records, at each trial, the model file the study's "run" attributes name and whether it is there."""

    def __init__(self, storage: str, study_name: str):
        super().__init__(MEASURED)
        self.storage, self.study_name = storage, study_name
        self.seen: list[tuple[str, bool]] = []

    def run(self, config):
        path = optuna.load_study(study_name=self.study_name, storage=self.storage).user_attrs["run"]["model"]
        self.seen.append((path, Path(path).is_file()))
        return super().run(config)


def _tune(model, storage, study_name, runner, n_trials):
    return tune(model, n_trials=n_trials, storage=storage, study_name=study_name, space=SPACE, baseline=BASELINE,
                runner=runner, predictor=TablePredictor(BOUNDS), progress=False, carm_pruning=False)


def _carm_tune_dirs(folder: Path) -> list[Path]:
    return sorted(folder.glob("carm-tune-*"))


def test_a_built_models_copy_lies_beside_the_sqlite_study_and_outlives_tune(tmp_path, temp_dir):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    model = tiny_cnn()
    runner = CopyWatcher(storage, "built")
    result = _tune(model, storage, "built", runner, n_trials=2)

    expected = tmp_path / "s.db.files" / "built" / "tiny_cnn.keras"
    assert result.study.user_attrs["run"]["model"] == str(expected)
    assert runner.seen == [(str(expected), True)] * 2   # the workers' file, there while the trials ran
    assert expected.is_file()                          # and still there for a worker joining later
    assert _carm_tune_dirs(temp_dir) == []             # nothing left in the temp dir
    assert sorted(p.name for p in expected.parent.iterdir()) == ["tiny_cnn.keras"]   # no partial file
    # A worker (or whole_from_studies) rebuilds the model from it under its own name, same weights.
    spec = model_spec(str(expected))
    assert spec.kind == "file" and spec.name == "tiny_cnn"
    rebuilt = build(spec)
    assert all(np.array_equal(a, b) for a, b in zip(rebuilt.get_weights(), model.get_weights(), strict=True))


def test_a_resumed_study_finds_and_reuses_its_model_copy(tmp_path, temp_dir):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    model = tiny_cnn()
    first = _tune(model, storage, "resumed", CopyWatcher(storage, "resumed"), n_trials=2)
    path = first.study.user_attrs["run"]["model"]
    assert Path(path).is_file()                       # the first tune() returned: the copy stays for the next

    runner = CopyWatcher(storage, "resumed")
    second = _tune(model, storage, "resumed", runner, n_trials=4)
    assert len(second.trials) == 4 and runner.calls   # the resumed study measured again (a repeat is reused)
    assert second.study.user_attrs["run"]["model"] == path       # the same file, overwritten in place
    assert runner.seen == [(path, True)] * len(runner.calls)
    assert [p.name for p in Path(path).parent.iterdir()] == ["tiny_cnn.keras"]
    assert sorted(p.name for p in (tmp_path / "s.db.files").iterdir()) == ["resumed"]
    assert _carm_tune_dirs(temp_dir) == []
    assert build(model_spec(path)).name == "tiny_cnn"


def test_an_in_memory_study_leaves_no_model_copy_behind(tmp_path, temp_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)   # where a file-less storage might otherwise put its folder
    seen: list[list[Path]] = []

    class Watching(ScriptedRunner):
        def run(self, config):
            seen.append(sorted(temp_dir.glob("carm-tune-*/tiny_cnn.keras")))
            return super().run(config)

    result = _tune(tiny_cnn(), "sqlite:///:memory:", "in-memory", Watching(MEASURED), n_trials=2)
    assert len(result.trials) == 2
    path = Path(result.study.user_attrs["run"]["model"])
    assert seen == [[path], [path]]                   # a temporary copy while the trials ran...
    assert not path.exists() and _carm_tune_dirs(temp_dir) == []   # ...removed when tune() returned
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and list(temp_dir.iterdir()) == []


def test_the_copys_folder_for_each_kind_of_storage(tmp_path, monkeypatch):
    from carm_advisor.tune.study_files import StudyFiles

    monkeypatch.chdir(tmp_path)
    name = "vgg16-gflops_per_watt-inference-measured"
    assert StudyFiles(f"sqlite:///{tmp_path / 'a.db'}", name)._path == str(tmp_path / "a.db.files" / name)
    assert StudyFiles(f"journal:{tmp_path / 'a.log'}", name)._path == str(tmp_path / "a.log.files" / name)
    # A database server: the working directory (where the default storage goes), one folder per database.
    pg = StudyFiles("postgresql://me:secret@db.example:5432/tune", name)._path
    assert Path(pg).parent.parent == tmp_path and Path(pg).name == name
    assert Path(pg).parent.name.startswith("carm-tune-tune-") and "secret" not in pg
    assert pg == StudyFiles("postgresql://me:other@db.example:5432/tune", name)._path   # same database, same place
    assert pg != StudyFiles("postgresql://me:secret@db.example:5432/other", name)._path
    # A study name that is no file name gets one, distinct from a name that differs only there.
    odd = StudyFiles(f"sqlite:///{tmp_path / 'a.db'}", "a/b")._path
    assert Path(odd).parent == tmp_path / "a.db.files" and Path(odd).name.startswith("a_b-")
    assert odd != StudyFiles(f"sqlite:///{tmp_path / 'a.db'}", "a_b")._path
    assert not list(tmp_path.iterdir())   # nothing is made before a file is saved


def test_a_calibration_object_for_the_workers_is_kept_beside_the_study_too(tmp_path, temp_dir):
    # Without log_dir a Calibration object went to a carm-tune-* temp directory as well, named by the same "run".
    from carm_advisor.calibration import Calibration

    predictor = TablePredictor(BOUNDS)
    predictor.calibration = Calibration(provenance={"device": "h12 object"})
    storage = f"sqlite:///{tmp_path / 's.db'}"
    result = tune("vgg16", n_trials=1, storage=storage, study_name="calibrated", space=SPACE, baseline=BASELINE,
                  runner=ScriptedRunner(MEASURED), predictor=predictor, progress=False, carm_pruning=False)
    ref = Path(result.study.user_attrs["run"]["calibration"])
    assert ref == tmp_path / "s.db.files" / "calibrated" / "calibration-calibrated.json" and ref.is_file()
    assert Calibration.load(ref).provenance == {"device": "h12 object"}
    assert _carm_tune_dirs(temp_dir) == []
