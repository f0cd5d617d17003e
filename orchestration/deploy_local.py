"""A real Flower deployment on loopback: what `dartfl fl deploy-local` runs.

Processes (each in its own session, stopped by process group, also on failure):
- one SuperLink (deployment mode, `orchestration.flower_processes.LocalSuperLink`), which runs the ServerApp;
- one Mosquitto (the request plane; the embedded broker if Mosquitto is not installed);
- per device: a `dartfl edge run` agent with its round channel on 127.0.0.1:<port>
  ($DARTFL_ROUND_CHANNEL), and a `flower-supernode` with
  `--node-config 'agent-address="127.0.0.1:<port>"'`.
While `flwr run` (orchestration.flower_processes.flwr_run) runs the rounds, a
load generator sends requests to every agent over MQTT and counts the replies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.errors import ConfigError, DartflError
from orchestration.flower_processes import (
    LocalSuperLink,
    ManagedProcess,
    flwr_run,
    free_port,
    start_process,
    wait_for_port,
)

__all__ = ["LoadGenerator", "deploy_local", "processes_of"]

log = logging.getLogger(__name__)

_BIN = Path(sys.executable).parent


@dataclass
class _DeviceLoad:
    sent: int = 0
    replies: int = 0
    ok: int = 0
    latencies_s: list[float] = field(default_factory=list)


class LoadGenerator:
    """Sends requests at a steady rate to every device over MQTT until stopped; counts replies."""

    def __init__(
        self, broker_url: str, devices: list[str], tasks: tuple[str, ...], rate_per_s: float
    ) -> None:
        from dartfl import protocol
        from messaging.link import connect

        self._protocol = protocol
        self.devices = devices
        self.tasks = tasks
        self.rate = rate_per_s
        self.load = {d: _DeviceLoad() for d in devices}
        self._sent_at: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Under the reply rule (docs/protocol.md); the private loopback broker has no accounts.
        self.reply_to = protocol.reply_topic("deploy-local", uuid.uuid4().hex[:10])
        self._link = connect(
            broker_url,
            client_id=f"dartfl-load-{uuid.uuid4().hex[:8]}",
            on_message=self._on_message,
            subscriptions=[(self.reply_to, 1)],
        )
        self._thread = threading.Thread(target=self._send_loop, name="load", daemon=True)

    def _on_message(self, message: Any) -> None:
        now = time.monotonic()
        try:
            reply = self._protocol.decode_reply(message.payload)
        except DartflError:
            return
        with self._lock:
            sent = self._sent_at.pop(reply.id or "", None)
            if sent is None:
                return
            device, t0 = sent
            load = self.load[device]
            load.replies += 1
            if reply.status == "ok":
                load.ok += 1
                load.latencies_s.append(now - t0)

    def _send_loop(self) -> None:
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (64, 28, 28), dtype=np.uint8)
        i = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            for device in self.devices:
                task = self.tasks[i % len(self.tasks)]
                rid = f"{device}-{i}"
                payload = self._protocol.encode_request(
                    request_id=rid, reply_to=self.reply_to, image=images[i % len(images)]
                )
                with self._lock:
                    self._sent_at[rid] = (device, time.monotonic())
                    self.load[device].sent += 1
                self._link.publish(self._protocol.request_topic(device, task), payload, qos=1)
            i += 1
            next_at += float(rng.exponential(1.0 / self.rate))
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self, settle_s: float = 3.0) -> dict[str, dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=10)
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._sent_at:
                    break
            time.sleep(0.1)
        self._link.close()
        out = {}
        with self._lock:
            for device, load in self.load.items():
                lat = np.asarray(load.latencies_s) if load.latencies_s else None
                out[device] = {
                    "sent": load.sent,
                    "replies": load.replies,
                    "ok": load.ok,
                    "p50_latency_ms": float(np.percentile(lat, 50) * 1e3) if lat is not None else None,
                    "p99_latency_ms": float(np.percentile(lat, 99) * 1e3) if lat is not None else None,
                }
        return out


def _start_broker() -> Any:
    from messaging.brokers import BrokerStartError, start_embedded_broker, start_mosquitto

    try:
        return start_mosquitto()
    except BrokerStartError as exc:
        log.warning("no Mosquitto (%s); using the embedded broker", exc)
        return start_embedded_broker()


def _kill_when_training(channel: str, supernode: ManagedProcess, timeout_s: float) -> None:
    """Poll the agent's /health until it is in a round, then SIGKILL its SuperNode."""
    import http.client

    host, port = channel.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(host, int(port), timeout=2)
        try:
            conn.request("GET", "/health")
            if json.loads(conn.getresponse().read()).get("in_round"):
                log.warning("killing SuperNode pid %d mid-round", supernode.pid)
                supernode.kill()
                return
        except (OSError, ValueError):
            pass
        finally:
            conn.close()
        time.sleep(0.2)


