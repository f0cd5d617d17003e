"""The core (dartfl/ outside dartfl/cli) imports only the standard library and numpy."""

from __future__ import annotations

import json
import subprocess
import sys

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
