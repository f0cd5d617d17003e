"""A real Flower deployment on loopback: what `dartfl fl deploy-local` runs.

Processes (each in its own session, stopped by process group, also on failure):
- one SuperLink (deployment mode, `orchestration.flower_processes.LocalSuperLink`), which runs the ServerApp;
- one Mosquitto (the request plane);
- per device: a `dartfl edge run` agent with its round channel on 127.0.0.1:<port>
  ($DARTFL_ROUND_CHANNEL), and a `flower-supernode` with
  `--node-config 'agent-address="127.0.0.1:<port>"'`.
While `flwr run` (orchestration.flower_processes.flwr_run) runs the rounds, a load generator
(orchestration.load) sends requests to every agent over MQTT and counts the replies. Faults
(orchestration.faults) are asked for with a `DeployFaults`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dartfl.errors import ConfigError, DartflError
from orchestration.faults import (
    KillPhase,
    SupernodeKill,
    check_kill_phase,
    kill_server_after,
    start_supernode_kill,
    wait_agents_idle,
)
from orchestration.flower_processes import (
    LocalSuperLink,
    ManagedProcess,
    flower_bin,
    flwr_run,
    free_port,
    start_process,
    supernode_id,
    wait_for_port,
)
from orchestration.load import LoadGenerator

if TYPE_CHECKING:
    from fltask.config import FlConfig

__all__ = ["DeployFaults", "deploy_local"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeployFaults:
    """Faults for a fault test, none by default.

    `kill_node=i`: SIGKILL device i's SuperNode in `kill_phase` of the first round (see
    orchestration.faults); the run must finish with the other nodes.
    `kill_server_after_round=r`: once round r's checkpoint is written and the agents train
    round r+1, SIGKILL the SuperLink, the ServerApp and `flwr run`; once the agents are idle,
    start the SuperLink again and `flwr run` with the same checkpoint-dir, which must resume
    at round r+1."""

    kill_node: int | None = None
    kill_phase: KillPhase = "training"
    kill_server_after_round: int | None = None

    def __post_init__(self) -> None:
        check_kill_phase(self.kill_phase)

    def check(self, clients: int, rounds: int) -> None:
        if self.kill_node is not None and not 0 <= self.kill_node < clients:
            raise ConfigError(f"the device to kill must be in 0..{clients - 1}, got {self.kill_node}")
        if self.kill_server_after_round is not None and not 1 <= self.kill_server_after_round < rounds:
            raise ConfigError(
                f"the server can be killed after rounds 1..{rounds - 1}, got {self.kill_server_after_round}"
            )


@dataclass
class _Fleet:
    """The devices' processes: one agent and one SuperNode each, in device order."""

    agents: list[ManagedProcess] = field(default_factory=list)
    supernodes: list[ManagedProcess] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)  # the agents' round channels


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
    faults: DeployFaults | None = None,
) -> dict[str, Any]:
    """Run `rounds` federated rounds on `clients` loopback devices; return the measurements."""
    from fltask.config import FlConfig

    faults = faults or DeployFaults()
    if clients < 1 or rounds < 1:
        raise ConfigError(f"--clients and --rounds must be >= 1, got {clients} and {rounds}")
    faults.check(clients, rounds)
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
    fleet = _Fleet()
    with LocalSuperLink(workdir, simulation=False) as superlink, _stopping([]) as procs:
        broker = _start_broker()
        try:
            fleet = _start_fleet(workdir, superlink, broker.url, cfg, devices, procs)
            load = LoadGenerator(broker.url, devices, cfg.task_names, rate_per_s)
            run_s, load_report, kill = _run_federation(
                workdir, superlink, fleet, load, config, round_s, timeout_s, faults
            )
        except DartflError as exc:
            tails = "\n".join(f"--- {p.log_path.name}:\n{p.log_tail(1500)}" for p in procs)
            raise DartflError(f"{exc}\n{tails}") from None
        finally:
            for proc in reversed(procs):  # SuperNodes and agents before the broker they use
                proc.stop()
            broker.stop()
    return _report(workdir, fleet, devices, round_s, run_s, started, load_report, kill)


def _start_broker() -> Any:
    from messaging.brokers import start_mosquitto

    return start_mosquitto()


@contextlib.contextmanager
def _stopping(procs: list[ManagedProcess]) -> Iterator[list[ManagedProcess]]:
    try:
        yield procs
    finally:
        for proc in reversed(procs):
            proc.stop()


