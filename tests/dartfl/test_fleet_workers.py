"""A `dartfl fleet` killed by SIGKILL (or SIGTERM, which runs no pool shutdown either) takes its
worker processes with it: they used to finish their chunks for nobody and then sleep on the
pool's queue for ever, holding their memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.process_fixtures import alive, children

FLEET = [
    sys.executable,
    "-m",
    "dartfl.cli.main",
    "fleet",
    "--devices",
    "400",
    "--duration-s",
    "3600",
    "--profile",
    "pi4",
    "--policy",
    "dart",
    "--workers",
    "2",
    "--no-store",
]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_end_with_a_killed_parent(sig: signal.Signals) -> None:
    parent = subprocess.Popen(FLEET, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while len(workers) < 2 and time.monotonic() < deadline:
            assert parent.poll() is None, "the fleet run ended before its workers started"
            workers = children(parent.pid)
            time.sleep(0.1)
        assert len(workers) >= 2, f"no worker processes seen: {workers}"
        parent.send_signal(sig)
        parent.wait(timeout=10)
        # A worker checks on its parent twice a second; 400 device-hours take far longer than
        # this to finish, so a worker still here at the deadline is one that ignored its parent.
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {w for w in workers if alive(w)}
        for w in left:
            os.kill(w, signal.SIGKILL)
        assert not left, f"workers {sorted(left)} outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
