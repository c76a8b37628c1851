"""Measured profiles cached per GPU (UUID, driver, max SM clock, kernel source hash), so that
`analyze` on a GPU uses the roofs measured on that very GPU."""

from __future__ import annotations

import os
import re
from pathlib import Path

from carm_advisor.profiles.profile import Profile, load_profile


def cache_dir() -> Path:
    root = os.environ.get("CARM_ADVISOR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "carm_advisor")
    return Path(root) / "profiles"


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(value or "unknown"))


def profile_key(device: dict) -> str:
    return f"{_slug(device.get('uuid'))}-{_slug(device.get('driver'))}"


def store_profile(profile: Profile) -> Path:
    d = profile.device
    src = (profile.provenance.get("kernel_source_hash") or "nohash")[:12]
    path = cache_dir() / f"{profile_key(d)}-{_slug(d.get('sm_clock_max_mhz'))}-{src}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    profile.save(path)
    return path


def cached_profile_path(device: dict, kernel_source_hash: str | None = None) -> Path | None:
    """The file of the newest measured profile of this GPU and driver (measured with these kernel sources when a
    hash is given, else any), or None."""
    if not device.get("uuid"):
        return None
    folder = cache_dir()
    if not folder.is_dir():
        return None
    pattern = profile_key(device) + (f"-*-{kernel_source_hash[:12]}.json" if kernel_source_hash else "-*.json")
    candidates = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    return candidates[0] if candidates else None


def cached_profile_for(device: dict, kernel_source_hash: str | None = None) -> Profile | None:
    """The newest measured profile of this GPU and driver (cached_profile_path), or None."""
    path = cached_profile_path(device, kernel_source_hash)
    return load_profile(path) if path is not None else None
