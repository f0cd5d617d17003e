"""`dartfl edge run|profile|replay`: the real device agent, its cost profiler, and a load generator
(the replay's command is dartfl/cli/replay_cmd.py).

Heavy imports (torch, onnxruntime, paho) happen inside the handlers so `dartfl --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dartfl.cli.mqtt_args import add_mqtt_arguments, mqtt_security_from_args
from dartfl.cli.workload_args import parse_tasks, seed_arg
from dartfl.errors import ConfigError, DartflError

log = logging.getLogger(__name__)
DEFAULT_TASKS = "digits,fashion,uci-digits"
# edge_client.agent_config.ORT_PROVIDER_NAMES (tests/edge_client/test_inference.py checks they
# agree), listed here so that building the parser imports nothing heavy.
ORT_PROVIDER_NAMES = ("cpu", "cuda", "tensorrt")
AGENT_ONLINE_TIMEOUT_S = 120.0  # loading data and building the model, on a slow device
# Numeric flags by the range they must lie in, as dests (the flag is --dest-with-dashes).
# Checked here so the error names the flag the user typed: AgentConfig speaks in its own
# fields and units (--slo-ms -5 would be "slo-s must be > 0, got -0.005").
_MODEL_COUNTS = ("inference_threads", "training_threads", "max_train")
_AGENT_COUNTS = ("queue_capacity",)
_AGENT_POSITIVE = ("slo_ms", "period_s", "telemetry_s", "round_s")
_AGENT_NON_NEGATIVE = ("round_target", "publish_every_s")  # 0 switches them off
# The widest model fltask.model.MultitaskCNN builds (its check `0 < width <= 64`, a literal
# there; tests/cli/test_input_checks_edge.py checks the two agree). Checked here so that a
# wider one fails before seconds of data loading, naming the flag.
MAX_WIDTH = 64.0


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
        type=_output_file,
        default=Path("edge-profile.toml"),
        help="profile TOML to write (default edge-profile.toml); missing directories are made",
    )
    prof.add_argument("--name", default=None, help="profile name (default: this host's name)")
    prof.add_argument("--quick", action="store_true", help="fewer repetitions (a few seconds)")
    prof.add_argument(
        "--cores",
        type=int,
        default=1,
        help="also measure the [cores] table on this many CPUs (speedups, interference, switch time; "
        "at most the CPUs this process may use)",
    )
    _model_arguments(prof)
    prof.set_defaults(handler=_profile)

    from dartfl.cli import replay_cmd

    replay_cmd.register(edge_sub)


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks", default=DEFAULT_TASKS, help=f"tasks to serve and train (default {DEFAULT_TASKS})"
    )
    p.add_argument("--width", type=float, default=1.0, help="model width multiplier (default 1)")
    p.add_argument(
        "--inference-threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)"
    )
    p.add_argument("--training-threads", type=int, default=1, help="PyTorch threads (default 1)")
    p.add_argument(
        "--ort-provider",
        choices=ORT_PROVIDER_NAMES,
        default="cpu",
        help="ONNX Runtime execution provider for inference (default cpu; cuda and tensorrt need the "
        "onnxruntime-gpu wheel: docs/deployment.md); one that cannot serve here falls back to cpu "
        "with a warning",
    )
    p.add_argument("--ort-strict", action="store_true", help="fail (exit 2) instead of falling back to cpu")
    p.add_argument(
        "--max-train", type=int, default=3000, help="training samples loaded per task (default 3000)"
    )
    p.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="seed of the data subset, model and training order (default 0)",
    )


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="edge-1", help="device id, used in MQTT topics (default edge-1)")
    p.add_argument(
        "--broker",
        help="broker URL, mqtt://HOST:1883 or mqtts://HOST:8883 (TLS) "
        "(default: start a private Mosquitto on loopback)",
    )
    p.add_argument("--policy", default="dart", help="allocation policy spec (default dart)")
    p.add_argument(
        "--loss-weights", choices=("uniform", "demand"), help="override the policy's loss weighting"
    )
    p.add_argument("--slo-ms", type=float, default=250.0, help="latency SLO in ms (default 250)")
    p.add_argument("--queue-capacity", type=int, default=256, help="per-task queue bound (default 256)")
    p.add_argument(
        "--no-deadline-admission",
        action="store_true",
        help="queue every request there is room for, even one that cannot make its SLO",
    )
    p.add_argument(
        "--split-cores",
        action="store_true",
        help="serve and train at once on a split of the cores, when the profile has several",
    )
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
        help="serve the locally trained model every so often (default 30 s; 0: never, serving then "
        "changes only with the global weights of an FL round)",
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


def _output_file(text: str) -> Path:
    """-o's type: a name ending in '/' is a directory's (Path would drop the slash and write a
    file of that name)."""
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(
            f"{text} names a directory; give a file name inside it, e.g. {text}edge-profile.toml"
        )
    return Path(text)


def _check_model_flags(args: argparse.Namespace) -> None:
    _check_range(args, _MODEL_COUNTS, lambda v: v >= 1, "an integer >= 1")
    _check_range(args, ("width",), lambda v: math.isfinite(v) and v > 0, "> 0")
    _check_range(args, ("width",), lambda v: v <= MAX_WIDTH, f"<= {MAX_WIDTH:g} (the widest model)")
    parse_tasks(args.tasks)


def _check_agent_flags(args: argparse.Namespace) -> None:
    """`edge run`'s flags (the model's too) before anything loads."""
    _check_model_flags(args)
    _check_range(args, _AGENT_COUNTS, lambda v: v >= 1, "an integer >= 1")
    _check_range(args, _AGENT_POSITIVE, lambda v: math.isfinite(v) and v > 0, "> 0")
    _check_range(args, _AGENT_NON_NEGATIVE, lambda v: math.isfinite(v) and v >= 0, ">= 0")
    if args.model_dir is not None:
        _make_dir(args.model_dir, f"--model-dir {args.model_dir}")


def _check_profile_flags(args: argparse.Namespace) -> None:
    """`edge profile`'s flags (the model's too) before anything loads or is measured; makes the
    output's missing directories (the profile is written last, after seconds of measuring)."""
    from dartfl.cli.output_paths import check_output_path
    from edge_client.core_pinning import available_cpus

    _check_model_flags(args)
    usable = len(available_cpus())
    if not 1 <= args.cores <= usable:
        raise ConfigError(
            f"--cores must lie in 1..{usable} (the CPUs this process may use), got {args.cores}"
        )
    check_output_path(args.output, "-o", "edge-profile.toml")
    _make_dir(args.output.parent, f"-o {args.output}: its directory {args.output.parent}")