def _start_fleet(
    workdir: Path,
    superlink: LocalSuperLink,
    broker_url: str,
    cfg: FlConfig,
    devices: list[str],
    procs: list[ManagedProcess],
) -> _Fleet:
    """Start every device's agent, wait until their round channels listen, then their
    SuperNodes; each process is appended to `procs` (stopped by the caller) as it starts."""
    fleet = _Fleet()
    agent_env = {**superlink.env, "PYTHONUNBUFFERED": "1"}
    for i, device in enumerate(devices):
        fleet.channels.append(f"127.0.0.1:{free_port()}")
        args = [
            sys.executable, "-m", "dartfl.cli.main", "edge", "run",
            "--broker", broker_url, "--device", device, "--policy", cfg.policy,
            "--loss-weights", cfg.weighting,
            "--tasks", ",".join(cfg.task_names), "--width", str(cfg.model_width),
            "--slo-ms", str(cfg.slo_ms), "--max-train", str(cfg.max_train_per_task),
            "--publish-every-s", "0", "--seed", str(cfg.seed + i),
        ]  # fmt: skip
        env = {**agent_env, "DARTFL_ROUND_CHANNEL": fleet.channels[-1]}
        fleet.agents.append(start_process(args, env, workdir / f"agent-{i}.log"))
        procs.append(fleet.agents[-1])
    for proc, channel in zip(fleet.agents, fleet.channels, strict=True):
        try:
            wait_for_port(int(channel.rsplit(":", 1)[1]), 180, proc.proc)
        except DartflError as exc:
            raise DartflError(f"{exc}\nagent log:\n{proc.log_tail()}") from None
    for i, channel in enumerate(fleet.channels):
        args = [
            flower_bin("flower-supernode"), "--insecure",
            "--superlink", f"127.0.0.1:{superlink.env['DARTFL_SUPERLINK_PORT']}",
            "--port", str(free_port()),
            "--node-config", f'agent-address="{channel}"',
        ]  # fmt: skip
        fleet.supernodes.append(start_process(args, superlink.env, workdir / f"supernode-{i}.log"))
        procs.append(fleet.supernodes[-1])
    return fleet


def _run_federation(
    workdir: Path,
    superlink: LocalSuperLink,
    fleet: _Fleet,
    load: LoadGenerator,
    config: dict[str, int | float | str],
    round_s: float,
    timeout_s: float,
    faults: DeployFaults,
) -> tuple[float, dict[str, Any], SupernodeKill | None]:
    """`flwr run` under load, with the faults asked for; (its wall time, the load report, what
    the SuperNode killer did)."""
    kill, killer = None, None
    if faults.kill_node is not None:
        kill = SupernodeKill(faults.kill_node, faults.kill_phase)
        supernode = fleet.supernodes[faults.kill_node]
        killer = start_supernode_kill(
            kill, supernode, fleet.channels[faults.kill_node], superlink.log_path, timeout_s
        )
    load.start()
    try:
        t0 = time.monotonic()
        if faults.kill_server_after_round is not None:
            after = faults.kill_server_after_round
            _run_until_server_killed(workdir, superlink, fleet, config, round_s, timeout_s, after)
        log_path = workdir / "flwr-run.log"
        flwr_run(superlink.name, superlink.env, config, timeout_s=timeout_s, log_path=log_path)
        run_s = time.monotonic() - t0
    finally:
        load_report = load.stop()
        if killer is not None:
            killer.join(timeout=1)
    return run_s, load_report, kill


def _run_until_server_killed(
    workdir: Path,
    superlink: LocalSuperLink,
    fleet: _Fleet,
    config: dict[str, int | float | str],
    round_s: float,
    timeout_s: float,
    round_no: int,
) -> None:
    """A first `flwr run` whose server side is killed after round `round_no`; once the agents
    are idle, the SuperLink is started again (the caller's `flwr run` then resumes from the
    last checkpoint)."""
    killed, cancel = threading.Event(), threading.Event()
    ckpt_dir = Path(str(config["checkpoint-dir"]))
    args = (round_no, ckpt_dir, superlink, fleet.channels, killed, cancel, timeout_s)
    server_killer = threading.Thread(target=kill_server_after, args=args, daemon=True)
    server_killer.start()
    try:
        with contextlib.suppress(DartflError):
            log_path = workdir / "flwr-run-killed.log"
            flwr_run(superlink.name, superlink.env, config, timeout_s=timeout_s, log_path=log_path)
        server_killer.join(timeout=1)
        if not killed.is_set():
            raise DartflError(f"the run ended before round {round_no}'s checkpoint")
    finally:
        cancel.set()
        server_killer.join(timeout=5)
    wait_agents_idle(fleet.channels, round_s + 120.0)
    # The server host is back: the SuperLink restarts from its database on the same address,
    # the SuperNodes reconnect, and the new run resumes from the last checkpoint.
    superlink.start()


def _report(
    workdir: Path,
    fleet: _Fleet,
    devices: list[str],
    round_s: float,
    run_s: float,
    started: float,
    load_report: dict[str, Any],
    kill: SupernodeKill | None,
) -> dict[str, Any]:
    """The measurements of a finished deployment, from its results file."""
    result_path = workdir / "result.json"
    if not result_path.is_file():
        raise DartflError(f"the federated run wrote no results ({workdir / 'flwr-run.log'})")
    summary = json.loads(result_path.read_text())
    # Flower names nodes by random ids; the report names the devices.
    names = {supernode_id(p.log_path): d for p, d in zip(fleet.supernodes, devices, strict=True)}

    def named(nodes: list[int]) -> list[str]:
        return [names.get(n, str(n)) for n in nodes]

    per_round = [
        {
            "round": h["round"],
            "replies": h["replies"],
            "updated": named(h.get("updated_nodes", [])),
            "left": named(h.get("left_nodes", [])),
            "timed_out": named(h.get("timed_out_nodes", [])),
            "server_round_s": h["round_s"],
            "slowest_client_s": h["slowest_client_s"],
            "slowest_train_s": h["slowest_train_s"],
            "overhead_s": h["overhead_s"],
        }
        for h in summary["history"]
    ]
    return {
        "clients": len(devices),
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
        "killed": None if kill is None else {**vars(kill), "device": devices[kill.device]},
        "pids": [p.pid for p in fleet.agents + fleet.supernodes],
    }
