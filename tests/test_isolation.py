"""The tests write no cache or config into the user's home directory: tests/conftest.py points every cache and
config directory at one temporary directory before anything imports Keras. The check of the home directory runs
after every other test of the run (conftest orders it last)."""

from __future__ import annotations

import os
from pathlib import Path

# What the package, Keras, matplotlib, torch, triton and the CUDA driver would write under the home directory.
HOME_CACHES = (".cache/carm_advisor", ".keras", ".cache/matplotlib", ".config/matplotlib", ".cache/torch",
               ".triton", ".nv/ComputeCache")


def test_every_cache_and_config_directory_is_the_runs_own(run_cache_dirs):
    import carm_advisor  # noqa: F401  (imported: nothing it set moved the directories back)
    import keras

    root, _, dirs = run_cache_dirs
    for var, path in dirs.items():
        assert os.environ[var] == str(path) and path.is_relative_to(root), var
    assert (dirs["KERAS_HOME"] / "keras.json").is_file()   # Keras wrote its config there on import


def test_the_suite_wrote_nothing_into_the_home_directorys_caches(run_cache_dirs):
    _, stamp, _ = run_cache_dirs
    since = stamp.stat().st_mtime
    home = Path(os.path.expanduser("~"))
    written = []
    for rel in HOME_CACHES:
        base = home / rel
        if not base.exists():
            continue
        for path in [base, *base.rglob("*")]:
            try:
                if path.lstat().st_mtime > since:
                    written.append(str(path))
            except FileNotFoundError:
                continue
    assert not written, (f"written into the home directory's caches during the run: {written[:20]} (by the tests, or "
                         "by another process using these caches at the same time: the check compares modification "
                         "times with the run's start)")