def _agent_in_round(channel: str) -> bool | None:
    """The agent's /health `in_round`, or None if it does not answer."""
    import http.client

    host, port = channel.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", "/health")
        return bool(json.loads(conn.getresponse().read()).get("in_round"))
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


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


def _kill_server_after(
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
        if any(_agent_in_round(c) for c in channels):
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


def _wait_agents_idle(channels: list[str], timeout_s: float, quiet_s: float = 1.0) -> None:
    """Until no agent has been in a round for `quiet_s` (the killed run's last round is over)."""
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        if any(_agent_in_round(c) for c in channels):
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= quiet_s:
            return
        time.sleep(0.2)
    raise DartflError(f"the agents are still in a round {timeout_s:.0f} s after the server was killed")


@contextlib.contextmanager
def _stopping(procs: list[ManagedProcess]) -> Iterator[list[ManagedProcess]]:
    try:
        yield procs
    finally:
        for proc in reversed(procs):
            proc.stop()


def deploy_local(
    workdir: Path,
    *,
    clients: int = 2,
    rounds: int = 2,
    round_s: float = 5.0,
    policy: str = "dart",
    rate_per_s: float = 20.0,
    max_train: int = 1000,
    run_config: Mapping[str, int | float | str] | None = None,
    timeout_s: float = 600.0,
    kill_node_in_round: int | None = None,
    kill_server_after_round: int | None = None,
) -> dict[str, Any]:
    """Run `rounds` federated rounds on `clients` loopback devices; return the measurements.

    `kill_node_in_round=i` (a fault test): SIGKILL device i's SuperNode once its agent is
    training the first round; the run must finish with the other nodes.
    `kill_server_after_round=r` (a fault test): once round r's checkpoint is written and the
    agents train round r+1, SIGKILL the SuperLink, the ServerApp and `flwr run`; once the
    agents are idle, start the SuperLink again and `flwr run` with the same checkpoint-dir,
    which must resume at round r+1."""
    from fltask.config import FlConfig

    if clients < 1 or rounds < 1:
        raise ConfigError(f"--clients and --rounds must be >= 1, got {clients} and {rounds}")
    config: dict[str, int | float | str] = {
        "max-test-per-task": 300,
        "max-train-per-task": max_train,
        **(run_config or {}),
        "num-server-rounds": rounds,
        "min-available-nodes": clients,
        "round-deadline-s": round_s,
        "policy": policy,
        "results-file": str(workdir / "result.json"),
    }
    config.setdefault("checkpoint-dir", str(workdir / "checkpoints"))
    config.setdefault("round-timeout-s", round_s + 180.0)
    config.setdefault("node-wait-s", 120.0)
    cfg = FlConfig.from_run_config(config)  # fail fast on bad input
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    devices = [f"fl-edge-{i}" for i in range(clients)]
    pids: list[int] = []
    load_report: dict[str, Any] = {}
    with LocalSuperLink(workdir, simulation=False) as superlink, _stopping([]) as procs:
        conn, env = superlink.name, superlink.env
        broker = _start_broker()
        try:
            agent_env = {**env, "PYTHONUNBUFFERED": "1"}
            channels = []
            agents = []
            for i, device in enumerate(devices):
                port = free_port()
                channels.append(f"127.0.0.1:{port}")
                args = [
                    sys.executable, "-m", "dartfl.cli.main", "edge", "run",
                    "--broker", broker.url, "--device", device, "--policy", policy,
                    "--loss-weights", cfg.weighting,
                    "--tasks", ",".join(cfg.task_names), "--width", str(cfg.model_width),
                    "--slo-ms", str(cfg.slo_ms), "--max-train", str(max_train),
                    "--publish-every-s", "0", "--seed", str(cfg.seed + i),
                ]  # fmt: skip
                proc = start_process(
                    args, {**agent_env, "DARTFL_ROUND_CHANNEL": channels[-1]}, workdir / f"agent-{i}.log"
                )
                procs.append(proc)
                agents.append(proc)
            for proc, channel in zip(agents, channels, strict=True):
                try:
                    wait_for_port(int(channel.rsplit(":", 1)[1]), 180, proc.proc)
                except DartflError as exc:
                    raise DartflError(f"{exc}\nagent log:\n{proc.log_tail()}") from None
            for i, channel in enumerate(channels):
                args = [
                    str(_BIN / "flower-supernode"), "--insecure",
                    "--superlink", f"127.0.0.1:{env['DARTFL_SUPERLINK_PORT']}",
                    "--port", str(free_port()),
                    "--node-config", f'agent-address="{channel}"',
                ]  # fmt: skip
                procs.append(start_process(args, env, workdir / f"supernode-{i}.log"))
            pids = [p.pid for p in procs]
            killer = None
            if kill_node_in_round is not None:
                supernode = procs[len(agents) + kill_node_in_round]
                killer = threading.Thread(
                    target=_kill_when_training,
                    args=(channels[kill_node_in_round], supernode, timeout_s),
                    daemon=True,
                )
                killer.start()
            server_killed, stop_server_killer = threading.Event(), threading.Event()
            server_killer = None
            if kill_server_after_round is not None:
                server_killer = threading.Thread(
                    target=_kill_server_after,
                    args=(
                        kill_server_after_round,
                        Path(str(config["checkpoint-dir"])),
                        superlink,
                        channels,
                        server_killed,
                        stop_server_killer,
                        timeout_s,
                    ),
                    daemon=True,
                )
                server_killer.start()
            load = LoadGenerator(broker.url, devices, cfg.task_names, rate_per_s)
            load.start()
            try:
                t0 = time.monotonic()
                if server_killer is not None:
                    with contextlib.suppress(DartflError):
                        flwr_run(
                            conn, env, config, timeout_s=timeout_s, log_path=workdir / "flwr-run-killed.log"
                        )
                    server_killer.join(timeout=1)
                    if not server_killed.is_set():
                        raise DartflError(
                            f"the run ended before round {kill_server_after_round}'s checkpoint"
                        )
                    _wait_agents_idle(channels, round_s + 120.0)
                    # The server host is back: the SuperLink restarts from its database on the
                    # same address, the SuperNodes reconnect, and the new run resumes from the
                    # last checkpoint.
                    superlink.start()
                flwr_run(conn, env, config, timeout_s=timeout_s, log_path=workdir / "flwr-run.log")
                run_s = time.monotonic() - t0
            finally:
                load_report = load.stop()
                if killer is not None:
                    killer.join(timeout=1)
                if server_killer is not None:
                    stop_server_killer.set()
                    server_killer.join(timeout=5)
        except DartflError as exc:
            tails = "\n".join(f"--- {p.log_path.name}:\n{p.log_tail(1500)}" for p in procs)
            raise DartflError(f"{exc}\n{tails}") from None
        finally:
            for proc in reversed(procs):  # SuperNodes and agents before the broker they use
                proc.stop()
            broker.stop()
    result_path = workdir / "result.json"
    if not result_path.is_file():
        raise DartflError(f"the federated run wrote no results ({workdir / 'flwr-run.log'})")
    summary = json.loads(result_path.read_text())
    per_round = [
        {
            "round": h["round"],
            "replies": h["replies"],
            "server_round_s": h["round_s"],
            "slowest_client_s": h["slowest_client_s"],
            "slowest_train_s": h["slowest_train_s"],
            "overhead_s": h["overhead_s"],
        }
        for h in summary["history"]
    ]
    return {
        "clients": clients,
        "rounds": summary["rounds"],
        "round_deadline_s": round_s,
        "per_round": per_round,
        "mean_overhead_s": float(np.mean([r["overhead_s"] for r in per_round])) if per_round else None,
        "flwr_run_s": run_s,
        "total_s": time.monotonic() - started,
        "mean_accuracy": summary["mean_accuracy"],
        "slo_attainment": summary["slo_attainment"],
        "harvest_efficiency": summary["harvest_efficiency"],
        "samples_trained": summary["samples_trained"],
        "replay": load_report,
        "pids": pids,
    }
