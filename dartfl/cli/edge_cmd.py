"""`dartfl edge run|profile|replay`: the real device agent, its cost profiler, and a load generator.

Heavy imports (torch, onnxruntime, paho) happen inside the handlers so `dartfl --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dartfl.cli.mqtt_args import add_mqtt_arguments, mqtt_security_from_args
from dartfl.cli.sim_cmd import add_store_arguments
from dartfl.cli.workload_args import add_workload_arguments, arrivals_from_args, seed_arg
from dartfl.errors import ConfigError, DartflError

if TYPE_CHECKING:
    from dartfl.arrivals import Arrivals
    from dartfl.types import DeviceProfile
    from messaging.security import MqttSecurity
    from orchestration.agent_watch import AgentSighting

log = logging.getLogger(__name__)
DEFAULT_TASKS = "digits,fashion,uci-digits"
AGENT_ONLINE_TIMEOUT_S = 120.0  # loading data and building the model, on a slow device
# Numeric flags by the range they must lie in, as dests (the flag is --dest-with-dashes).
# Checked here so the error names the flag the user typed: AgentConfig speaks in its own
# fields and units (--slo-ms -5 would be "slo-s must be > 0, got -0.005").
_MODEL_COUNTS = ("inference_threads", "training_threads", "max_train")
_AGENT_COUNTS = ("queue_capacity",)
_AGENT_POSITIVE = ("slo_ms", "period_s", "telemetry_s", "round_s")
_AGENT_NON_NEGATIVE = ("round_target", "publish_every_s")  # 0 switches them off


def register(sub: Any) -> None:
    edge = sub.add_parser("edge", help="the real edge device: agent, profiler, load generator")
    edge_sub = edge.add_subparsers(dest="edge_command", metavar="COMMAND", required=True)

    run = edge_sub.add_parser("run", help="run the device agent (MQTT request plane + co-scheduler)")
    _agent_arguments(run)
    run.set_defaults(handler=_run)

    prof = edge_sub.add_parser("profile", help="measure this device's costs and write a profile TOML")
    prof.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("edge-profile.toml"),
        help="profile TOML to write (default edge-profile.toml)",
    )
    prof.add_argument("--name", default=None, help="profile name (default: this host's name)")
    prof.add_argument("--quick", action="store_true", help="fewer repetitions (a few seconds)")
    _model_arguments(prof)
    prof.set_defaults(handler=_profile)

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
        "--profile-file", type=Path, help="cost profile for --target-load (default: the agent's own)"
    )
    rep.add_argument("--json", action="store_true", help="print one JSON object")
    rep.add_argument("--agent-arg", action="append", default=[], help="extra flag for the spawned agent")
    add_mqtt_arguments(rep)
    add_store_arguments(rep)
    rep.set_defaults(handler=_replay)


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks", default=DEFAULT_TASKS, help=f"tasks to serve and train (default {DEFAULT_TASKS})"
    )
    p.add_argument("--width", type=float, default=1.0, help="model width multiplier (default 1)")
    p.add_argument("--inference-threads", type=int, default=1)
    p.add_argument("--training-threads", type=int, default=1)
    p.add_argument(
        "--max-train", type=int, default=3000, help="training samples loaded per task (default 3000)"
    )
    p.add_argument("--seed", type=seed_arg, default=0)


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="edge-1", help="device id, used in MQTT topics (default edge-1)")
    p.add_argument(
        "--broker",
        help="broker URL, mqtt://HOST:1883 or mqtts://HOST:8883 (TLS) (default: start an embedded one)",
    )
    p.add_argument("--policy", default="dart", help="allocation policy spec (default dart)")
    p.add_argument(
        "--loss-weights", choices=("uniform", "demand"), help="override the policy's loss weighting"
    )
    p.add_argument("--slo-ms", type=float, default=250.0, help="latency SLO in ms (default 250)")
    p.add_argument("--queue-capacity", type=int, default=256, help="per-task queue bound (default 256)")
    p.add_argument("--period-s", type=float, default=0.25, help="control period (default 0.25 s)")
    p.add_argument("--telemetry-s", type=float, default=1.0, help="telemetry interval (default 1 s)")
    p.add_argument("--round-s", type=float, default=60.0, help="FL round length (default 60 s)")
    p.add_argument("--round-target", type=int, default=0, help="samples owed per round (default 0)")
    p.add_argument("--profile-file", type=Path, help="cost profile (default: calibrate at start)")
    p.add_argument(
        "--round-channel",
        help="127.0.0.1:PORT: take FL rounds from the local ClientApp (default: $DARTFL_ROUND_CHANNEL)",
    )
    p.add_argument(
        "--model-dir",
        type=Path,
        help="where ONNX versions are written and kept (default: a temp dir, removed when the agent stops)",
    )
    p.add_argument(
        "--publish-every-s",
        type=float,
        default=30.0,
        help="serve the locally trained model every so often (default 30 s; 0: only after FL rounds)",
    )
    p.add_argument(
        "--reply-topics",
        choices=("requester", "any"),
        default="requester",
        help="answer only on dartfl/v1/_reply/<requester>/... (default), or on any non-device "
        "topic as protocol v1 first allowed, for requesters not yet moved (docs/protocol.md)",
    )
    _model_arguments(p)
    add_mqtt_arguments(p)


def _check_model_flags(args: argparse.Namespace) -> None:
    _check_range(args, _MODEL_COUNTS, lambda v: v >= 1, "an integer >= 1")
    _check_range(args, ("width",), lambda v: math.isfinite(v) and v > 0, "> 0")


def _check_agent_flags(args: argparse.Namespace) -> None:
    """`edge run`'s flags (the model's too) before anything loads."""
    _check_model_flags(args)
    _check_range(args, _AGENT_COUNTS, lambda v: v >= 1, "an integer >= 1")
    _check_range(args, _AGENT_POSITIVE, lambda v: math.isfinite(v) and v > 0, "> 0")
    _check_range(args, _AGENT_NON_NEGATIVE, lambda v: math.isfinite(v) and v >= 0, ">= 0")


def _check_range(
    args: argparse.Namespace, dests: tuple[str, ...], ok: Callable[[float], bool], expected: str
) -> None:
    for dest in dests:
        value = getattr(args, dest)
        if not ok(value):
            raise ConfigError(f"--{dest.replace('_', '-')} must be {expected}, got {value:g}")


def _agent_config(args: argparse.Namespace) -> Any:
    from edge_client.agent import AgentConfig

    _check_agent_flags(args)
    return AgentConfig(
        device_id=args.device,
        broker_url=args.broker,
        tasks=tuple(t.strip() for t in args.tasks.split(",") if t.strip()),
        slo_s=args.slo_ms / 1e3,
        queue_capacity=args.queue_capacity,
        period_s=args.period_s,
        policy=args.policy,
        loss_weighting=args.loss_weights,
        width=args.width,
        inference_threads=args.inference_threads,
        training_threads=args.training_threads,
        telemetry_period_s=args.telemetry_s,
        max_train_per_task=args.max_train,
        round_s=args.round_s,
        round_target_samples=args.round_target,
        model_dir=args.model_dir,
        publish_every_s=args.publish_every_s,
        round_channel=getattr(args, "round_channel", None),
        seed=args.seed,
        mqtt_security=mqtt_security_from_args(args),
        reply_topics=args.reply_topics,
    )


def _run(args: argparse.Namespace) -> int:
    from dartfl.profiles import load_profile_toml
    from edge_client.agent import Agent

    config = _agent_config(args)
    profile = load_profile_toml(args.profile_file) if args.profile_file else None
    agent = Agent.create(config, profile)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.request_stop())
    url = agent.start()
    print(f"dartfl edge agent {config.device_id} serving {','.join(config.tasks)} on {url}", file=sys.stderr)
    report = agent.run()
    json.dump(report.to_json(), sys.stdout)
    sys.stdout.write("\n")
    return 0


def _profile(args: argparse.Namespace) -> int:
    import platform

    from dartfl.cli.output_paths import check_output_path
    from dartfl.profiles import profile_to_toml
    from edge_client.agent import AgentConfig
    from edge_client.runtime import ModelRuntime

    check_output_path(args.output, "-o", "edge-profile.toml")
    _check_model_flags(args)
    config = AgentConfig(
        tasks=tuple(t.strip() for t in args.tasks.split(",") if t.strip()),
        width=args.width,
        inference_threads=args.inference_threads,
        training_threads=args.training_threads,
        max_train_per_task=args.max_train,
        seed=args.seed,
    )
    with tempfile.TemporaryDirectory() as tmp:
        runtime = ModelRuntime.build(config, Path(tmp))
        profile = runtime.calibrate(quick=args.quick, name=args.name or platform.node() or "measured")
    args.output.write_text(profile_to_toml(profile))
    inf, tr = profile.inference, profile.training
    print(
        f"inference: {1e3 * inf.batch_fixed_s:.3f} ms + {1e3 * inf.per_request_s:.3f} ms/request; "
        f"training: {1e3 * tr.microbatch_fixed_s:.3f} ms + {1e3 * tr.per_sample_s:.3f} ms/sample; "
        f"wrote {args.output}"
    )
    return 0


def _spawn(args: argparse.Namespace, broker_url: str, agent_log: IO[bytes]) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "dartfl.cli.main",
        "edge",
        "run",
        "--broker",
        broker_url,
        "--device",
        args.device,
    ]
    cmd += ["--policy", args.policy, "--slo-ms", str(args.slo_ms), *args.agent_arg]
    if args.profile_file:
        cmd += ["--profile-file", str(args.profile_file)]
    log.info("starting agent: %s", " ".join(cmd))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=agent_log, env=env)


def _check_replay_flags(args: argparse.Namespace) -> MqttSecurity | None:
    """What can be checked before a broker or an agent starts; returns the MQTT security."""
    if not args.spawn_agent and not args.broker:
        raise ConfigError("give --broker URL of a running agent's broker, or --spawn-agent")
    _check_range(args, ("slo_ms",), lambda v: math.isfinite(v) and v > 0, "> 0")
    if not args.spawn_agent:
        return mqtt_security_from_args(args)
    if args.mqtt_ca_file or args.mqtt_cert_file or args.mqtt_key_file or args.mqtt_username:
        raise ConfigError("--spawn-agent starts a private plain broker on loopback: drop the --mqtt-* flags")
    from dartfl.policies import make_policy

    make_policy(args.policy)  # the spawned agent would exit on it
    return None


def _workload_before_agent(args: argparse.Namespace, profile: DeviceProfile | None) -> Arrivals | None:
    """The arrivals, built before any agent starts so that a bad workload fails at once.

    None when --target-load must wait for the agent's own profile; the workload flags are
    checked anyway, by building the workload at its --rate.
    """
    if args.target_load is None or profile is not None:
        return arrivals_from_args(args, profile)
    arrivals_from_args(argparse.Namespace(**{**vars(args), "target_load": None}), None)
    return None


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


def _replay(args: argparse.Namespace) -> int:
    from dartfl.profiles import load_profile_toml
    from fltask.data import load_tasks
    from orchestration.agent_watch import wait_for_agent
    from orchestration.replay import profile_of, replay

    security = _check_replay_flags(args)
    file_profile = load_profile_toml(args.profile_file) if args.profile_file else None
    arrivals = _workload_before_agent(args, file_profile)
    broker = agent = None
    agent_log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the agent)
    try:
        url = args.broker
        if args.spawn_agent:
            broker = _start_broker()
            url = broker.url
            agent = _spawn(args, url, agent_log)
            sighting = _wait_for_spawned_agent(agent, agent_log, url, args.device)
        else:
            timeout_s = AGENT_ONLINE_TIMEOUT_S
            sighting = wait_for_agent(url, args.device, timeout_s=timeout_s, security=security)
        profile = file_profile or profile_of(sighting)
        if arrivals is None:
            arrivals = arrivals_from_args(args, profile)
        tasks = load_tasks(arrivals.task_names, max_train=1, max_test=1000)
        images = {name: _as_uint8(tasks[name]) for name in arrivals.task_names}
        from rich.progress import Progress

        with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
            job = bar.add_task(f"replaying to {args.device}", total=arrivals.num_requests)
            outcome = replay(
                arrivals,
                broker_url=url,
                device=args.device,
                images=images,
                slo_s=args.slo_ms / 1e3,
                profile=profile,
                policy=args.policy,
                on_progress=lambda done, _total: bar.update(job, completed=done),
                security=security,
                mqtt5=broker is None or broker.kind == "mosquitto",  # amqtt speaks 3.1.1 only
            )
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
    if not args.no_store:
        _record_replay(args, arrivals, outcome)
    if args.json:
        from dartfl.store import to_jsonable

        json.dump(to_jsonable(summary), sys.stdout)
        sys.stdout.write("\n")
    else:
        from orchestration.replay import HEADLINE_KEYS

        for key in HEADLINE_KEYS:
            print(f"{key:28s} {summary.get(key)}")
    return 0


def _as_uint8(task: Any) -> tuple[Any, Any]:
    import numpy as np

    return np.round(task.x_test[:, 0] * 255).astype(np.uint8), task.y_test


def _start_broker() -> Any:
    from messaging.brokers import start_embedded_broker, start_mosquitto

    if shutil.which("mosquitto") or Path("/usr/sbin/mosquitto").exists():
        return start_mosquitto(mosquitto=shutil.which("mosquitto") or "/usr/sbin/mosquitto")
    log.warning("mosquitto not found; using the embedded broker (apt-get install mosquitto for the real one)")
    return start_embedded_broker()


def _stop_agent(agent: subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> dict[str, Any] | None:
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
    return json.loads(lines[-1]) if lines else None


def _record_replay(args: argparse.Namespace, arrivals: Any, outcome: Any) -> None:
    from dartfl.cli.recording import record_runs

    record_runs(
        args.store, "replay", args, arrivals, f"replay on {args.device}", [(outcome.record, outcome.summary)]
    )
