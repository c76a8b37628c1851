"""Where a study lives: Optuna storage from what the user typed.

- nothing: a SQLite file `carm-tune-<model>.db` in the working directory;
- a path ending .db/.sqlite/.sqlite3: that SQLite file;
- any SQLAlchemy URL (`sqlite:///...`, `postgresql://...`): Optuna's RDBStorage (a `postgresql://` URL that
  names no driver uses the one installed, psycopg or psycopg2);
- `journal:PATH` or a path ending .log: Optuna's JournalStorage on a file (several processes may share it);
- `sqlite:///:memory:` (or `sqlite://`): Optuna's InMemoryStorage, a study only this process sees, gone when
  it ends (a SQLite in-memory database is one per connection: Optuna's heartbeat thread would find it empty).

RDB studies send a heartbeat while a trial runs: a trial left RUNNING by a killed process goes stale
after `grace_s` and is marked FAIL (optuna.storages.fail_stale_trials) when a study resumes, so it is
neither counted as finished nor waited for. `optuna-dashboard <url>` opens the same storage.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import optuna

from carm_advisor.errors import CarmError

HEARTBEAT_S = 5.0
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def default_storage_url(model_name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", model_name).strip("-") or "model"
    return f"sqlite:///{Path.cwd() / f'carm-tune-{safe}.db'}"


def storage_url(spec: str | None, model_name: str) -> str:
    """The normalised form of what was typed (a URL, or journal:PATH)."""
    if spec is None or spec == "":
        return default_storage_url(model_name)
    if spec.startswith("journal:"):
        path = spec[len("journal:"):]
        if not path:
            raise ValueError("Expected journal:PATH, Received: journal: with no path")
        return "journal:" + str(Path(path).resolve())
    if "://" in spec:
        return spec
    path = Path(spec)
    if path.suffix == ".log":
        return "journal:" + str(path.resolve())
    if path.suffix in _SQLITE_SUFFIXES:
        if not path.resolve().parent.is_dir():
            raise ValueError(f"the storage file's directory does not exist: {path.parent}")
        return f"sqlite:///{path.resolve()}"
    raise ValueError(
        f"Expected a storage URL (sqlite:///file.db, postgresql://...), a .db file or journal:PATH / a .log file, "
        f"Received: {spec!r}"
    )


def in_memory(url: str) -> bool:
    """A SQLite URL that names no file (sqlite:///:memory:, sqlite://, a URI filename with mode=memory)."""
    if not url.startswith("sqlite"):
        return False
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:   # open_storage reports a malformed URL
        return False
    database = u.database or ""
    return database in ("", ":memory:") or "mode=memory" in database or u.query.get("mode") == "memory"


def open_storage(spec: str | None, model_name: str, heartbeat_s: float = HEARTBEAT_S):
    """An Optuna storage object for `spec` (see the module docstring)."""
    url = storage_url(spec, model_name)
    if in_memory(url):
        return optuna.storages.InMemoryStorage()
    check_storage_file(url)
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = Path(url[len("journal:"):])
        if not path.parent.is_dir():
            raise ValueError(f"the journal file's directory does not exist: {path.parent}")
        return JournalStorage(JournalFileBackend(str(path)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats: stable for years
            # SQLite: several worker processes may wait for the lock; 60 s, not pysqlite's 5, before giving up.
            engine_kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
            storage = optuna.storages.RDBStorage(with_installed_driver(url), engine_kwargs=engine_kwargs,
                                                 heartbeat_interval=max(1, round(heartbeat_s)),
                                                 grace_period=max(2, round(3 * heartbeat_s)))
    except (ImportError, ModuleNotFoundError) as exc:
        hint = f" ({_POSTGRES_HINT})" if url.startswith("postgresql") else ""
        raise ValueError(f"the storage {url!r} needs a database driver that is not installed: {exc}{hint}") from None
    except Exception as exc:  # sqlalchemy's ArgumentError and friends: a malformed URL
        raise ValueError(f"could not open the storage {url!r}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    if url.startswith("sqlite"):
        _sqlite_wal(storage.engine)
    return storage


_POSTGRES_DRIVERS = (("psycopg", "postgresql+psycopg://"), ("psycopg2", "postgresql+psycopg2://"))
_POSTGRES_HINT = "pip install psycopg2-binary, or psycopg[binary]"


def with_installed_driver(url: str) -> str:
    """A `postgresql://` URL names no driver, and SQLAlchemy then takes its default one (psycopg 3 from
    SQLAlchemy 2.1, psycopg2 before it), which may not be the one installed: `pip install psycopg2-binary`
    on SQLAlchemy 2.1 failed with "No module named 'psycopg'". Name whichever of the two imports (psycopg
    first); a URL that names its driver (postgresql+psycopg2://...) or names another database is kept."""
    if not url.startswith("postgresql://"):
        return url
    import importlib

    for module, scheme in _POSTGRES_DRIVERS:
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return scheme + url[len("postgresql://"):]
    return url


def _sqlite_wal(engine) -> None:
    """Write-ahead log, synced at checkpoints: a trial's commit no longer waits for an fsync (13 ms each on
    a plain disk, hundreds per study), and a killed process still loses nothing it committed.
    Every transaction starts with BEGIN IMMEDIATE (the write lock), as SQLAlchemy's pysqlite notes advise:
    SQLite ignores SELECT ... FOR UPDATE, so two worker processes could otherwise both read an enqueued
    trial as WAITING and both run it."""
    from sqlalchemy import event

    def on_begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    def on_connect(connection, _record) -> None:
        connection.isolation_level = None   # pysqlite's own implicit BEGIN off: on_begin issues ours
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    engine.dispose()  # connections opened before the listener are dropped; new ones get the pragmas


class StorageError(CarmError):
    """A study's storage cannot be used as asked: a directory, a read-only study file, no study to join."""


def storage_file(url: str) -> str | None:
    """The absolute path of the file holding the storage (SQLite, journal); None for a server or in memory."""
    if url.startswith("journal:"):
        return os.path.abspath(url[len("journal:"):])
    if not url.startswith("sqlite") or in_memory(url):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    if database.startswith("file:"):   # a SQLite URI filename (?uri=true)
        database = database[len("file:"):].split("?")[0]
    return os.path.abspath(database)


def check_storage_file(url: str) -> None:
    """Refuse (StorageError, one line) a study file no trial could be recorded in: a directory, a file this process
    cannot write, a SQLite file whose folder it cannot write (SQLite writes its -wal and -shm files beside it), a
    SQLite URL that opens it read-only (mode=ro). A file not there yet is created when the storage opens."""
    path = storage_file(url)
    if path is None:
        return
    if os.path.isdir(path):
        raise StorageError(f"the study file {path} is a directory: give a file in it (e.g. "
                           f"{os.path.join(path, 'study.db')}) or a database URL as --storage")
    if not os.path.exists(path):
        return
    why = None
    if url.startswith("sqlite") and _read_only_url(url):
        why = "the storage URL opens it with mode=ro"
    elif not os.access(path, os.W_OK):
        why = "no write permission"
    elif url.startswith("sqlite") and not os.access(os.path.dirname(path), os.W_OK | os.X_OK):
        why = f"its folder {os.path.dirname(path)} is not writable, and SQLite writes its journal files there"
    if why:
        raise StorageError(_read_only_message(path, why))


def read_only_error(exc: BaseException, url: str) -> StorageError | None:
    """The one line for a write that failed because SQLite found the database read-only (a read-only file system,
    a file even root may not write), which Optuna reports as a StorageInternalError about invalid data ("e.g.
    exceeding max length"); None for a failure of any other cause."""
    seen = exc
    while seen is not None:
        if "readonly database" in str(seen):
            return StorageError(_read_only_message(storage_file(url) or url, "SQLite: attempt to write a readonly "
                                                                             "database"))
        seen = seen.__cause__ or seen.__context__
    return None


def _read_only_url(url: str) -> bool:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return u.query.get("mode") == "ro" or "mode=ro" in (u.database or "")


def _read_only_message(path: str, why: str) -> str:
    return (f"the study file {path} is read-only ({why}): a study records every trial in it; make it writable, "
            "or give another --storage")
