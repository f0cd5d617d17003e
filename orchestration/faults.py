"""Fault injection for deploy-local: a SuperNode killed mid-round, or the whole server side.

A SuperNode is SIGKILLed (with its SuperExec and ClientApp, one process group) in one of two
phases of its first round, which Flower handles differently (issue 16):
- `training`: once its agent trains the round (the round channel's /health says `in_round`).
  Nothing of its reply reaches the SuperLink; once it has missed its heartbeats the SuperLink
  answers its message with "Node Unavailable".
- `uploading`: once the SuperLink has accepted its reply message ("[Fleet.PushMessages] Push
  replies from node_id=<its id>" in the SuperLink's log), before its objects are uploaded: the
  SuperLink then holds a reply whose objects never come, and pulling it blocks until the
  object-push session expires (180 s).
The server side (SuperLink, SuperExec, ServerApp, `flwr run`) is killed after a checkpoint by
`kill_server_after`, and the agents waited for with `wait_agents_idle` before a restart.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from dartfl.errors import ConfigError, DartflError
from orchestration.flower_processes import LocalSuperLink, ManagedProcess, supernode_id

__all__ = [
    "KILL_PHASES",
    "KillPhase",
    "SupernodeKill",
    "agent_in_round",
    "check_kill_phase",
    "kill_server_after",
    "processes_of",
    "start_supernode_kill",
    "wait_agents_idle",
]

log = logging.getLogger(__name__)

KillPhase = Literal["training", "uploading"]
KILL_PHASES: tuple[str, ...] = get_args(KillPhase)


@dataclass
class SupernodeKill:
    """What a SuperNode killer did: `killed_after_s` since it started, and when in Unix time
    (to set against the checkpoints' times); both None if it never struck."""

    device: int
    phase: KillPhase
    killed_after_s: float | None = None
    killed_at_unix_s: float | None = None


def check_kill_phase(phase: str) -> KillPhase:
    if phase not in KILL_PHASES:
        raise ConfigError(f"kill phase must be one of {', '.join(KILL_PHASES)}; got {phase!r}")
    return phase  # type: ignore[return-value]


def agent_in_round(channel: str) -> bool | None:
    """The agent's /health `in_round`, or None if it does not answer."""
    host, port = channel.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", "/health")
        return bool(json.loads(conn.getresponse().read()).get("in_round"))
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def start_supernode_kill(
    kill: SupernodeKill,
    supernode: ManagedProcess,
    channel: str,
    superlink_log: Path,
    timeout_s: float,
) -> threading.Thread:
    """Start a daemon thread that SIGKILLs `supernode` in `kill.phase` and fills in `kill`."""

    def strike() -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        ready = (
            _wait_in_round(channel, deadline)
            if kill.phase == "training"
            else _wait_reply_pushed(supernode.log_path, superlink_log, deadline)
        )
        if ready:
            log.warning("killing SuperNode pid %d (%s its round)", supernode.pid, kill.phase)
            supernode.kill()
            kill.killed_after_s, kill.killed_at_unix_s = time.monotonic() - t0, time.time()

    thread = threading.Thread(target=strike, name=f"kill-supernode-{kill.device}", daemon=True)
    thread.start()
    return thread


def _wait_in_round(channel: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if agent_in_round(channel):
            return True
        time.sleep(0.2)
    return False


def _wait_reply_pushed(supernode_log: Path, superlink_log: Path, deadline: float) -> bool:
    """Until the SuperLink logs that it accepted a reply from this SuperNode. Polled every
    20 ms: the SuperNode starts uploading the reply's objects as soon as it has the answer."""
    while (node := supernode_id(supernode_log)) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    needle = f"Push replies from node_id={node}".encode()
    offset = 0
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), open(superlink_log, "rb") as f:
            f.seek(max(0, offset - len(needle)))  # a line may have been cut mid-needle
            chunk = f.read()
            if needle in chunk:
                return True
            offset = f.tell()
        time.sleep(0.02)
    return False


def processes_of(flwr_home: Path, cmdline_has: str = "") -> list[int]:
    """Live processes whose environment has FLWR_HOME=`flwr_home` (and whose command line
    contains `cmdline_has`): the SuperLink, its SuperExec and ServerApps, `flwr run`..."""
    needle = f"FLWR_HOME={flwr_home}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if cmdline_has.encode() not in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(int(entry.name))
    return out


def kill_server_after(
    round_no: int,
    ckpt_dir: Path,
    superlink: LocalSuperLink,
    channels: list[str],
    killed: threading.Event,
    cancel: threading.Event,
    timeout_s: float,
) -> None:
    """Once round `round_no`'s checkpoint exists and an agent trains the next round, SIGKILL
    the whole server side, as a crash of its host would: the SuperLink with its SuperExec and
    ServerApp, and `flwr run`. Set `killed`. Kill nothing once `cancel` is set (the run
    ended first, and the deployment is being torn down).

    One agent in the round is enough: the server has sent the round, and it cannot checkpoint
    it before that agent's round deadline. Waiting for every agent raced: with short rounds
    and Flower's polling, the agents may never be in the round at the same moment."""
    deadline = time.monotonic() + timeout_s
    ckpt = ckpt_dir / f"round-{round_no:04d}.json"
    while not ckpt.is_file() and time.monotonic() < deadline and not cancel.is_set():
        time.sleep(0.2)
    in_round_by = time.monotonic() + 60.0
    while time.monotonic() < min(deadline, in_round_by) and not cancel.is_set():
        if any(agent_in_round(c) for c in channels):
            break
        time.sleep(0.1)
    if cancel.is_set():
        return
    flwr_home = Path(superlink.env["FLWR_HOME"])
    pids = processes_of(flwr_home, "flwr-serverapp") + processes_of(flwr_home, "flwr run")
    log.warning("killing the SuperLink, the ServerApp and flwr run (pids %s) after round %d", pids, round_no)
    for pid in pids:  # first, while the pids just read are surely theirs
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    superlink.kill()
    killed.set()


def wait_agents_idle(channels: list[str], timeout_s: float, quiet_s: float = 1.0) -> None:
    """Until no agent has been in a round for `quiet_s` (the killed run's last round is over)."""
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        if any(agent_in_round(c) for c in channels):
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= quiet_s:
            return
        time.sleep(0.2)
    raise DartflError(f"the agents are still in a round {timeout_s:.0f} s after the server was killed")
