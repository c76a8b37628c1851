"""What every benchmark script records beside its figures: GPU, driver, clocks, date, command."""

from __future__ import annotations

import datetime as _dt
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path


def device_record(gpu) -> dict:
    def safe(fn):
        try:
            return fn()
        except Exception:
            return None

    return {
        "name": safe(gpu.name), "uuid": safe(gpu.uuid), "driver": safe(gpu.driver_version),
        "sm_clock_max_mhz": safe(gpu.max_sm_clock_mhz), "sm_clock_now_mhz": safe(gpu.sm_clock_mhz),
        "memory_clock_mhz": safe(gpu.memory_clock_mhz), "power_limit_w": safe(gpu.power_limit_w),
        "temperature_c": safe(gpu.temperature_c),
    }


def result_path(folder: str | Path, gpu_name: str, what: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return Path(folder) / f"{slug}-{what}-{_dt.date.today().isoformat()}.json"


def write(path: Path, doc: dict) -> Path:
    doc.setdefault("date", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    doc.setdefault("command", shlex.join([sys.executable.rsplit("/", 1)[-1]] + sys.argv))
    doc.setdefault("commit", source_commit())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path


def source_commit() -> str | None:
    """The checkout's commit the script ran at, "+modified" where tracked files differ from it; None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+modified" if dirty.stdout.strip() else "")
