"""A command whose optional dependency is not installed (the wheel without an extra) says so in
one line with the pip command that installs it, instead of a traceback (a fresh interpreter
each, with the module blocked as if absent)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import orchestration.flower_processes as flower_processes
from dartfl.cli.main import missing_extra
from dartfl.errors import DartflError

ROOT = Path(__file__).resolve().parents[2]


def _run_without(modules: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    code = f"import sys; {blocked}; from dartfl.cli.main import main; sys.exit(main({list(argv)!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("modules", "argv", "extra"),
    [
        (("paho",), ("record", "--broker", "mqtt://127.0.0.1:9"), "edge"),
        (("torch", "ray"), ("dc", "run", "--steps", "1"), "edge"),
    ],
)
def test_a_missing_extra_is_one_line_with_the_pip_command(
    modules: tuple[str, ...], argv: tuple[str, ...], extra: str
) -> None:
    done = _run_without(modules, *argv)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("dartfl: failed: ")
    assert f"pip install 'dartfl[{extra}]'" in done.stderr


def test_a_missing_module_of_our_own_is_not_taken_for_a_missing_extra() -> None:
    # Only the optional dependencies are a user's to install; anything else is a bug to report,
    # and main() re-raises it with its traceback.
    assert missing_extra(ModuleNotFoundError("x", name="dartfl_no_such_module")) is None
    assert "dartfl[edge]" in (missing_extra(ModuleNotFoundError("x", name="onnxruntime.capi")) or "")


def test_flower_commands_missing_from_the_environment_are_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(flower_processes, "_BIN", tmp_path)
    with pytest.raises(DartflError, match=r"flower-superlink not found.*pip install 'dartfl\[fl\]'"):
        flower_processes.flower_bin("flower-superlink")
