"""The package's layers, asserted from the code's own imports (top-level and inside functions).

The package reads top-down: every unit (a folder of carm_advisor, or a module at its root) sits on one layer
of LAYERS and imports only units of lower layers; no two files import each other through a chain (no cycle),
and no module is longer than MAX_LINES. carm/ is pure math: it imports itself, errors, the standard library and
numpy. pynvml lives in the NVML module alone; ctypes and TensorFlow's load_op_library in the kernel loader alone;
torch, jax and tensorflow in measure/backends/ (one module per Keras backend) and the kernel loader and builder.
Each checker is proven able to fail on a synthetic package that breaks its rule.
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
FRAMEWORK_HOMES = ("carm_advisor.measure.backends", KERNEL_LOADER, "carm_advisor.measure.build")
FRAMEWORKS = ("torch", "jax", "jaxlib", "tensorflow")
MAX_LINES = 600

# Lowest first. A unit imports only units on lower lines; units on one line do not import each other.
LAYERS = (
    ("errors",),                      # the root error
    ("units", "files"),               # figures as text; atomic writes and result files
    ("carm",),                        # pure math: roofs, placement, power and energy models, fits, DVFS
    ("results",),                     # plain data: a report's rows and advice
    ("profiles", "power"),            # a GPU's measured roofs; NVML, energy windows, clocks
    ("mapping",),                     # Keras layer -> FLOPs and bytes
    ("models",),                      # loading and building Keras models
    ("measure",),                     # kernels, ceilings, layer and model runs, every framework call
    ("calibration",),                 # what a backend reaches, learned from records
    ("report",),                      # rich text, JSON, charts of a report
    ("predict",),                     # the CARM bound and the calibrated prediction of a model's rows
    ("learn",),                       # a measured run's rows and the samples it teaches
    ("validation",),                  # the power model and the calibration scored on recorded runs
    ("trials",),                      # one configuration: its space, predictions, runners, worker processes
    ("advise",),                      # analyze, recommendations, --verify
    ("tune",),                        # the Optuna study and its result
    ("cli",),                         # carm-advise
    ("carm_advisor",),                # the package's public face (lazy names)
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


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
    f"{', '.join(FRAMEWORKS)} only in {', '.join(FRAMEWORK_HOMES)}": (
        lambda module: not _within(module, *FRAMEWORK_HOMES),
        lambda name: _within(name, *FRAMEWORKS),
    ),
}


def _modules(package_dir: Path) -> dict[str, Path]:
    return {_module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _unit(module: str) -> str:
    """The layer unit of a package module: its folder under carm_advisor, or the root module's own name."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package_imports(package_dir: Path) -> dict[str, list[tuple[int, str]]]:
    """module -> (line, package module it imports) for every import of a module of this package (a `from pkg
    import name` counts as importing pkg.name where that is a module, else pkg)."""
    modules = _modules(package_dir)
    top = package_dir.name
    out: dict[str, list[tuple[int, str]]] = {}
    for module, path in modules.items():
        found = []
        for line, name in _uses(path, module):
            if not _within(name, top):
                continue
            target = name if name in modules else name.rpartition(".")[0]
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((line, target))
        out[module] = found
    return out


def rule_violations(package_dir: Path) -> dict[str, list[str]]:
    """For each rule, 'file:line uses name' for every import (or reference) in package_dir that breaks it."""
    violations: dict[str, list[str]] = {name: [] for name in RULES}
    for module, path in _modules(package_dir).items():
        for line, name in _uses(path, module):
            for rule, (governs, forbids) in RULES.items():
                if governs(module) and forbids(name):
                    violations[rule].append(f"{path.relative_to(package_dir.parent)}:{line} uses {name}")
    return violations


def layer_violations(package_dir: Path, rank: dict[str, int] = RANK) -> list[str]:
    """'module:line imports target (unit A, layer i -> unit B, layer j)' for every import that does not go to a
    lower layer (a package __init__ importing its own folder's modules aside), and every unit with no layer."""
    found = []
    for module, imports in _package_imports(package_dir).items():
        unit = _unit(module)
        if unit not in rank:
            found.append(f"{module}: unit {unit!r} has no layer")
            continue
        for line, target in imports:
            other = _unit(target)
            if other == unit:
                continue
            if other not in rank:
                found.append(f"{module}:{line} imports {target}: unit {other!r} has no layer")
            elif rank[other] >= rank[unit]:
                found.append(f"{module}:{line} imports {target} ({unit}, layer {rank[unit]} -> {other}, "
                             f"layer {rank[other]})")
    return found


