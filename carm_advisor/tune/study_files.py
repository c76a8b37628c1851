"""The files a study keeps beside its storage for the worker processes that read them: a built model saved as
.keras, a Calibration saved as JSON."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile

import optuna

from carm_advisor.models.builder import ModelSpec
from carm_advisor.tune.storage import in_memory, storage_file


class StudyFiles:
    """Where a study keeps the files its worker processes read: a built model saved as .keras, and a
    Calibration object saved as JSON (where no log_dir is given). The study's "run" attributes name them,
    for the processes that rebuild the run later -- a resumed tune(), `carm-advise worker` joining by
    storage URL and study name, the workers of several GPUs, fit_calibration.py --studies
    (calibration.whole_from_studies) -- so they live as long as the study, in one folder per study:

    - a SQLite file or a journal file: beside it, `<file name>.files/<study name>/`;
    - another database (postgresql://, mysql://...): the working directory, where the default storage
      would go: `carm-tune-<database>-<hash of the URL>.files/<study name>/` (a worker on another machine
      needs that folder at the same path);
    - an in-memory storage (sqlite:///:memory:): a temporary directory, removed when tune() returns,
      since no other process can join such a study.

    The same storage and study name give the same folder, so a resumed study overwrites its own copy
    rather than leaving another. Nothing is created before a file is saved."""

    def __init__(self, url: str, study_name: str, store=None) -> None:
        self._temporary = False
        self._path: str | None = None
        base = storage_file(url)
        if base is None and (isinstance(store, optuna.storages.InMemoryStorage) or in_memory(url)):
            self._temporary = True
            return
        if base is None:
            base = os.path.join(os.getcwd(), f"carm-tune-{_rdb_label(url)}")
        self._path = os.path.join(f"{base}.files", _safe_name(study_name))

    def directory(self) -> str:
        if self._path is None:
            self._path = tempfile.mkdtemp(prefix="carm-tune-")
        os.makedirs(self._path, exist_ok=True)
        return self._path

    def remove_if_temporary(self) -> None:
        if self._temporary and self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


def _rdb_label(url: str) -> str:
    """A file name for a server database: its name and a hash of where it is (the password left out)."""
    try:
        from sqlalchemy.engine import make_url

        u = make_url(url)
        where, name = f"{u.get_backend_name()}://{u.host}:{u.port}/{u.database}", u.database or "db"
    except Exception:
        where, name = url, "db"
    return f"{_safe_name(name)}-{hashlib.sha1(where.encode()).hexdigest()[:8]}"


def file_chars(text: str) -> str:
    """`text` with every character a file name should not hold made "_"."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _safe_name(text: str) -> str:
    """`text` as one file name: other characters become "_"; a name changed so (or over 100 characters)
    takes a hash of the original, so two study names never share a folder."""
    safe = file_chars(text).lstrip(".")
    if safe != text or len(safe) > 100:
        safe = f"{safe[:100] or 'study'}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    return safe


def portable_model(spec: ModelSpec, built, files: StudyFiles) -> str:
    """The string a worker process rebuilds the model from; a built model is saved first (StudyFiles says
    where), written whole under another name and then moved over the copy a resumed study left, so a worker
    still reading that copy is not handed a half-written file. The file keeps the model's name: a worker
    names the model by its file's stem."""
    if spec.kind == "model":
        directory = files.directory()
        path = os.path.join(directory, f"{spec.name}.keras")
        partial = os.path.join(directory, f".{spec.name}.{os.getpid()}.partial.keras")
        try:
            built.save(partial)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
        return path
    return spec.portable()


def calibration_ref(calibration, predictor, own_predictor: bool, parallel: bool, log_dir: str | None,
                     study_name: str, files: StudyFiles):
    """What a worker process gives ConfigPredictor(calibration=...) to use the calibration this process
    uses: False (none), True (the shipped one), or a path (the one given; a Calibration object, or the
    calibration of a predictor given to tune(), is saved to a JSON file in the log directory, else in the
    study's folder beside its storage: `files`). A calibration that cannot be saved cannot run on several GPUs."""
    calib = getattr(predictor, "calibration", None)
    if calib is None:
        return False
    if own_predictor and isinstance(calibration, (str, os.PathLike)):
        return os.path.abspath(calibration)
    if own_predictor and calibration is True:
        return True
    if hasattr(calib, "save"):
        directory = log_dir or files.directory()
        safe = file_chars(study_name)
        return str(calib.save(os.path.join(os.path.abspath(directory), f"calibration-{safe}.json")))
    if parallel:
        raise ValueError(f"several GPUs: the workers cannot load this calibration ({type(calib).__name__}: no save()); "
                         "give a calibration JSON path")
    return True
