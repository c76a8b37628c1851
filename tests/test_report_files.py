"""Tests of carm_advisor/report/files.py: a new output file gets the mode a plain open() would give
(0666 less the umask) and an existing one keeps its own, a folder where no file can be created is refused
up front, and a failure while writing names the user's path, never the temporary file."""

import os
import stat

import pytest

from carm_advisor.errors import CarmError
from carm_advisor.files import Outputs, check_output_path, write_text_atomic


@pytest.fixture
def umask():
    """Set a umask for one test and restore the previous one."""
    saved = os.umask(0o022)
    os.umask(saved)

    def set_(mask: int) -> None:
        os.umask(mask)

    yield set_
    os.umask(saved)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ---- the mode a plain open() gives -------------------------------------------------------------------

@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    write_text_atomic(tmp_path / "r.json", "{}")
    with Outputs() as outs:
        outs.stage(tmp_path / "c.png", lambda tmp: tmp.write_bytes(b"png"))
        outs.commit()
    assert mode(tmp_path / "r.json") == expected
    assert mode(tmp_path / "c.png") == expected


def test_an_existing_file_keeps_its_own_mode_as_with_open(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, 0o640)   # open(target, "w") would truncate it and leave 0640 (not the umask's 0644)
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and mode(target) == 0o640


# ---- errors name the user's path ---------------------------------------------------------------------

def test_a_folder_where_no_file_can_be_created_is_refused_up_front():
    # /proc takes no new files, even for root (for whom os.access says yes)
    with pytest.raises(CarmError, match=r"^cannot write --plot-energy /proc/e\.png: ") as exc:
        check_output_path("/proc/e.png", "--plot-energy")
    assert ".tmp" not in str(exc.value)


def test_an_unwritable_folder_is_refused_through_os_access(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(CarmError, match=r"^cannot write --json .*r\.json: permission denied"):
        check_output_path(tmp_path / "r.json", "--json")


def test_a_failure_while_writing_names_the_users_path_not_the_temporary_file(tmp_path):
    target = tmp_path / "r.json"

    def disk_full(tmp):
        raise OSError(28, "No space left on device", str(tmp))

    with pytest.raises(CarmError) as exc:
        with Outputs() as outs:
            outs.plan(target, "JSON report", "--json")
            outs.stage(target, disk_full)
    assert str(exc.value) == f"cannot write --json {target}: No space left on device"
    assert list(tmp_path.iterdir()) == []