def import_cycles(package_dir: Path) -> list[list[str]]:
    """Every cycle of imports between the package's modules (its strongly connected components of two or more
    modules, and modules that import themselves through a package __init__), each sorted."""
    graph = {m: sorted({t for _, t in imports}) for m, imports in _package_imports(package_dir).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:   # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def long_modules(package_dir: Path, max_lines: int = MAX_LINES) -> list[str]:
    return [f"{path.relative_to(package_dir.parent)}: {n} lines" for path in sorted(package_dir.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > max_lines]


@pytest.fixture(scope="module")
def package_rule_violations():
    return rule_violations(PACKAGE_DIR)


@pytest.mark.parametrize("rule", RULES)
def test_the_package_keeps_the_import_rule(rule, package_rule_violations):
    assert package_rule_violations[rule] == []


def test_every_import_of_the_package_goes_to_a_lower_layer():
    assert layer_violations(PACKAGE_DIR) == []


def test_the_package_has_no_import_cycle():
    assert import_cycles(PACKAGE_DIR) == []


def test_no_module_of_the_package_is_over_600_lines():
    assert long_modules(PACKAGE_DIR) == []


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        if str(parent) != ".":
            (root / parent / "__init__.py").touch()
    path.write_text(text)


def test_the_rule_checker_reports_every_rule_broken_in_a_synthetic_package(tmp_path):
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
    # allowed: a framework in measure/backends/ and the kernel builder; packages whose names merely start alike
    _write(tmp_path, "carm_advisor/measure/backends/torch.py",
           "def f():\n    import torch\n    from torch.profiler import profile\n")
    _write(tmp_path, "carm_advisor/measure/backends/jax.py", "def f():\n    import jax.numpy as jnp\n")
    _write(tmp_path, "carm_advisor/measure/build.py", "def f():\n    import tensorflow as tf\n")
    _write(tmp_path, "carm_advisor/models/extra.py", "import torchvision\nimport jaxtyping\n")
    # broken: a framework anywhere else, inside a function too, and in a module named only like the folder
    _write(tmp_path, "carm_advisor/measure/layers.py",
           "def f():\n    import jax\n    from torch.autograd import DeviceType\n")
    _write(tmp_path, "carm_advisor/measure/backends_extra.py", "from jaxlib import xla_client\n")
    _write(tmp_path, "carm_advisor/advise/analyze.py", "import tensorflow as tf\n")

    found = rule_violations(pkg)
    assert found == {
        "carm/ imports only itself, errors, the standard library and numpy": [
            "carm_advisor/carm/roof.py:2 uses keras",
            "carm_advisor/carm/roof.py:3 uses carm_advisor.mapping.costs",
        ],
        f"pynvml only in {NVML_MODULE}": ["carm_advisor/power/energy.py:2 uses pynvml.nvmlInit"],
        f"ctypes only in {KERNEL_LOADER}": ["carm_advisor/measure/tf_op.py:1 uses ctypes.util"],
        f"load_op_library only in {KERNEL_LOADER}": ["carm_advisor/measure/tf_op.py:3 uses load_op_library"],
        f"{', '.join(FRAMEWORKS)} only in {', '.join(FRAMEWORK_HOMES)}": [
            "carm_advisor/advise/analyze.py:1 uses tensorflow",
            "carm_advisor/measure/backends_extra.py:1 uses jaxlib.xla_client",
            "carm_advisor/measure/layers.py:2 uses jax",
            "carm_advisor/measure/layers.py:3 uses torch.autograd.DeviceType",
        ],
    }


def test_the_layer_checker_reports_upward_sideways_and_unplaced_imports(tmp_path):
    pkg = tmp_path / "carm_advisor"
    _write(tmp_path, "carm_advisor/errors.py", "")
    # allowed: down a layer, inside a folder, a package __init__ importing its own modules
    _write(tmp_path, "carm_advisor/mapping/walker.py", "from carm_advisor.errors import CarmError\nfrom . import registry\n")
    _write(tmp_path, "carm_advisor/mapping/registry.py", "")
    _write(tmp_path, "carm_advisor/mapping/__init__.py", "from carm_advisor.mapping.walker import x\n")
    # broken: mapping -> report (up), inside a function too; profiles -> power (the same layer); an unplaced unit
    _write(tmp_path, "carm_advisor/mapping/costs.py", "def f():\n    from carm_advisor.report import render\n")
    _write(tmp_path, "carm_advisor/report/render.py", "")
    _write(tmp_path, "carm_advisor/profiles/cache.py", "import carm_advisor.power.nvml\n")
    _write(tmp_path, "carm_advisor/power/nvml.py", "")
    _write(tmp_path, "carm_advisor/extra.py", "")

    assert layer_violations(pkg) == [
        "carm_advisor.extra: unit 'extra' has no layer",
        "carm_advisor.mapping.costs:2 imports carm_advisor.report.render (mapping, layer 5 -> report, layer 9)",
        "carm_advisor.profiles.cache:1 imports carm_advisor.power.nvml (profiles, layer 4 -> power, layer 4)",
    ]


def test_the_cycle_checker_finds_a_cycle_across_folders_and_inside_one(tmp_path):
    pkg = tmp_path / "carm_advisor"
    _write(tmp_path, "carm_advisor/a/x.py", "from carm_advisor.b import y\n")
    _write(tmp_path, "carm_advisor/b/y.py", "def f():\n    import carm_advisor.a.x\n")
    _write(tmp_path, "carm_advisor/a/p.py", "from carm_advisor.a.q import z\n")
    _write(tmp_path, "carm_advisor/a/q.py", "from carm_advisor.a import p\n")
    _write(tmp_path, "carm_advisor/a/free.py", "from carm_advisor.a import p\n")

    assert import_cycles(pkg) == [["carm_advisor.a.p", "carm_advisor.a.q"], ["carm_advisor.a.x", "carm_advisor.b.y"]]


def test_the_size_checker_names_a_long_module(tmp_path):
    pkg = tmp_path / "carm_advisor"
    _write(tmp_path, "carm_advisor/short.py", "x = 1\n" * 3)
    _write(tmp_path, "carm_advisor/long.py", "x = 1\n" * 4)
    assert long_modules(pkg, max_lines=3) == ["carm_advisor/long.py: 4 lines"]