def _make_dir(path: Path, label: str) -> None:
    """Make the directory `path` (`label` names it in errors) and its parents now, so that a
    file in the way or a place where none can be made fails before the slow work, not after."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{label} is a file; give a directory (it is made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{label} cannot be made ({exc.strerror or exc}); give a directory in a writable place"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{label} is not writable; give a writable directory")


def _check_range(
    args: argparse.Namespace, dests: tuple[str, ...], ok: Callable[[float], bool], expected: str
) -> None:
    for dest in dests:
        value = getattr(args, dest)
        if not ok(value):
            raise ConfigError(f"--{dest.replace('_', '-')} must be {expected}, got {value:g}")


def _model_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The AgentConfig fields `_model_arguments`' flags set (for `edge run` and `edge profile`)."""
    return {
        "tasks": parse_tasks(args.tasks),
        "width": args.width,
        "inference_threads": args.inference_threads,
        "training_threads": args.training_threads,
        "ort_provider": args.ort_provider,
        "ort_strict": args.ort_strict,
        "max_train_per_task": args.max_train,
        "seed": args.seed,
    }


def _agent_config(args: argparse.Namespace) -> Any:
    from edge_client.agent import AgentConfig

    _check_agent_flags(args)
    return AgentConfig(
        device_id=args.device,
        broker_url=args.broker,
        slo_s=args.slo_ms / 1e3,
        queue_capacity=args.queue_capacity,
        period_s=args.period_s,
        policy=args.policy,
        loss_weighting=args.loss_weights,
        telemetry_period_s=args.telemetry_s,
        round_s=args.round_s,
        round_target_samples=args.round_target,
        model_dir=args.model_dir,
        publish_every_s=args.publish_every_s,
        round_channel=getattr(args, "round_channel", None),
        deadline_admission=not args.no_deadline_admission,
        split_cores=args.split_cores,
        mqtt_security=mqtt_security_from_args(args),
        reply_topics=args.reply_topics,
        **_model_fields(args),
    )


