"""`python -m dartfl` is the `dartfl` command (dartfl/__main__.py), and importing that module
runs nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dartfl


def _python_m_dartfl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dartfl", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_python_m_dartfl_prints_the_version(tmp_path: Path) -> None:
    done = _python_m_dartfl("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, f"dartfl {dartfl.__version__}"), done.stderr


def test_python_m_dartfl_exits_with_the_commands_codes(tmp_path: Path) -> None:
    done = _python_m_dartfl("--no-such-flag", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("dartfl: error: unrecognized arguments: --no-such-flag")


def test_importing_the_main_module_loads_no_cli() -> None:
    # The core's purity test imports every module of dartfl/, this one too.
    code = "import sys, dartfl.__main__; print('dartfl.cli.main' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
