"""The systemd units of deploy/systemd (docs/deployment.md) are valid, and so are their commands.

`systemd-analyze verify` runs against a throwaway root: the units in its /etc/systemd/system,
a copy of this host's system units (the targets they order against), and stub executables at
the paths their ExecStart= names, since verify checks those exist. Then the command lines
themselves: the agent's must parse with `dartfl`'s own argument parser, and every flag of the
Flower units must be one the installed Flower command knows, so the units cannot drift from
the commands they start.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dartfl.cli.main import build_parser

UNIT_DIR = Path(__file__).resolve().parent.parent / "deploy" / "systemd"
UNITS = sorted(UNIT_DIR.glob("*.service"))
_UNIT_PATHS = (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
HOST_UNITS = next((p for p in _UNIT_PATHS if p.is_dir()), None)
BIN = Path(sys.executable).parent


def _unit_lines(unit: Path) -> list[str]:
    """The unit's lines with systemd's backslash continuations joined."""
    return unit.read_text().replace("\\\n", " ").splitlines()


def _setting(unit: Path, key: str) -> str:
    values = [line.split("=", 1)[1] for line in _unit_lines(unit) if line.startswith(f"{key}=")]
    assert len(values) == 1, f"{unit.name}: expected one {key}=, found {len(values)}"
    return values[0]


def _exec_start(unit: Path) -> list[str]:
    return shlex.split(_setting(unit, "ExecStart"))


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None or HOST_UNITS is None:
        why = "no systemd-analyze or system units: apt-get install systemd (make test does, as root)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def test_the_units_of_the_deployment_guide_are_shipped() -> None:
    assert [u.name for u in UNITS] == [
        "dartfl-agent.service",
        "dartfl-superlink.service",
        "dartfl-supernode.service",
    ]


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    assert HOST_UNITS is not None
    shutil.copytree(HOST_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    for unit in UNITS:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
        stub = root / _exec_start(unit)[0].lstrip("/")
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
        (root / _setting(unit, "WorkingDirectory").lstrip("/")).mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", *(f"/etc/systemd/system/{u.name}" for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Unknown keys and the like are only warnings for verify (exit 0): they fail here too.
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr
    assert not out.stdout.strip(), out.stdout


def test_the_agent_unit_runs_flags_that_dartfl_edge_run_accepts() -> None:
    unit = UNIT_DIR / "dartfl-agent.service"
    argv = [arg.replace("%H", "pi-1") for arg in _exec_start(unit)]
    assert argv[0].endswith("/bin/dartfl") and argv[1:3] == ["edge", "run"]
    args = build_parser().parse_args(argv[1:])  # a bad flag exits 2 here
    assert args.device == "pi-1"
    assert args.broker == "mqtt://127.0.0.1:1883"
    assert str(args.profile_file) == "/opt/dartfl/pi5.toml"


@pytest.mark.parametrize("name", ["dartfl-supernode.service", "dartfl-superlink.service"])
def test_the_flower_units_use_flags_the_flower_commands_have(name: str) -> None:
    argv = _exec_start(UNIT_DIR / name)
    command = BIN / Path(argv[0]).name
    out = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    known = set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout))
    flags = [arg for arg in argv[1:] if arg.startswith("--")]
    assert flags, f"{name}: no flags in ExecStart"
    assert not [f for f in flags if f not in known], f"{name}: flags unknown to {command.name}"
