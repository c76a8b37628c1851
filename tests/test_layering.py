"""The package's layers, asserted from the code's own imports (top-level and inside functions).

carm/ is pure math: it imports itself, errors, the standard library and numpy. pynvml lives in the NVML
module alone; ctypes and TensorFlow's load_op_library in the kernel loader alone. mapping/ never
reaches into measure/, and measure/ never into report/. The checker is proven able to fail on a
synthetic package that breaks every rule.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import carm_advisor

PACKAGE_DIR = Path(carm_advisor.__file__).parent
NVML_MODULE = "carm_advisor.power.nvml"
KERNEL_LOADER = "carm_advisor.measure.kernels"


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module_name(path: Path, package_dir: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _uses(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in the file, relative ones resolved, plus load_op_library references."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = base.strip(".")
            # `from pkg import sub` may import a module: record pkg.sub so the rules see it.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "load_op_library":
            found.append((node.lineno, "load_op_library"))
        elif isinstance(node, ast.Name) and node.id == "load_op_library":
            found.append((node.lineno, "load_op_library"))
    return found


def _third_party_or_package(name: str) -> bool:
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names and top != "numpy"


MEASURE_REPORT = "measure/ never imports report/"

# rule -> (which importing modules it governs, which imported names it forbids there)
RULES = {
    "carm/ imports only itself, errors, the standard library and numpy": (
        lambda module: _within(module, "carm_advisor.carm"),
        lambda name: _third_party_or_package(name) and not _within(name, "carm_advisor.carm", "carm_advisor.errors"),
    ),
    f"pynvml only in {NVML_MODULE}": (
        lambda module: module != NVML_MODULE,
        lambda name: _within(name, "pynvml"),
    ),
    f"ctypes only in {KERNEL_LOADER}": (
        lambda module: module != KERNEL_LOADER,
        lambda name: _within(name, "ctypes"),
    ),
    f"load_op_library only in {KERNEL_LOADER}": (
        lambda module: module != KERNEL_LOADER,
        lambda name: name == "load_op_library" or name.endswith(".load_op_library"),
    ),
    "mapping/ never imports measure/": (
        lambda module: _within(module, "carm_advisor.mapping"),
        lambda name: _within(name, "carm_advisor.measure"),
    ),
    MEASURE_REPORT: (
        lambda module: _within(module, "carm_advisor.measure"),
        lambda name: _within(name, "carm_advisor.report"),
    ),
}


def layering_violations(package_dir: Path) -> dict[str, list[str]]:
    """For each rule, 'file:line uses name' for every import (or reference) in package_dir that breaks it."""
    violations: dict[str, list[str]] = {rule: [] for rule in RULES}
    for path in sorted(package_dir.rglob("*.py")):
        module = _module_name(path, package_dir)
        for line, name in _uses(path, module):
            for rule, (governs, forbids) in RULES.items():
                if governs(module) and forbids(name):
                    violations[rule].append(f"{path.relative_to(package_dir.parent)}:{line} uses {name}")
    return violations


@pytest.fixture(scope="module")
def package_violations():
    return layering_violations(PACKAGE_DIR)




@pytest.mark.parametrize("rule", RULES)
def test_the_package_keeps_the_layering_rule(rule, package_violations):
    assert package_violations[rule] == []


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        if str(parent) != ".":
            (root / parent / "__init__.py").touch()
    path.write_text(text)


def test_the_checker_reports_every_rule_broken_in_a_synthetic_package(tmp_path):
    pkg = tmp_path / "carm_advisor"
    _write(tmp_path, "carm_advisor/errors.py", "class CarmError(Exception): ...\n")
    # allowed: itself, errors, stdlib, numpy; a relative import of a sibling in carm/
    _write(tmp_path, "carm_advisor/carm/ok.py",
           "import math\nimport numpy as np\nfrom carm_advisor.errors import CarmError\nfrom . import roof\n")
    _write(tmp_path, "carm_advisor/carm/roof.py", "def f():\n    import keras\n    from ..mapping import costs\n")
    _write(tmp_path, "carm_advisor/power/nvml.py", "import pynvml\n")
    _write(tmp_path, "carm_advisor/power/energy.py", "def read():\n    from pynvml import nvmlInit\n")
    _write(tmp_path, "carm_advisor/measure/kernels.py", "import ctypes\nimport tensorflow as tf\ntf.load_op_library('x')\n")
    _write(tmp_path, "carm_advisor/measure/tf_op.py", "import ctypes.util\ndef load(tf):\n    return tf.load_op_library('y')\n")
    _write(tmp_path, "carm_advisor/measure/run.py", "from carm_advisor.report import render\n")
    _write(tmp_path, "carm_advisor/mapping/costs.py", "from ..measure.run import x\n")

    found = layering_violations(pkg)
    assert found == {
        "carm/ imports only itself, errors, the standard library and numpy": [
            "carm_advisor/carm/roof.py:2 uses keras",
            "carm_advisor/carm/roof.py:3 uses carm_advisor.mapping.costs",
        ],
        f"pynvml only in {NVML_MODULE}": ["carm_advisor/power/energy.py:2 uses pynvml.nvmlInit"],
        f"ctypes only in {KERNEL_LOADER}": ["carm_advisor/measure/tf_op.py:1 uses ctypes.util"],
        f"load_op_library only in {KERNEL_LOADER}": ["carm_advisor/measure/tf_op.py:3 uses load_op_library"],
        "mapping/ never imports measure/": ["carm_advisor/mapping/costs.py:1 uses carm_advisor.measure.run.x"],
        MEASURE_REPORT: ["carm_advisor/measure/run.py:1 uses carm_advisor.report.render"],
    }
