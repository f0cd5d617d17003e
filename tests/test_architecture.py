"""The package map of docs/architecture.md, enforced on the source: which top-level package
may import which. Every import counts, a lazy one inside a function included, because the
check reads the code (ast), not what a test run happened to load."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The project's packages, each with the project packages it may import (itself always).
# `dartfl.cli` is the composition root: it alone may import every other package.
PROJECT = ("dartfl", "workloads", "fltask", "messaging", "edge_client", "server", "dashboard", "ray_engine")
PROJECT += ("orchestration", "benchmarks")
MAY_IMPORT: dict[str, frozenset[str]] = {
    "dartfl": frozenset(),
    "workloads": frozenset({"dartfl"}),
    "fltask": frozenset({"dartfl", "workloads"}),
    "messaging": frozenset({"dartfl"}),
    "edge_client": frozenset({"dartfl", "fltask", "messaging", "workloads"}),
    "server": frozenset({"dartfl", "fltask"}),
    "dashboard": frozenset({"dartfl", "messaging"}),
    "ray_engine": frozenset({"dartfl"}),
    "orchestration": frozenset({"dartfl", "fltask", "messaging", "workloads"}),
    "benchmarks": frozenset(PROJECT) - {"benchmarks"},
}
# What the pure core may import besides itself: the standard library and numpy.
CORE_THIRD_PARTY = frozenset({"numpy"})
COMPOSITION_ROOT = "dartfl.cli"


def _imports(tree: ast.AST, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in `tree`, relative ones resolved."""
    package = module.rsplit(".", 1)[0]  # a module's package (an __init__ module's: itself)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name


def violations(package: str, module: str, source: str) -> list[str]:
    """The forbidden imports in `source`, a module of `package` named `module`."""
    found = []
    for line, name in _imports(ast.parse(source), module):
        top = name.split(".")[0]
        if module.startswith(COMPOSITION_ROOT + ".") or module == COMPOSITION_ROOT:
            continue
        if package == "benchmarks" and name.startswith(COMPOSITION_ROOT):
            found.append(f"{module}:{line} imports {name}: benchmarks call library modules, not the CLI")
        elif top in PROJECT and top != package and top not in MAY_IMPORT[package]:
            found.append(f"{module}:{line} imports {name}: {package} may not import {top}")
        elif package == "dartfl" and top not in PROJECT and not _core_may_use(top):
            found.append(f"{module}:{line} imports {name}: the core imports only stdlib and numpy")
    return found


def _core_may_use(top: str) -> bool:
    return top in CORE_THIRD_PARTY or top in sys.stdlib_module_names or top == "__future__"


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        yield ".".join(rel.parts), path


@pytest.mark.parametrize("package", [p for p in PROJECT if (ROOT / p).is_dir()])
def test_every_arrow_points_the_way_the_architecture_allows(package: str) -> None:
    problems = [
        v for module, path in _modules(package) for v in violations(package, module, path.read_text())
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("server.rounds", "from edge_client.agent import Agent"),
        ("server.rounds", "def f():\n    import edge_client.runtime  # a lazy import counts\n"),
        ("dashboard.feed", "from fltask import model"),
        ("dartfl.sim.device", "import torch"),
        ("dartfl.policies.dart", "from edge_client import agent"),
        ("benchmarks.perf", "from dartfl.cli.simulation import run_policies"),
        ("edge_client.agent", "from . import server_thing\nfrom server import rounds"),
    ],
)
def test_a_forbidden_arrow_is_caught(module: str, source: str) -> None:
    package = module.partition(".")[0]  # the module's own package, as _modules names it
    assert violations(package, module, source)


def test_the_composition_root_may_import_anything() -> None:
    assert not violations("dartfl", "dartfl.cli.fl_cmd", "import torch\nfrom server import rounds")
