"""The core (dartfl/ outside dartfl/cli) imports only the standard library and numpy."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

FORBIDDEN = (
    "torch",
    "flwr",
    "paho",
    "onnxruntime",
    "onnx",
    "streamlit",
    "ray",
    "amqtt",
    "matplotlib",
    "rich",
    "scipy",
    "pandas",
    "workloads",
    "edge_client",
    "server",
    "dashboard",
    "ray_engine",
)

# Imports every core module, then prints the imported modules' names as JSON.
_IMPORT_CORE = """
import importlib, json, pkgutil, sys
import dartfl
names = []
for info in pkgutil.walk_packages(dartfl.__path__, "dartfl."):
    if info.name == "dartfl.cli" or info.name.startswith("dartfl.cli."):
        continue
    importlib.import_module(info.name)
    names.append(info.name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""

_RUN_HELP = """
import contextlib, io, json, sys
from dartfl.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["--help"])
    except SystemExit:
        pass
print(json.dumps({"modules": sorted(sys.modules)}))
"""


def _run(code: str) -> dict[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, list[str]] = json.loads(proc.stdout.splitlines()[-1])
    return result


def _heavy(modules: list[str], forbidden: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in forbidden]


def test_core_modules_import_no_heavy_or_transport_library() -> None:
    result = _run(_IMPORT_CORE)
    assert "dartfl.store" in result["imported"]  # the walk found the package's modules
    assert _heavy(result["modules"], FORBIDDEN) == []


def test_cli_help_imports_neither_torch_nor_matplotlib() -> None:
    result = _run(_RUN_HELP)
    assert "dartfl.cli.main" in result["modules"]
    assert _heavy(result["modules"], ("torch", "matplotlib", "flwr", "ray", "onnxruntime", "streamlit")) == []


def _imported_roots(path: Path) -> set[str]:
    """Top-level modules a source file imports anywhere, function bodies included."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_core_source_imports_a_heavy_library_even_lazily() -> None:
    # sys.modules only sees what importing runs; a lazy import inside a function (the old Ray
    # engine under dartfl/datacenter imported ray and torch that way) is found in the source.
    core = Path(__file__).resolve().parents[1] / "dartfl"
    offenders = {
        str(path.relative_to(core.parent)): sorted(_imported_roots(path) & set(FORBIDDEN))
        for path in core.rglob("*.py")
        if "cli" not in path.relative_to(core).parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}
