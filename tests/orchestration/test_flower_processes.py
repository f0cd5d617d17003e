"""orchestration.flower_processes.LocalSuperLink: a SuperLink that fails to start leaves nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dartfl.errors import DartflError
from orchestration.flower_processes import LocalSuperLink


def test_a_superlink_that_exits_at_start_is_reported_and_cleaned_up(tmp_path: Path) -> None:
    link = LocalSuperLink(tmp_path, simulation=False)
    link._args = [sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"]
    with pytest.raises(DartflError, match="exited with code 3 before listening"), link:
        pass
    process = link._process
    assert process is not None
    assert process.proc.poll() == 3
    assert process._log.closed  # the log handle is not leaked
    assert "bad flag" in (tmp_path / "superlink.log").read_text()


def test_a_running_superlink_is_not_started_twice(tmp_path: Path) -> None:
    link = LocalSuperLink(tmp_path, simulation=False)
    # A stand-in that listens on the SuperLink's port until it is stopped.
    listen = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {link.port})); s.listen()"
    link._args = [sys.executable, "-c", f"{listen}; time.sleep(60)"]
    with link, pytest.raises(DartflError, match="already running"):
        link.start()
    assert link._process is not None and link._process.proc.poll() is not None
