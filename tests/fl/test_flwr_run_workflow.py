"""Flower's own workflow, as a Flower user runs it in a checkout with the venv active:
`flwr run . --stream` for a local simulation (Flower starts its own detached SuperLink), and
`flwr run . NAME --stream` against a SuperLink named in $FLWR_HOME/config.toml. The stream
shows one line per round, and the run is recorded in the default run store.

Every process these tests start is found by the FLWR_HOME of its environment (each test has its
own) and stopped by PID, Flower's detached SuperLink included. Run them under
`scripts/loopback-run` like the other Flower tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dartfl.store import RunStore
from messaging.brokers import free_port
from orchestration.flower_processes import LocalSuperLink, ManagedProcess, start_process, write_connection

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCAL_SUPERLINK_PORT = 39091  # where Flower 1.42's `flwr run` starts its own SuperLink
SMALL = "max-train-per-task=400 max-test-per-task=200 favourite-tasks='' node-wait-s=120.0"


def _loopback_only() -> bool:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


def _activated_env(tmp_path: Path) -> dict[str, str]:
    """What `source .venv/bin/activate` gives, plus the settings every Flower host needs
    (docs/deployment.md section 1); a private FLWR_HOME, HOME and default run store."""
    env = {k: v for k, v in os.environ.items() if k not in ("DARTFL_STORE", "FLWR_HOME")}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(BIN.parent),
            "HOME": str(tmp_path / "home"),
            "FLWR_HOME": str(tmp_path / "flwr-home"),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def _pids_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (a FLWR_HOME=... only this test uses)."""
    needle = marker.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and not _zombie(entry):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _listener(port: int, pids: list[int]) -> int:
    """Which of `pids` listens on TCP `port` (this namespace's /proc/net/tcp, by socket inode)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
    raise AssertionError(f"none of {pids} listens on {port}")


def _zombie(proc: Path) -> bool:
    return (proc / "stat").read_text().split(")", 1)[1].split()[0] == "Z"


def _stop_all(marker: str, timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL, every process of `_pids_with(marker)`, by PID."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _pids_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.3)
        if not _pids_with(marker):
            return


def _flwr_run(env: dict[str, str], *args: str, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flwr", "run", ".", *args, "--stream"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def _recorded_fl_run(store: Path) -> tuple[str, list[int]]:
    with RunStore(store) as runs:
        [run] = runs.list_runs(kind="fl")
        [result] = runs.results(run.run_id).values()
        return run.status, [h["replies"] for h in result["history"]]


@pytest.fixture
def activated(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = _activated_env(tmp_path)
    marker = f"FLWR_HOME={env['FLWR_HOME']}"
    try:
        yield env
    finally:
        _stop_all(marker)
        assert _pids_with(marker) == []


@pytest.mark.skipif(not _loopback_only(), reason="Ray needs a loopback-only namespace: scripts/loopback-run")
def test_flwr_run_dot_simulates_locally_shows_rounds_and_records_by_default(
    activated: dict[str, str], tmp_path: Path
) -> None:
    done = _flwr_run(
        activated,
        "--run-config", f"num-server-rounds=2 {SMALL}",
        "--federation-config", "num-supernodes=2",
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Starting local SuperLink" in out  # Flower's own, found on PATH as flower-superlink
    assert re.search(r"round 1/2: updates from 2 of 2 nodes", out), out[-3000:]
    assert re.search(r"round 2/2: updates from 2 of 2 nodes", out)
    store = tmp_path / "home" / ".local" / "share" / "dartfl" / "runs.sqlite"  # the default store
    assert f"in the run store {store}" in out
    assert _recorded_fl_run(store) == ("ok", [2, 2])
    # The SuperLink `flwr run` started detached outlives it. As docs/deployment.md says, ending
    # the process that listens on 39091 ends the rest (the SuperExec watches its parent's PID).
    marker = f"FLWR_HOME={activated['FLWR_HOME']}"
    left = _pids_with(marker)
    superlink = _listener(LOCAL_SUPERLINK_PORT, left)
    os.kill(superlink, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _pids_with(marker) == [], f"left running after the SuperLink (pid {superlink}) stopped: {left}"


@pytest.fixture
def superlink(tmp_path: Path, activated: dict[str, str]) -> Iterator[str]:
    """A deployment SuperLink with two SuperNodes (the simulation back end of the ClientApp),
    named `lab` in the activated environment's $FLWR_HOME/config.toml."""
    (tmp_path / "link").mkdir()
    with LocalSuperLink(tmp_path / "link", simulation=False) as link:
        nodes: list[ManagedProcess] = []
        try:
            for i in range(2):
                args = [
                    str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link.port}",
                    "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions=2",
                ]  # fmt: skip
                nodes.append(start_process(args, link.env, tmp_path / f"supernode-{i}.log"))
            write_connection(Path(activated["FLWR_HOME"]), "lab", f"127.0.0.1:{link.port}")
            yield "lab"
        finally:
            for node in nodes:
                node.stop()


@pytest.mark.skipif(not _loopback_only(), reason="run the Flower tests under scripts/loopback-run")
def test_flwr_run_dot_against_a_named_superlink_streams_rounds_and_records_by_default(
    activated: dict[str, str], superlink: str, _private_run_store: Path
) -> None:
    done = _flwr_run(
        activated, superlink, "--run-config", f"num-server-rounds=1 round-deadline-s=2.0 {SMALL}"
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Starting local SuperLink" not in out
    assert re.search(r"round 1/1: updates from 2 of 2 nodes", out), out[-3000:]
    # The default run store is the one of the SuperLink's host and user: there, the
    # $DARTFL_STORE this test session gave the SuperLink it started.
    assert _recorded_fl_run(_private_run_store) == ("ok", [2])
