"""What the tests must never write: the user's own cache and config directories under the home directory."""

from __future__ import annotations

import os
from pathlib import Path

# What the package, Keras, matplotlib, torch, triton and the CUDA driver would write under the home directory.
HOME_CACHES = (".cache/carm_advisor", ".keras", ".cache/matplotlib", ".config/matplotlib", ".cache/torch",
               ".triton", ".nv/ComputeCache")


def home_caches_written_since(since_s: float) -> list[str]:
    """Every path under the home directory's caches (HOME_CACHES) modified after `since_s` (a Unix time)."""
    home = Path(os.path.expanduser("~"))
    written = []
    for rel in HOME_CACHES:
        base = home / rel
        if not base.exists():
            continue
        for path in [base, *base.rglob("*")]:
            try:
                if path.lstat().st_mtime > since_s:
                    written.append(str(path))
            except FileNotFoundError:
                continue
    return written
