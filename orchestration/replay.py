"""The load generator: replays a workload against a device agent at wall-clock pace over MQTT.

Every request carries a real test image of its task. Every reply is matched by its
correlation id, and the metrics are computed from the requester's side: latency runs from
send to receipt, so it includes the broker round trip. Training progress comes from the
agent's telemetry: the difference between the first and the last snapshot of the replay.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl import protocol
from dartfl.arrivals import Arrivals
from dartfl.errors import DartflError
from dartfl.fluid import fluid_terms
from dartfl.metrics import RunRecord, summarize
from dartfl.protocol import DeviceStatus, Telemetry
from dartfl.types import DeviceProfile
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

# The replay's headline figures, in the order people read them.
HEADLINE_KEYS = (
    "requests",
    "replies",
    "rejected",
    "errors",
    "lost",
    "slo_attainment",
    "p50_latency_s",
    "p99_latency_s",
    "train_samples",
    "harvest_efficiency",
    "accuracy",
    "agent_overhead_cpu_fraction",
)


@dataclass
class _Inbox:
    """What came back, keyed by request index; filled by paho's thread."""

    finish_s: np.ndarray
    status: list[str | None]
    labels: np.ndarray
    telemetry: list[Telemetry] = field(default_factory=list)
    answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ReplayOutcome:
    summary: dict[str, Any]
    record: RunRecord
    agent_report: Telemetry | None


