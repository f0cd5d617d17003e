"""A command stopped by SIGTERM or SIGHUP runs its cleanups, as for Ctrl-C: one line, the exit
status of the signal, and nothing it started left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from dartfl.cli import main as cli_main
from dartfl.cli import policies_cmd
from dartfl.cli.main import _raise_terminated
from tests.process_fixtures import alive, children


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_runs_the_commands_cleanups_and_exits_with_its_status(
    sig: signal.Signals, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cleaned: list[str] = []

    def handler(args: Any) -> int:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(2)  # the handler raises here
            return 0
        finally:
            cleaned.append("stopped what it started")

    monkeypatch.setattr(policies_cmd, "_run", handler)  # `dartfl policies` runs it
    # Unless main handles it, the signal lands here, not on pytest.
    before = signal.signal(sig, lambda *_: cleaned.append(f"{sig.name} not handled"))
    try:
        assert cli_main.main(["policies"]) == 128 + sig
        assert signal.getsignal(sig) is not _raise_terminated  # the command's handlers are undone
    finally:
        signal.signal(sig, before)
    assert cleaned == ["stopped what it started"]
    assert capsys.readouterr().err == f"dartfl: stopped by {sig.name}\n"


@pytest.mark.integration
def test_a_replay_stopped_by_sigterm_leaves_no_agent_or_broker_running() -> None:
    # Its spawned agent and Mosquitto were left running, re-parented to init, and its broker's
    # temporary directory stayed.
    argv = [sys.executable, "-m", "dartfl.cli.main", "edge", "replay", "--spawn-agent", "--workload"]
    argv += ["poisson", "--duration-s", "120", "--target-load", "0.25", "--no-store", "--json"]
    replay = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        started: set[int] = set()
        while len(started) < 2 and time.monotonic() < deadline:  # Mosquitto and the agent
            assert replay.poll() is None, replay.stderr.read() if replay.stderr else ""
            started = children(replay.pid)
            time.sleep(0.2)
        assert len(started) >= 2, f"the replay started {started}"
        time.sleep(3)  # into the replay proper
        replay.send_signal(signal.SIGTERM)
        _, err = replay.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in started if alive(pid)]
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert replay.returncode == 128 + signal.SIGTERM, err
    assert "dartfl: stopped by SIGTERM" in err and "Traceback" not in err
    assert not left, f"left running: {left}"
