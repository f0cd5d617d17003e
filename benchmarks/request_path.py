"""The agent's request path: CPU per request and the rate one agent sustains on one core.

The agent (`dartfl edge run`, inference only, model width 1) runs pinned to CPU 0; the
replayer and Mosquitto share CPU 1. Each step replays a Poisson stream at a fixed rate for
`--step-s` seconds and records lost and refused requests, p99 latency, the replayer's send lag and the
agent's process CPU per request (from its telemetry). The same ramp against an echo device
(a paho client on CPU 0 that decodes each request and answers it at once, no model, no
executor) measures what Mosquitto and the MQTT client library themselves sustain on this
machine, the ceiling the agent's figure is compared with. First, Mosquitto's own rate: its C
clients (`mosquitto_pub -l` beside the broker on CPU 1, `mosquitto_sub` on CPU 0) move a burst
of request-sized QoS 1 messages through the same broker settings; no Python on either end.

    .venv/bin/python benchmarks/request_path.py --json benchmarks/results/request_path.json

Run it inside the loopback namespace (scripts/loopback-run) on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_output import print_json

from dartfl import protocol
from dartfl.arrivals import Arrivals
from dartfl.errors import DartflError
from dartfl.loaded_heap import loaded_heap_frozen
from dartfl.profiles import get_profile
from fltask.data import load_tasks
from messaging.brokers import start_mosquitto
from messaging.link import Message, connect
from orchestration.agent_watch import wait_for_status
from orchestration.replay import ReplayOptions, replay

DARTFL = str(Path(sys.executable).parent / "dartfl")
TASKS = ("digits", "fashion", "uci-digits")
SLO_S = 0.1
AGENT_CPU, LOAD_CPU = 0, 1


def _pin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


def _poisson(rate: float, duration_s: float, seed: int) -> Arrivals:
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * duration_s))
    times = np.sort(rng.uniform(0.0, duration_s, n))
    return Arrivals(times, rng.integers(0, len(TASKS), n), TASKS, duration_s)


def _echo_device(url: str, device: str) -> None:
    """A device that answers every request at once: decode, encode a reply, publish."""
    _pin(AGENT_CPU)
    link = None

    def on_message(message: Message) -> None:
        _, task = protocol.parse_request_topic(message.topic)
        request = protocol.decode_request(message.payload, task, TASKS, content_type=message.content_type)
        payload, content_type = protocol.answer(request.binary, request.id, task, 0, 0.1, 1)
        assert link is not None
        link.publish(request.reply_to, payload, qos=protocol.REPLY_QOS, content_type=content_type)

    link = connect(
        url,
        f"echo-{device}",
        on_message=on_message,
        subscriptions=[(protocol.request_subscription(device), 1)],
    )
    status = protocol.DeviceStatus(device, True, time.time(), get_profile("x86-1core"))
    link.publish(protocol.status_topic(device), protocol.encode_status(status), qos=1, retain=True)
    with loaded_heap_frozen():  # as the agent's entry point does: no collector pause mid-step
        while True:
            time.sleep(3600)


class _Device:
    """The device under test on CPU 0: a real agent process, or the echo device."""

    def __init__(self, kind: str, url: str, device: str, log: Path) -> None:
        self.kind = kind
        if kind == "echo":
            self.proc: Any = multiprocessing.get_context("fork").Process(
                target=_echo_device, args=(url, device), daemon=True
            )
            self.proc.start()
        else:
            cmd = [DARTFL, "edge", "run", "--broker", url, "--device", device, "--policy", "inference-only"]
            cmd += ["--width", "1", "--slo-ms", f"{SLO_S * 1e3:g}", "--queue-capacity", "4096"]
            cmd += ["--max-train", "100", "--publish-every-s", "0"]
            with log.open("wb") as err:
                self.proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL)
            os.sched_setaffinity(self.proc.pid, {AGENT_CPU})

    def stop(self) -> None:
        self.proc.terminate()
        if self.kind == "echo":
            self.proc.join(timeout=30)
        else:
            self.proc.wait(timeout=60)


def _step(
    url: str, device: str, rate: float, step_s: float, images: dict[str, Any], seed: int
) -> dict[str, Any]:
    arrivals = _poisson(rate, step_s, seed)
    options = ReplayOptions(url, device, SLO_S, "binary", settle_s=3.0, grace_s=1.0)
    outcome = replay(arrivals, options, images, get_profile("x86-1core"), "inference-only")
    r = outcome.summary
    return {
        "rate_per_s": rate,
        "requests": r["requests"],
        "lost": r["lost"],
        "rejected": r["rejected"],
        "late": r["late_replies"],
        "p99_latency_s": r["p99_latency_s"],
        "send_lag_p99_s": r["send_lag_s"]["p99"],
        "agent_cpu_per_request_s": r["agent_cpu_per_request_s"],
    }


def ramp(kind: str, rates: list[float], step_s: float) -> list[dict[str, Any]]:
    """Replay each rate against a fresh device of `kind` ("agent" or "echo")."""
    _pin(LOAD_CPU)
    tasks = load_tasks(TASKS, max_train=1, max_test=500)
    images = {n: (np.round(t.x_test[:, 0] * 255).astype(np.uint8), t.y_test) for n, t in tasks.items()}
    rows = []
    # The replayer keeps its collector off what it loaded, as `edge replay` does.
    with tempfile.TemporaryDirectory() as tmp, start_mosquitto() as broker, loaded_heap_frozen():
        if broker.pid is not None:
            os.sched_setaffinity(broker.pid, {LOAD_CPU})
        device = f"bench-{kind}"
        under_test = _Device(kind, broker.url, device, Path(tmp) / f"{kind}.log")
        try:
            wait_for_status(broker.url, device, "online", timeout_s=120)
            failed = 0
            for i, rate in enumerate(rates):
                try:
                    row = _step(broker.url, device, rate, step_s, images, seed=i)
                except DartflError as exc:  # still swamped by the last step: its probe went unanswered
                    print(kind, f"{rate:g}/s: {exc}", file=sys.stderr)
                    break
                rows.append(row)
                print(kind, json.dumps(row), file=sys.stderr)
                # Past the knee a device only falls further behind: two lossy steps end the ramp.
                failed = failed + 1 if row["lost"] else 0
                if failed == 2:
                    break
        finally:
            under_test.stop()
    return rows


def mosquitto_rate(messages: int, timeout_s: float = 120.0) -> dict[str, Any]:
    """Messages a second from mosquitto_pub through the broker to mosquitto_sub, at QoS 1, each
    as large as a binary request. Beyond ~50,000 queued lines mosquitto_pub 2.0 drops some
    at exit, so keep `messages` at or below that."""
    for tool in ("mosquitto_pub", "mosquitto_sub"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install mosquitto-clients")
    _pin(LOAD_CPU)
    size = 830  # a binary request with its id and reply topic (docs/protocol.md)
    with tempfile.TemporaryDirectory() as tmp, start_mosquitto() as broker:
        if broker.pid is not None:
            os.sched_setaffinity(broker.pid, {LOAD_CPU})
        port = broker.url.rsplit(":", 1)[1]
        common = ["-h", "127.0.0.1", "-p", port, "-q", "1"]
        received = Path(tmp) / "received"
        with received.open("wb") as out:
            sub = subprocess.Popen(
                ["mosquitto_sub", *common, "-t", "bench/#", "-C", str(messages)], stdout=out
            )
        os.sched_setaffinity(sub.pid, {AGENT_CPU})
        time.sleep(0.5)  # subscribed before the first message
        lines = (b"x" * (size - 1) + b"\n") * messages
        start = time.perf_counter()
        subprocess.run(
            ["mosquitto_pub", *common, "-t", "bench/x", "-l"], input=lines, timeout=timeout_s, check=True
        )
        try:
            sub.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            sub.kill()
        elapsed = time.perf_counter() - start
        got = received.read_bytes().count(b"\n")
    if got < messages:
        raise SystemExit(
            f"mosquitto_sub received {got} of {messages} messages: use fewer --mosquitto-messages"
        )
    return {
        "messages": messages,
        "bytes": size,
        "qos": 1,
        "seconds": elapsed,
        "rate_per_s": messages / elapsed,
    }


def sustained(rows: list[dict[str, Any]]) -> float:
    """The highest rate with nothing lost, refused or late and p99 within the SLO. (A refusal
    is an answer, but a device that refuses part of a rate it is meant to carry does not carry it.)"""
    ok = [
        r["rate_per_s"]
        for r in rows
        if r["lost"] == 0 and r["rejected"] == 0 and r["late"] == 0 and r["p99_latency_s"] <= SLO_S
    ]
    return max(ok, default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="1000,2000,3000,4000,5000,6000,7000,8000")
    parser.add_argument("--step-s", type=float, default=15.0)
    parser.add_argument("--mosquitto-messages", type=int, default=50_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    result: dict[str, Any] = {"slo_s": SLO_S, "step_s": args.step_s}
    # First: it takes seconds, and a missing tool should stop the run before the long ramps.
    result["mosquitto"] = mosquitto_rate(args.mosquitto_messages)
    print("mosquitto", json.dumps(result["mosquitto"]), file=sys.stderr)
    for kind in ("agent", "echo"):
        rows = ramp(kind, rates, args.step_s)
        result[kind] = {"steps": rows, "sustained_per_s": sustained(rows)}
    echo = result["echo"]["sustained_per_s"]  # 0: the echo device sustained none of the rates
    result["agent_over_echo"] = result["agent"]["sustained_per_s"] / echo if echo else None
    result["agent_over_mosquitto"] = result["agent"]["sustained_per_s"] / result["mosquitto"]["rate_per_s"]
    print_json(result, args.json)


if __name__ == "__main__":
    main()
