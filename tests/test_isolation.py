"""The tests write no cache or config into the user's home directory: tests/conftest.py points every cache and
config directory at one temporary directory before anything imports Keras. The check of the home directory runs
after every other test of the run (conftest orders it last) and, with several worker processes (pytest-xdist),
once more in the controlling process after every worker has finished (conftest's pytest_sessionfinish)."""

from __future__ import annotations

import os

from _isolation import home_caches_written_since


def test_every_cache_and_config_directory_is_the_runs_own(run_cache_dirs):

    import carm_advisor  # noqa: F401  (imported: nothing it set moved the directories back)

    root, _, dirs = run_cache_dirs
    for var, path in dirs.items():
        assert os.environ[var] == str(path) and path.is_relative_to(root), var
    assert (dirs["KERAS_HOME"] / "keras.json").is_file()   # Keras wrote its config there on import


def test_the_suite_wrote_nothing_into_the_home_directorys_caches(run_cache_dirs):
    _, stamp, _ = run_cache_dirs
    written = home_caches_written_since(stamp.stat().st_mtime)
    assert not written, (f"written into the home directory's caches during the run: {written[:20]} (by the tests, or "
                         "by another process using these caches at the same time: the check compares modification "
                         "times with the run's start)")


def test_the_check_sees_a_file_written_after_the_stamp(tmp_path, monkeypatch):
    """The check itself: a file written into a fake home's .keras after the stamp is found, one from before is not."""
    (tmp_path / ".keras").mkdir()
    old = tmp_path / ".keras" / "old.json"
    old.write_text("{}")
    os.utime(old, (1000.0, 1000.0))
    os.utime(tmp_path / ".keras", (1000.0, 1000.0))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert home_caches_written_since(2000.0) == []
    (tmp_path / ".keras" / "new.json").write_text("{}")
    assert str(tmp_path / ".keras" / "new.json") in home_caches_written_since(2000.0)
