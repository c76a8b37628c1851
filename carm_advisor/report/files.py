"""Writing output files so that a failed or interrupted run never leaves a half-written or mixed set.

Each file is written to a temporary file in its own folder and renamed into place (os.replace is
atomic within one file system); an `Outputs` batch renames nothing until every file of the run has
been written, so an error or Ctrl-C before `commit()` leaves every existing file as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from carm_advisor.errors import CarmError


class OutputPathError(CarmError):
    """An output path is a directory, sits in a missing folder, or is named for two outputs."""


def check_output_path(path: str | Path) -> Path:
    """The path a file will be written to; refuses a directory or a missing parent folder up front."""
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputPathError("expected an output file name, received an empty path")
    if path.is_dir():
        raise OutputPathError(f"expected an output file name, received a directory: {path}")
    if not path.resolve().parent.is_dir():
        raise OutputPathError(f"output directory does not exist: {path.parent}")
    return path


def _temporary_beside(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.resolve().parent)
    os.close(fd)
    return Path(tmp)


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call write(temporary path) and rename the result onto `path`; `path` is untouched on failure."""
    path = check_output_path(path)
    tmp = _temporary_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text))


class Outputs:
    """The files of one run: staged as temporary files, renamed into place together by commit().

    Two outputs may not share a path (compared resolved, so `a.png` and `./a.png` are one path).
    Leaving the `with` block without commit() (an exception, KeyboardInterrupt) removes the staged files.
    """

    def __init__(self) -> None:
        self._planned: dict[Path, str] = {}
        self._staged: list[tuple[Path, Path]] = []

    def plan(self, path: str | Path | None, what: str) -> Path | None:
        """Check an output path before any work is done; refuses one path named for two outputs."""
        if path is None:
            return None
        path = check_output_path(path)
        resolved = path.resolve()
        if resolved in self._planned:
            raise OutputPathError(f"the {self._planned[resolved]} and the {what} would both be written to {path}; "
                                  "give each output its own file")
        self._planned[resolved] = what
        return path

    def stage(self, path: str | Path, write: Callable[[Path], object]) -> None:
        path = check_output_path(path)
        tmp = _temporary_beside(path)
        self._staged.append((tmp, path))
        write(tmp)

    def commit(self) -> list[Path]:
        done = []
        for tmp, path in self._staged:
            os.replace(tmp, path)
            done.append(path)
        self._staged.clear()
        return done

    def discard(self) -> None:
        for tmp, _ in self._staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self._staged.clear()

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()
