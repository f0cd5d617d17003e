"""The installed commands work: `dartfl`, and Flower's `flwr` next to it.

`flwr` broke once already: amqtt 0.11.4 pins typer 0.15.4, which cannot build flwr's typer app
(typing.Literal options), and `flwr run` then failed at import. scripts/pip-install installs
amqtt without that pin; this catches a change that brings it back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_flwr_command_starts() -> None:
    out = subprocess.run(
        [str(BIN / "flwr"), "--version"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Flower version: 1.42.0" in out.stdout


def test_embedded_broker_imports_with_only_the_dependencies_we_pin() -> None:
    # amqtt goes in without its declared dependencies; the ones its broker needs are in the
    # edge extra. (test_flwr_command_starts catches amqtt's typer pin coming back.)
    out = subprocess.run(
        [sys.executable, "-c", "from amqtt.broker import Broker; print(Broker.__name__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "Broker"
