"""The installed commands work: `dartfl`, and Flower's `flwr` next to it; and what an install of
every published extra pulls in is consistent (what `pip check` would say of it).

`flwr` broke once already: amqtt 0.11.4 (the old embedded broker) pins typer 0.15.4, which
cannot build flwr's typer app (typing.Literal options), and `flwr run` then failed at import.
No amqtt release can share an environment with Flower 1.42 (docs/edge.md, "The broker"): the
requirement check below fails if one comes back into an extra, whatever it pins.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import dartfl
from dartfl.cli.main import main
from tests import install_fixtures as inst

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def test_flwr_command_starts() -> None:
    out = subprocess.run(
        [str(BIN / "flwr"), "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Flower version: 1.42.0" in out.stdout


def test_every_requirement_of_every_published_extra_is_installed_and_satisfied() -> None:
    requires, extras = inst.project_requirements(ROOT / "pyproject.toml")
    assert {"edge", "edge-base", "fl", "dashboard", "dev"} <= set(extras)
    closure = inst.requirement_closure(requires, extras)
    assert closure.problems == []
    assert {"flwr", "torch", "onnxruntime", "paho-mqtt", "streamlit", "typer"} <= set(closure.dists)


def test_edge_base_is_edge_without_onnx_runtime() -> None:
    # A Jetson installs onnxruntime-gpu (the same module) instead: edge-base must not bring the
    # CPU build, which would overwrite it, and must bring everything else of edge.
    requires, _ = inst.project_requirements(ROOT / "pyproject.toml")
    edge = set(inst.requirement_closure(requires, ["edge"]).dists)
    base = set(inst.requirement_closure(requires, ["edge-base"]).dists)
    assert "onnxruntime" not in base
    assert {"onnxruntime"} <= edge - base and {"torch", "paho-mqtt", "onnx"} <= base


def test_the_browser_test_driver_comes_with_dev_not_with_the_dashboard() -> None:
    # No shipped module imports playwright (165 MB); only tests/dashboard/test_browser.py does,
    # and `make venv` installs dev with the dashboard.
    requires, _ = inst.project_requirements(ROOT / "pyproject.toml")
    assert "playwright" not in inst.requirement_closure(requires, ["dashboard"]).dists
    assert "playwright" in inst.requirement_closure(requires, ["dev"]).dists


def test_no_published_extra_brings_amqtt() -> None:
    # It cannot coexist with Flower (see the module docstring); the agent's zero-setup broker is
    # a private Mosquitto instead.
    closure = inst.requirement_closure(*inst.project_requirements(ROOT / "pyproject.toml"))
    assert "amqtt" not in closure.dists


def test_dartfl_version_is_the_package_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert dartfl.__version__ == project["version"]
    out = subprocess.run(
        [sys.executable, "-m", "dartfl.cli.main", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stdout.strip()) == (0, f"dartfl {project['version']}")
    assert main(["--version"]) == 0