def _run(args: argparse.Namespace) -> int:
    from dartfl.loaded_heap import loaded_heap_frozen
    from dartfl.profiles import load_profile_toml
    from edge_client.agent import Agent
    from messaging.errors import MqttWaitStoppedError

    config = _agent_config(args)
    profile = load_profile_toml(args.profile_file) if args.profile_file else None
    agent = Agent.create(config, profile)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: its terminal closed
        signal.signal(sig, lambda *_: agent.request_stop())
    try:
        url = agent.start()  # waits for a broker that is not up yet
    except MqttWaitStoppedError:  # a stop while waiting is a stop, not a failure
        print(f"dartfl edge agent {config.device_id} stopped before its broker came up", file=sys.stderr)
        return 0
    print(f"dartfl edge agent {config.device_id} serving {','.join(config.tasks)} on {url}", file=sys.stderr)
    with loaded_heap_frozen():  # no collector pause walks the models and libraries mid-burst
        report = agent.run()
    json.dump(report.to_json(), sys.stdout)
    sys.stdout.write("\n")
    return 0


def _profile(args: argparse.Namespace) -> int:
    _check_profile_flags(args)
    import platform
    from dataclasses import replace

    from dartfl.cli.replay_cmd import start_local_broker
    from dartfl.profiles import profile_to_toml
    from edge_client.agent import AgentConfig
    from edge_client.request_path import measure_request_path
    from edge_client.runtime import ModelRuntime
    from messaging.link import connect

    config = AgentConfig(**_model_fields(args))

    def say(text: str) -> None:
        print(f"edge profile: {text}", file=sys.stderr, flush=True)

    say("loading the data and building the model")
    name = args.name or platform.node() or "measured"
    with tempfile.TemporaryDirectory() as tmp:
        runtime = ModelRuntime.build(config, Path(tmp))
        profile = runtime.calibrate(quick=args.quick, name=name, progress=say)
        if args.cores > 1:
            from edge_client.core_profile import measure_core_model

            cores = measure_core_model(runtime, args.cores, quick=args.quick, progress=say)
            profile = replace(profile, cores=cores)
        runtime.close()
    say("the request path: decode, admit, encode and publish, through a broker on loopback")
    with start_local_broker() as broker:
        link = connect(broker.url, "dartfl-edge-profile", on_message=lambda _m: None)
        try:
            path = measure_request_path(profile, config.tasks, link, broker.url)
        finally:
            link.close()
    profile = replace(profile, request_path=path)
    try:
        args.output.write_text(profile_to_toml(profile))
    except OSError as exc:
        # A full disk or a device that refuses writes (/dev/full) passes every check up front;
        # like the store's "disk full", a failure (exit 1), not unusable input.
        raise DartflError(
            f"-o {args.output}: writing the measured profile failed ({exc.strerror or exc}); "
            "free space or pick another file, then measure again"
        ) from None
    inf, tr = profile.inference, profile.training
    print(
        f"inference: {1e3 * inf.batch_fixed_s:.3f} ms + {1e3 * inf.per_request_s:.3f} ms/request (the model) "
        f"+ {1e3 * path.per_request_s:.3f} ms/request (the request path); "
        f"training: {1e3 * tr.microbatch_fixed_s:.3f} ms + {1e3 * tr.per_sample_s:.3f} ms/sample; "
        f"wrote {args.output}"
    )
    return 0
