"""`dartfl edge replay`: replay a workload against a live device agent (or one it spawns).

`--target-load` sizes the rate from the agent's own end-to-end cost profile (in its status
message and its telemetry: the model and the request path, measured on the agent), so half the
capacity is half of what the agent can serve, not of what its model alone could. An agent counts
as alive when its status says online or its telemetry flows (orchestration/agent_watch.py).
Heavy imports happen inside the handler so `dartfl --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dartfl.cli.mqtt_args import add_mqtt_arguments, mqtt_security_from_args
from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import add_workload_arguments, arrivals_from_args
from dartfl.errors import ConfigError, DartflError

if TYPE_CHECKING:
    from dartfl.arrivals import Arrivals
    from dartfl.types import DeviceProfile
    from messaging.brokers import BrokerHandle
    from messaging.security import MqttSecurity
    from orchestration.agent_watch import AgentSighting
    from orchestration.replay import ReplayOutcome

log = logging.getLogger(__name__)
AGENT_ONLINE_TIMEOUT_S = 120.0  # loading data and building the model, on a slow device
PROGRESS_EVERY_S = 10.0  # progress lines when stderr is not a terminal
STAND_IN_PROFILE = "pi4"  # checks --target-load before the agent's own profile is known


def register(edge_sub: Any) -> None:
    rep = edge_sub.add_parser("replay", help="replay a workload against an agent and report its metrics")
    add_workload_arguments(rep)
    rep.add_argument(
        "--broker",
        help="broker URL (mqtt://127.0.0.1:1883, mqtts://HOST:8883); required without --spawn-agent",
    )
    rep.add_argument("--device", default="edge-1", help="device id of the agent (default edge-1)")
    rep.add_argument("--spawn-agent", action="store_true", help="start a broker and an agent for this replay")
    rep.add_argument("--policy", default="dart", help="the spawned agent's policy (default dart)")
    rep.add_argument("--slo-ms", type=float, default=250.0, help="latency SLO in ms (default 250)")
    rep.add_argument(
        "--profile-file",
        type=Path,
        help="cost profile for --target-load (default: the agent's own, published in its status)",
    )
    rep.add_argument(
        "--payload",
        choices=("binary", "json"),
        default="binary",
        help="request encoding: the compact binary form (default) or JSON (docs/protocol.md)",
    )
    rep.add_argument(
        "--settle-s",
        type=float,
        default=10.0,
        help="how long to wait for replies after the last request (default 10 s, at least 4 SLOs)",
    )
    rep.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    rep.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for the spawned agent, e.g. --agent-arg=--width=24 (repeatable)",
    )
    add_mqtt_arguments(rep)
    add_store_arguments(rep)
    rep.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    trace = getattr(args, "trace", None)
    if trace is None:
        return _run(args)
    from workloads.traces import read_once

    # The trace is loaded twice (checked on a stand-in profile before the agent is up, then
    # sized on the agent's), and a pipe gives its content to its first reader only.
    with read_once(Path(trace)):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from dartfl.profiles import load_profile_toml

    security = _check_flags(args)
    file_profile = load_profile_toml(args.profile_file) if args.profile_file else None
    arrivals = _workload_before_agent(args, file_profile)
    if not args.no_store:
        from dartfl.cli.recording import check_store

        check_store(args.store)  # before a broker or an agent starts
    broker: BrokerHandle | None = None
    agent = None
    agent_log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the agent)
    report = None
    try:
        url = args.broker
        if args.spawn_agent:
            broker = start_local_broker()
            url = broker.url
            agent = _spawn(args, url, agent_log)
            sighting = _wait_for_spawned_agent(agent, agent_log, url, args.device)
        else:
            from orchestration.agent_watch import wait_for_agent

            sighting = wait_for_agent(url, args.device, timeout_s=AGENT_ONLINE_TIMEOUT_S, security=security)
        outcome = _run_replay(args, url, sighting, file_profile, arrivals, security)
    finally:
        try:
            report = _stop_agent(agent)
            if broker is not None:
                broker.stop()
        finally:
            _echo_agent_log(agent_log)
            agent_log.close()
    summary = outcome.summary
    if report is not None:
        summary["agent_report"] = report
    run_id = None if args.no_store else _record(args, outcome, summary)
    if args.json:
        from dartfl.store import to_jsonable

        json.dump(to_jsonable({**summary, "run_id": run_id}), sys.stdout)
        sys.stdout.write("\n")
    else:
        from dartfl.cli.tables import print_replay_table

        print_replay_table(summary, outcome.arrivals, args.device, args.policy)
        if run_id is not None:
            print(f"recorded as run {run_id} in the run store")
    return 0


def _record(args: argparse.Namespace, replayed: _Replayed, summary: dict[str, Any]) -> int:
    """The replay in the run store, from when it began (so its duration is the replay's); its
    run id."""
    from dartfl.cli.recording import record_runs

    runs = [(replayed.record, summary)]
    label = f"replay on {args.device}"
    return record_runs(
        args.store, "replay", args, replayed.arrivals, label, runs, started_s=replayed.started_s
    )


def _run_replay(
    args: argparse.Namespace,
    url: str,
    sighting: AgentSighting,
    file_profile: DeviceProfile | None,
    arrivals: Arrivals | None,
    security: MqttSecurity | None,
) -> _Replayed:
    from dartfl.loaded_heap import loaded_heap_frozen
    from fltask.data import load_tasks
    from orchestration.replay import ReplayOptions, profile_of, replay, request_images

    profile = file_profile or profile_of(sighting)
    names = arrivals.task_names if arrivals is not None else _unsized(args).task_names
    tasks = load_tasks(names, max_train=1, max_test=1000)
    images = {name: request_images(tasks[name]) for name in names}
    payload = args.payload
    forms = sighting.status.payloads if sighting.status is not None else ("json",)
    if payload == "binary" and "binary" not in forms:
        log.warning("%s does not say it decodes binary requests; sending JSON", args.device)
        payload = "json"
    options = ReplayOptions(
        url, args.device, args.slo_ms / 1e3, payload, settle_s=args.settle_s, security=security
    )
    sized_per_s = None
    if arrivals is None:  # sized by the agent's price: the one it measures under traffic
        from orchestration.pricing import price_under_traffic

        profile = price_under_traffic(options, images, profile, names, args.policy, args.seed).priced(names)
        arrivals = arrivals_from_args(args, profile)
        sized_per_s = profile.capacity_per_s(names, (1.0,) * len(names))
    # A collector pause here would delay sends and the stamping of replies alike: both count
    # against the agent in the report (dartfl/loaded_heap.py).
    started_s = time.time()  # the run store's start of the run, recorded once it is over
    with loaded_heap_frozen(), _Progress(arrivals.num_requests, args.device) as on_progress:
        outcome = replay(arrivals, options, images, profile, args.policy, on_progress)
    return _Replayed(outcome, arrivals, started_s, sized_per_s)


class _Replayed:
    """A replay's outcome and the arrivals it sent (they may have been sized after the agent:
    then `sized_per_s` is the capacity, requests per second of an even task mix, that
    --target-load was read against)."""

    def __init__(
        self, outcome: ReplayOutcome, arrivals: Arrivals, started_s: float, sized_per_s: float | None
    ) -> None:
        self.outcome, self.arrivals, self.started_s = outcome, arrivals, started_s
        self.record = outcome.record
        self.sized_per_s = sized_per_s

    @property
    def summary(self) -> dict[str, Any]:
        summary = self.outcome.summary
        if self.sized_per_s is not None:
            summary["sized_capacity_per_s"] = self.sized_per_s
        return summary


class _Progress:
    """A progress bar on a terminal, else a line every PROGRESS_EVERY_S on stderr."""

    def __init__(self, total: int, device: str) -> None:
        self.total, self.device = total, device
        self.bar: Any = None
        self.next_line = 0.0

    def __enter__(self) -> Any:
        if sys.stderr.isatty():
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.start()
            self.job = self.bar.add_task(f"replaying to {self.device}", total=self.total)
        return self.update

    def update(self, sent: int, total: int, lag_s: float) -> None:
        if self.bar is not None:
            self.bar.update(self.job, completed=sent, description=f"replaying ({1e3 * lag_s:.1f} ms behind)")
        elif time.monotonic() >= self.next_line or sent == total:
            print(f"replay: {sent}/{total} requests sent, {1e3 * lag_s:.1f} ms behind plan", file=sys.stderr)
            self.next_line = time.monotonic() + PROGRESS_EVERY_S

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _check_flags(args: argparse.Namespace) -> MqttSecurity | None:
    """What can be checked before a broker or an agent starts; returns the MQTT security."""
    if not args.spawn_agent and not args.broker:
        raise ConfigError("give --broker URL of a running agent's broker, or --spawn-agent")
    for name in ("slo_ms", "settle_s"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {value:g}")
    if not args.spawn_agent:
        return mqtt_security_from_args(args)
    if args.mqtt_ca_file or args.mqtt_cert_file or args.mqtt_key_file or args.mqtt_username:
        raise ConfigError("--spawn-agent starts a private plain broker on loopback: drop the --mqtt-* flags")
    from edge_client.agent_config import check_agent_policy

    check_agent_policy(args.policy)  # the spawned agent would exit on it
    return None


def _workload_before_agent(args: argparse.Namespace, profile: DeviceProfile | None) -> Arrivals | None:
    """The workload, if it can be built before the agent is up (otherwise None).

    None when --target-load must wait for the agent's own profile; the workload flags are
    checked anyway, --target-load with them, by sizing the workload against a stand-in profile
    (the checks do not depend on the profile; the workload is thrown away).
    """
    from dartfl.profiles import get_profile

    if args.target_load is None or profile is not None:
        return arrivals_from_args(args, profile)
    arrivals_from_args(args, get_profile(STAND_IN_PROFILE), say_load=False)  # said once, sized for real
    return None


def _unsized(args: argparse.Namespace) -> Arrivals:
    """The workload at its --rate (what it is, before --target-load sizes it)."""
    return arrivals_from_args(argparse.Namespace(**{**vars(args), "target_load": None}), None)


def _spawn(args: argparse.Namespace, broker_url: str, agent_log: IO[bytes]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", "--broker", broker_url]
    cmd += ["--device", args.device, "--policy", args.policy, "--slo-ms", str(args.slo_ms), *args.agent_arg]
    if args.profile_file:
        cmd += ["--profile-file", str(args.profile_file)]
    log.info("starting agent: %s", " ".join(cmd))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=agent_log, env=env)


def _wait_for_spawned_agent(
    agent: subprocess.Popen[bytes], agent_log: IO[bytes], url: str, device: str
) -> AgentSighting:
    """The agent, once alive; fails as soon as the agent exits instead (a bad --agent-arg)."""
    from orchestration.agent_watch import wait_for_agent

    def still_running() -> None:
        if agent.poll() is not None:
            error = ConfigError if agent.returncode == 2 else DartflError  # 2: it rejected its flags
            raise error(f"the spawned agent exited with code {agent.returncode}: {_last_line(agent_log)}")

    return wait_for_agent(url, device, timeout_s=AGENT_ONLINE_TIMEOUT_S, check=still_running)


def _agent_stderr(agent_log: IO[bytes]) -> str:
    agent_log.seek(0)
    return agent_log.read().decode(errors="replace")


def _last_line(agent_log: IO[bytes]) -> str:
    """The last thing an exited agent wrote to stderr: normally why it stopped."""
    lines = _agent_stderr(agent_log).strip().splitlines()
    return lines[-1].strip() if lines else "it wrote nothing to stderr"


def _echo_agent_log(agent_log: IO[bytes]) -> None:
    """Pass on what the spawned agent wrote to stderr (kept apart from the progress bar)."""
    text = _agent_stderr(agent_log)
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")


def start_local_broker() -> BrokerHandle:
    """A private Mosquitto on loopback; BrokerStartError saying how to install it if it is not."""
    from messaging.brokers import start_mosquitto

    return start_mosquitto()


def _stop_agent(agent: subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> dict[str, Any] | None:
    """SIGTERM the spawned agent and read its final report (its last JSON line on stdout)."""
    import signal

    if agent is None:
        return None
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
    try:
        out, _ = agent.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        agent.kill()
        out, _ = agent.communicate()
        raise DartflError("the spawned agent did not stop within 30 s of SIGTERM; killed it") from None
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    report: dict[str, Any] | None = json.loads(lines[-1]) if lines else None
    return report