def wait_for_status(
    broker_url: str,
    device: str,
    want: str = "online",
    timeout_s: float = 60.0,
    security: MqttSecurity | None = None,
    check: Callable[[], None] | None = None,
) -> DeviceStatus:
    """Block until the device's retained status says `want`; return that status message.

    `check` is called about once a second while waiting and may raise to stop the wait (say,
    the agent process it waits for has exited), on the one broker connection."""
    from messaging.link import connect

    got: list[DeviceStatus] = []
    ready = threading.Event()

    def on_message(message: Any) -> None:
        try:
            status = protocol.decode_status(message.payload, message.topic)
        except DartflError:
            return
        if status.online == (want == "online"):
            got.append(status)
            ready.set()

    link = connect(
        broker_url,
        client_id=f"dartfl-wait-{uuid.uuid4().hex[:8]}",
        on_message=on_message,
        subscriptions=[(protocol.status_topic(device), 1)],
        security=security,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not ready.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            if check is not None:
                check()
            if time.monotonic() >= deadline:
                raise DartflError(
                    f"device {device!r} did not report {want!r} on {broker_url} within {timeout_s:.0f} s"
                )
    finally:
        link.close()
    return got[-1]


def profile_from_status(status: DeviceStatus) -> DeviceProfile:
    """The cost profile an agent publishes in its status message."""
    if status.profile is None:
        raise DartflError(
            f"device {status.device!r} publishes no cost profile in its status; pass --profile-file"
        )
    return status.profile


def replay(
    arrivals: Arrivals,
    *,
    broker_url: str,
    device: str,
    images: Mapping[str, tuple[np.ndarray, np.ndarray]],
    slo_s: float,
    profile: DeviceProfile,
    policy: str,
    settle_s: float = 10.0,
    on_progress: Callable[[int, int], None] | None = None,
    security: MqttSecurity | None = None,
) -> ReplayOutcome:
    """Send `arrivals` to `device` at their times; `images[task]` = (uint8 images, labels)."""
    from messaging.link import connect

    n = arrivals.num_requests
    inbox = _Inbox(np.full(n, np.nan), [None] * n, np.full(n, -1))
    reply_topic = f"dartfl/v1/replay/{uuid.uuid4().hex[:12]}/reply"
    t0 = [math.inf]

    def on_message(message: Any) -> None:
        now = time.monotonic()
        topic, payload = message.topic, message.payload
        if topic == reply_topic:
            try:
                reply = protocol.decode_reply(payload)
                i = int(reply.id or "-1")
            except (DartflError, ValueError, TypeError):
                log.warning("unreadable reply on %s", topic)
                return
            with inbox.lock:
                if 0 <= i < n and inbox.status[i] is None:
                    inbox.status[i] = reply.status
                    inbox.finish_s[i] = now - t0[0]
                    if reply.label is not None:
                        inbox.labels[i] = reply.label
                    inbox.answered += 1
                    if inbox.answered == n:
                        inbox.all_done.set()
        elif topic == protocol.telemetry_topic(device):
            inbox.telemetry.append(protocol.decode_telemetry(payload, topic))

    link = connect(
        broker_url,
        client_id=f"dartfl-replay-{uuid.uuid4().hex[:8]}",
        on_message=on_message,
        subscriptions=[(reply_topic, 1), (protocol.telemetry_topic(device), 1)],
        security=security,
    )
    try:
        # 1. Pick each request's image up front so sending is only encode + publish.
        picks: list[int] = [0] * n
        truth = np.full(n, -1)
        per_task = {name: 0 for name in arrivals.task_names}
        tasks = arrivals.tasks.tolist()
        for i, k in enumerate(tasks):
            name = arrivals.task_names[k]
            _, labels = images[name]
            j = per_task[name] % len(labels)
            per_task[name] += 1
            picks[i] = j
            truth[i] = labels[j]
        first_telemetry = _await_telemetry(inbox, timeout_s=5.0, newer_than=len(inbox.telemetry))
        # 2. Send at wall-clock pace.
        times = arrivals.times_s.tolist()
        sent = np.full(n, np.nan)
        t0[0] = time.monotonic()
        for i in range(n):
            delay = t0[0] + times[i] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            name = arrivals.task_names[tasks[i]]
            payload = protocol.encode_request(
                request_id=str(i), reply_to=reply_topic, image=images[name][0][picks[i]], sent_at=time.time()
            )
            sent[i] = time.monotonic() - t0[0]
            link.publish(protocol.request_topic(device, name), payload, qos=1)
            if on_progress is not None and i % 256 == 0:
                on_progress(i, n)
        # 3. The training window closes with the first snapshot after the last request, so
        #    training while stragglers are awaited does not count; then wait for them.
        last_telemetry = _await_telemetry(inbox, timeout_s=5.0, newer_than=len(inbox.telemetry))
        inbox.all_done.wait(max(settle_s, 4 * slo_s))
    finally:
        link.close()
    return _outcome(arrivals, sent, inbox, truth, profile, policy, slo_s, first_telemetry, last_telemetry)


def _await_telemetry(inbox: _Inbox, timeout_s: float, newer_than: int = 0) -> Telemetry | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(inbox.telemetry) > newer_than:
            return inbox.telemetry[-1]
        time.sleep(0.05)
    return inbox.telemetry[-1] if inbox.telemetry else None


def _outcome(
    arrivals: Arrivals,
    sent: np.ndarray,
    inbox: _Inbox,
    truth: np.ndarray,
    profile: DeviceProfile,
    policy: str,
    slo_s: float,
    first: Telemetry | None,
    last: Telemetry | None,
) -> ReplayOutcome:
    status = np.array([s or "" for s in inbox.status])
    ok = status == "ok"
    finish = np.where(ok, inbox.finish_s, np.nan)
    names = arrivals.task_names
    trained = [0] * len(names)
    training_busy = 0.0
    horizon = arrivals.duration_s
    if first is not None and last is not None:
        horizon = last.t - first.t  # the window the training counts cover
        before, after = first.train_samples_per_task, last.train_samples_per_task
        trained = [after.get(t, 0) - before.get(t, 0) for t in names]
        training_busy = (last.training_busy_s or 0.0) - (first.training_busy_s or 0.0)
    # The fluid limit of the device the agent reported, on all its cores (dartfl.fluid).
    fluid = fluid_terms(profile, names, arrivals.counts_per_task().tolist())
    record = RunRecord(
        policy=policy,
        task_names=names,
        slo_s=(slo_s,) * len(names),
        horizon_s=horizon,
        arrival_s=sent,
        finish_s=finish,
        tasks=arrivals.tasks,
        rejected=status == "rejected",
        trained_per_task=tuple(trained),
        training_busy_s=training_busy,
        inference_min_s=fluid.inference_min_s,
        cheapest_sample_s=fluid.cheapest_sample_s,
        max_backlog=0,
        decision_us=np.zeros(0),
        fluid_units=fluid.units,
        offload_per_s=fluid.offload_per_s,
        offload_saves_s=fluid.offload_saves_s,
        cores=profile.cores.count,
    )
    summary = summarize(record)
    errors = int((status == "error").sum())
    summary["replies"] = int((status != "").sum())
    summary["errors"] = errors
    summary["lost"] = int((status == "").sum())
    summary["accuracy"] = float((inbox.labels[ok] == truth[ok]).mean()) if ok.any() else None
    if last is not None:
        summary["agent_decision_us_p50"] = last.decision_us_p50
        summary["max_backlog"] = None  # the requester cannot see the device's queue

        # Everything the process spent besides inference and training compute is the
        # agent's own overhead: allocator, queueing, MQTT (paho's thread included), telemetry.
        def delta(key: str) -> float:
            before = getattr(first, key) if first is not None else None
            return float(getattr(last, key) or 0.0) - float(before or 0.0)

        cpu = delta("process_cpu_s")
        summary["agent_overhead_cpu_fraction"] = (cpu - delta("compute_cpu_s")) / cpu if cpu > 0 else None
    return ReplayOutcome(summary, record, last)
