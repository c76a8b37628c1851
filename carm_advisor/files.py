"""Writing output files so that a failed or interrupted run never leaves a half-written or mixed set.

Each file is written to a temporary file in its own folder and renamed into place (os.replace is
atomic within one file system); an `Outputs` batch renames nothing until every file of the run has
been written, so an error or Ctrl-C before `commit()` leaves every existing file as it was.

Paths are checked before any work (the folder exists and a file can be created in it), the file gets
the mode a plain open() would give it (an existing file keeps its own; a new one 0o666 & ~umask, not
mkstemp's 0600), and every error names the path the user gave, never the temporary file.

Result files (JSON, plain or compressed by their suffix: .json.xz, xz -9e, lossless; .json.gz) are read and
written by read_json and write_text.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from carm_advisor.errors import CarmError


class OutputPathError(CarmError):
    """An output path cannot be written: a directory, a missing or unwritable folder, or named for two outputs."""


def _cannot(path: Path | str, reason: str, flag: str | None = None) -> OutputPathError:
    return OutputPathError(f"cannot write {flag + ' ' if flag else ''}{path}: {reason}")


def _reason(exc: OSError) -> str:
    """What went wrong, without the temporary file's name (exc.filename)."""
    return exc.strerror or type(exc).__name__


def _probe(folder: Path, path: Path | str, where: str, flag: str | None) -> None:
    """Create and remove a file in `folder`: os.access passes for root on /proc and /sys, where none can be made."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".carm-advise-probe.", dir=folder)
    except OSError as exc:
        raise _cannot(path, f"no file can be created {where} ({_reason(exc)})", flag) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_writable_dir(path: str | Path, flag: str | None = None) -> Path:
    """A folder that exists and in which files can be created (for outputs named by their folder)."""
    path = Path(path)
    if not path.is_dir():
        raise _cannot(path, "no such directory" if not path.exists() else "not a directory", flag)
    if not os.access(path, os.W_OK | os.X_OK):
        raise _cannot(path, "permission denied (directory is not writable)", flag)
    _probe(path, path, "there", flag)
    return path


def check_output_path(path: str | Path, flag: str | None = None) -> Path:
    """The path a file will be written to; refuses a directory, a missing or unwritable folder up front.

    `flag` (e.g. "--json") names the option in the message: "cannot write --json r.json: <reason>".
    """
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputPathError(f"{flag + ': ' if flag else ''}expected an output file name, received an empty path")
    if path.is_dir():
        raise _cannot(path, "it is a directory; expected a file name", flag)
    parent = path.resolve().parent
    if not parent.is_dir():
        raise _cannot(path, f"output directory does not exist: {path.parent}", flag)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _cannot(path, f"permission denied (directory {path.parent} is not writable)", flag)
    _probe(parent, path, f"in {path.parent}", flag)
    return path


def _umask() -> int:
    mask = os.umask(0o022)   # the only portable way to read it: set and restore at once
    os.umask(mask)
    return mask


def _final_mode(path: Path) -> int:
    """The permission bits open(path, "w") would leave: an existing file's own, else 0o666 & ~umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _temporary_beside(path: Path, flag: str | None = None) -> Path:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.resolve().parent)
    except OSError as exc:
        raise _cannot(path, _reason(exc), flag) from None
    os.close(fd)
    return Path(tmp)


def _write(tmp: Path, path: Path, write: Callable[[Path], object], flag: str | None) -> None:
    """write(tmp); an OSError on the way (disk full, permissions) names `path`, not the temporary file."""
    try:
        write(tmp)
        os.chmod(tmp, _final_mode(path))
    except OSError as exc:
        raise _cannot(path, _reason(exc), flag) from None


def _replace(tmp: Path, path: Path, flag: str | None) -> None:
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise _cannot(path, _reason(exc), flag) from None


def write_atomic(path: str | Path, write: Callable[[Path], object], flag: str | None = None) -> Path:
    """Call write(temporary path) and rename the result onto `path`; `path` is untouched on failure."""
    path = check_output_path(path, flag)
    tmp = _temporary_beside(path, flag)
    try:
        _write(tmp, path, write, flag)
        _replace(tmp, path, flag)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


def write_text_atomic(path: str | Path, text: str, flag: str | None = None) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text), flag)


class Outputs:
    """The files of one run: staged as temporary files, renamed into place together by commit().

    Two outputs may not share a path (compared resolved, so `a.png` and `./a.png` are one path).
    Leaving the `with` block without commit() (an exception, KeyboardInterrupt) removes the staged files.
    """

    def __init__(self) -> None:
        self._planned: dict[Path, tuple[str, str | None]] = {}
        self._staged: list[tuple[Path, Path]] = []

    def plan(self, path: str | Path | None, what: str, flag: str | None = None) -> Path | None:
        """Check an output path before any work is done; refuses one path named for two outputs."""
        if path is None:
            return None
        path = check_output_path(path, flag)
        resolved = path.resolve()
        if resolved in self._planned:
            raise OutputPathError(f"the {self._planned[resolved][0]} and the {what} would both be written to {path}; "
                                  "give each output its own file")
        self._planned[resolved] = (what, flag)
        return path

    def _flag(self, path: Path) -> str | None:
        return self._planned.get(path.resolve(), (None, None))[1]

    def stage(self, path: str | Path, write: Callable[[Path], object]) -> None:
        path = Path(path)
        flag = self._flag(path)
        path = check_output_path(path, flag)
        tmp = _temporary_beside(path, flag)
        self._staged.append((tmp, path))
        _write(tmp, path, write, flag)

    def commit(self) -> list[Path]:
        done = []
        for tmp, path in self._staged:
            _replace(tmp, path, self._flag(path))
            done.append(path)
        self._staged.clear()
        return done

    def discard(self) -> None:
        for tmp, _ in self._staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self._staged.clear()

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


COMPRESSED_SUFFIXES = (".xz", ".gz")


def read_json(path: Path | str) -> dict:
    """The JSON document in `path`, decompressed by its suffix (.xz, .gz, else plain). Raises OSError for a missing,
    unreadable or badly gzip-compressed file and ValueError for bad xz data or malformed JSON."""
    path = Path(path)
    raw = path.read_bytes()
    if path.suffix == ".xz":
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as exc:
            raise ValueError(f"not xz data: {exc}") from None
    elif path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def write_text(path: Path | str, text: str) -> Path:
    """Write `text` to `path`, xz-compressed (`xz -9e`'s preset) where the name ends in .xz, else plain; the folder
    is made where missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    if path.suffix == ".xz":
        data = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
    path.write_bytes(data)
    return path
