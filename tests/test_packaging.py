"""The wheel must carry every subpackage, the embedded profiles and the CUDA sources."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_and_the_kernel_sources_are_packaged():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "carm_advisor").rglob("__init__.py")}
    assert on_disk <= set(config["packages"])
    assert config["package-dir"]["carm_advisor.kernels_src"] == "kernels"
    data = config["package-data"]
    assert "*.json" in data["carm_advisor.profiles"]
    sources = {p.suffix for p in (ROOT / "kernels").iterdir() if p.is_file()}
    patterns = {pat.lstrip("*") for pat in data["carm_advisor.kernels_src"]}
    assert sources <= patterns, sources - patterns
