"""The load generator: replays a workload against a device agent at wall-clock pace over MQTT.

Every request carries a real test image of its task, in the binary form by default (the JSON
one with `payload="json"`). Every reply is matched by its request id, and the metrics are
computed from the requester's side: latency runs from send to receipt, so it includes the
broker round trip. The sender measures how far behind its plan it publishes (`send_lag_s`):
a replay whose sender cannot keep up measures the sender, not the device, and says so.
Training and busy times come from the agent's telemetry over the replay (replay_report.py).

Replies come back on dartfl/v1/_reply/<requester>/<run> (the reply rule, docs/protocol.md),
<requester> being the broker account. Before the workload starts, one probe request must be
answered: a broker that drops the requests or the replies (its ACL) stops the replay at once,
naming the topic, instead of counting every request as lost. (The agent's own counters
include that probe; the replay's figures do not.) Under MQTT 5 a request the broker refuses
stops it too (a PUBACK reason code, messaging.refusals).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dartfl import protocol
from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, DartflError
from dartfl.metrics import RunRecord
from dartfl.protocol import Telemetry
from dartfl.types import DeviceProfile
from fltask.data import TaskData
from messaging.accounts import grant_hint
from messaging.link import MQTT_V311, MqttAclError, MqttLink, connect
from messaging.messages import Message
from messaging.security import MqttSecurity
from messaging.versions import connect_preferring_v5
from orchestration.agent_watch import AgentSighting
from orchestration.replay_report import ReplayReport, Replies, replay_report
from orchestration.resend import RESEND_AFTER_S, Resender

log = logging.getLogger(__name__)

__all__ = ["ReplayOptions", "ReplayOutcome", "profile_of", "replay", "request_images"]

ANONYMOUS_REQUESTER = "replay"  # the requester name on a broker without logins
PROBE_ID = "probe"
PROBE_TIMEOUT_S = 10.0  # at least; four SLOs for a slower device
QUEUE_WAIT_S = 5.0  # how long a request may wait for room in the client's outgoing queue

Payload = Literal["binary", "json"]
# (requests sent, requests in all, seconds behind plan now)
Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay runs. `settle_s`: how long after the last send to wait for replies;
    `grace_s`: how much longer to listen, counting what still comes back as late, not lost;
    `lag_warning_s`: a p99 send lag past it gets a warning (default: a tenth of the SLO)."""

    broker_url: str
    device: str
    slo_s: float
    payload: Payload = "binary"
    settle_s: float = 10.0
    grace_s: float = 2.0
    lag_warning_s: float | None = None
    security: MqttSecurity | None = None
    mqtt5: bool = True  # try MQTT 5 first (False: a broker known to speak 3.1.1 only)


@dataclass(frozen=True)
class ReplayOutcome:
    """`telemetry`: every snapshot the replay received, in order; `duplicate_replies`: replies
    to a request already answered (QoS 1 may deliver one twice; each counts once)."""

    report: ReplayReport
    record: RunRecord
    last_telemetry: Telemetry | None
    telemetry: tuple[Telemetry, ...] = ()
    duplicate_replies: int = 0
    resent: int = 0  # requests sent again, unanswered after a while (orchestration.resend)

    @property
    def summary(self) -> dict[str, Any]:
        return self.report.to_json()


@dataclass
class _Inbox:
    """What came back, keyed by request index; filled by paho's thread."""

    n: int
    status: npt.NDArray[np.str_] = field(init=False)
    finish_s: npt.NDArray[np.float64] = field(init=False)
    labels: npt.NDArray[np.int64] = field(init=False)
    late: npt.NDArray[np.bool_] = field(init=False)
    telemetry: list[Telemetry] = field(default_factory=list)
    answered: int = 0
    duplicates: int = 0
    waiting_over: bool = False  # replies from now on are late
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.status = np.full(self.n, "", dtype="<U8")
        self.finish_s = np.full(self.n, np.nan)
        self.labels = np.full(self.n, -1, dtype=np.int64)
        self.late = np.zeros(self.n, dtype=bool)

    def reply(self, index: int, reply: protocol.Reply, at_s: float) -> None:
        with self.lock:
            if not 0 <= index < self.n:
                return  # an id we never sent
            if self.status[index]:  # QoS 1 may deliver a reply twice
                self.duplicates += 1
                return
            self.status[index] = reply.status
            self.finish_s[index] = at_s
            self.late[index] = self.waiting_over
            if reply.label is not None:
                self.labels[index] = reply.label
            self.answered += 1
            if self.answered == self.n:
                self.all_done.set()

    def unanswered(self) -> npt.NDArray[np.bool_]:
        with self.lock:
            mask: npt.NDArray[np.bool_] = self.status == ""
        return mask

    def replies(self) -> Replies:
        with self.lock:
            return Replies(self.status.copy(), self.finish_s.copy(), self.labels.copy(), self.late.copy())


def request_images(task: TaskData) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A task's test images as a replay sends them, 8-bit pixels (the wire's format), and
    their labels."""
    return np.round(task.x_test[:, 0] * 255).astype(np.uint8), task.y_test


def profile_of(sighting: AgentSighting) -> DeviceProfile:
    """The cost profile an agent publishes (in its status message and its telemetry)."""
    if sighting.profile is None:
        raise DartflError(
            f"device {sighting.device!r} publishes no cost profile in its status; pass --profile-file"
        )
    return sighting.profile


def replay(
    arrivals: Arrivals,
    options: ReplayOptions,
    images: Mapping[str, tuple[np.ndarray, np.ndarray]],
    profile: DeviceProfile,
    policy: str,
    on_progress: Progress | None = None,
) -> ReplayOutcome:
    """Send `arrivals` to the device at their times; `images[task]` = (uint8 images, labels)."""
    n = arrivals.num_requests
    inbox = _Inbox(n)
    reply_topic = _reply_topic(options.security)
    telemetry_topic = protocol.telemetry_topic(options.device)
    probe_answered = threading.Event()
    t0 = [time.monotonic()]

    def on_message(message: Message) -> None:
        at = time.monotonic() - t0[0]
        if message.topic == telemetry_topic:
            try:
                inbox.telemetry.append(protocol.decode_telemetry(message.payload, message.topic))
            except DartflError as exc:
                log.warning("unreadable telemetry from %s: %s", options.device, exc)
            return
        try:
            replies = protocol.decode_any_replies(message.payload, message.content_type)
            answered = [(reply.id, reply) for reply in replies]
        except DartflError:
            log.warning("unreadable reply on %s", message.topic)
            return
        for ident, reply in answered:
            if ident == PROBE_ID:
                probe_answered.set()
            elif ident is not None and ident.isdigit():
                inbox.reply(int(ident), reply, at)

    def link_of(version: str) -> MqttLink:
        return connect(
            options.broker_url,
            client_id=f"dartfl-replay-{uuid.uuid4().hex[:8]}",
            on_message=on_message,
            subscriptions=[(reply_topic, protocol.REPLY_QOS), (telemetry_topic, protocol.TELEMETRY_QOS)],
            protocol=version,
            security=options.security,
        )

    lost = "requests the broker refuses are noticed by the probe only"
    link = connect_preferring_v5(link_of, options.broker_url, lost) if options.mqtt5 else link_of(MQTT_V311)
    try:
        truth, encode = _requests(arrivals, images, reply_topic, options.payload)
        if n:
            _probe(link, options, encode, probe_answered)
        _await_telemetry(inbox, 5.0)  # the window opens with a snapshot before the first request
        sent = np.full(n, np.nan)
        resender = Resender(
            link,
            lambda i: _topic_and_body(options.device, encode, i),
            sent,
            inbox.unanswered,
            lambda: time.monotonic() - t0[0],
            max(RESEND_AFTER_S, 4 * options.slo_s),
        )
        resender.start()
        try:
            lag = _send(link, arrivals, options, encode, t0, on_progress, sent)
            _await_telemetry(inbox, 5.0)  # and closes with the first one after the last request
            inbox.all_done.wait(max(options.settle_s, 4 * options.slo_s))
            with inbox.lock:
                inbox.waiting_over = True
            if not inbox.all_done.is_set():
                inbox.all_done.wait(options.grace_s)
        finally:
            resender.stop()
    finally:
        link.close()
    _warn_about_lag(lag, options)
    replies = inbox.replies()
    snapshots = list(inbox.telemetry)
    report, record = replay_report(
        arrivals, sent, lag, replies, truth, profile, policy, options.slo_s, snapshots, options.payload
    )
    last = snapshots[-1] if snapshots else None
    return ReplayOutcome(report, record, last, tuple(snapshots), inbox.duplicates, resender.resent)


# (request index, its id on the wire or None: the index) -> (task, payload, content type)
Encoder = Callable[[int, str | None], tuple[str, bytes, str | None]]


def _requests(
    arrivals: Arrivals,
    images: Mapping[str, tuple[np.ndarray, np.ndarray]],
    reply_topic: str,
    payload: Payload,
) -> tuple[npt.NDArray[np.int64], Encoder]:
    """Each request's true label, and how to encode request i (topic, payload, content type):
    images are picked up front, so the send loop only encodes and publishes."""
    n = arrivals.num_requests
    names = arrivals.task_names
    tasks = arrivals.tasks.tolist()
    picks = [0] * n
    truth = np.full(n, -1, dtype=np.int64)
    used = dict.fromkeys(names, 0)
    for i, k in enumerate(tasks):
        labels = images[names[k]][1]
        picks[i] = used[names[k]] % len(labels)
        used[names[k]] += 1
        truth[i] = labels[picks[i]]

    def encode(i: int, ident: str | None = None) -> tuple[str, bytes, str | None]:
        name = names[tasks[i]]
        image = images[name][0][picks[i]]
        ident = str(i) if ident is None else ident
        if payload == "binary":
            body = protocol.encode_binary_request(ident, image, reply_topic, sent_at=time.time())
            return name, body, protocol.REQUEST_CONTENT_TYPE
        return name, protocol.encode_request(ident, image, reply_topic, sent_at=time.time()), None

    return truth, encode


def _send(
    link: MqttLink,
    arrivals: Arrivals,
    options: ReplayOptions,
    encode: Encoder,
    t0: list[float],
    on_progress: Progress | None,
    sent: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Publish every request at its planned time, noting when in `sent`; returns the lag
    behind plan, seconds. A request the client could not queue (its outgoing queue full)
    keeps a NaN send time."""
    times = arrivals.times_s.tolist()
    n = len(times)
    lag = np.zeros(n)
    topics = {name: protocol.request_topic(options.device, name) for name in arrivals.task_names}
    next_report = 0.0
    t0[0] = start = time.monotonic()
    for i in range(n):
        delay = start + times[i] - time.monotonic()
        if delay > 0.0005:  # sleeping less than that costs more than it waits
            time.sleep(delay)
        name, body, content_type = encode(i, None)
        if _publish_waiting(link, topics[name], body, content_type):
            now = time.monotonic() - start
            sent[i] = now
        else:
            now = time.monotonic() - start
        lag[i] = max(0.0, now - times[i])
        _stop_if_refused(link)
        if on_progress is not None and now >= next_report:
            on_progress(i + 1, n, lag[i])
            next_report = now + 1.0
    if on_progress is not None:
        on_progress(n, n, float(lag[-1]) if n else 0.0)
    return lag


def _topic_and_body(device: str, encode: Encoder, i: int) -> tuple[str, bytes, str | None]:
    name, body, content_type = encode(i, None)
    return protocol.request_topic(device, name), body, content_type


def _publish_waiting(link: MqttLink, topic: str, body: bytes, content_type: str | None) -> bool:
    """Publish, waiting (up to QUEUE_WAIT_S) while the client's outgoing queue is full: the
    broker or the network is behind, and a request dropped here would be lost without trace.
    The wait shows up as send lag. False if it never went out."""
    deadline = time.monotonic() + QUEUE_WAIT_S
    while not link.publish(topic, body, qos=protocol.REQUEST_QOS, content_type=content_type):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def _reply_topic(security: MqttSecurity | None) -> str:
    """This run's reply topic: under the requester's account, a private level per run."""
    requester = (security.username if security is not None else None) or ANONYMOUS_REQUESTER
    try:
        return protocol.reply_topic(requester, uuid.uuid4().hex[:12])
    except ConfigError as exc:
        raise ConfigError(
            f"--mqtt-username {requester!r} cannot name a requester (its replies come back on "
            f"{protocol.REPLY_ROOT}/<account>/...): {exc}"
        ) from None


def _stop_if_refused(link: MqttLink) -> None:
    if link.refusal is not None:
        raise MqttAclError(f"replay: {link.refusal}")


def _probe(link: MqttLink, options: ReplayOptions, encode: Encoder, answered: threading.Event) -> None:
    """One request that must be answered before the workload starts (the first request's
    image, under the probe's id): silence here means the broker drops the requests or the
    replies (or the agent is not serving)."""
    name, body, content_type = encode(0, PROBE_ID)
    request = protocol.request_topic(options.device, name)
    link.publish(request, body, qos=protocol.REQUEST_QOS, content_type=content_type)
    timeout_s = max(PROBE_TIMEOUT_S, 4 * options.slo_s)  # a slow device answers within its SLO
    deadline = time.monotonic() + timeout_s
    while not answered.wait(0.05):
        _stop_if_refused(link)
        if time.monotonic() >= deadline:
            account = options.security.username if options.security is not None else None
            reply_topic = _reply_topic_of(body, content_type)
            raise DartflError(
                f"no reply on {reply_topic} to a probe request on {request} within "
                f"{timeout_s:.0f} s: the agent is not serving, or the broker drops the request "
                f"or the reply without a word ({grant_hint('write', request, account)}; "
                f"{grant_hint('read', reply_topic, account)}; the device's account must write replies)"
            )
    _stop_if_refused(link)


def _reply_topic_of(body: bytes, content_type: str | None) -> str:
    """The reply topic a request of ours names (for an error message)."""
    return protocol.decode_request(body, "probe", {"probe"}, content_type=content_type).reply_to


def _await_telemetry(inbox: _Inbox, timeout_s: float) -> None:
    """Wait for the next telemetry snapshot (or give up after `timeout_s`)."""
    seen = len(inbox.telemetry)
    deadline = time.monotonic() + timeout_s
    while len(inbox.telemetry) == seen and time.monotonic() < deadline:
        time.sleep(0.05)


def _warn_about_lag(lag: npt.NDArray[np.float64], options: ReplayOptions) -> None:
    if not lag.size:
        return
    limit = options.lag_warning_s if options.lag_warning_s is not None else 0.1 * options.slo_s
    p99 = float(np.percentile(lag, 99))
    if p99 > limit:
        log.warning(
            "the replayer fell behind its plan: p99 send lag %.1f ms (max %.1f ms) against %.1f ms allowed; "
            "the latencies measure the sender too (run it on a core of its own, or replay less load)",
            p99 * 1e3,
            float(lag.max()) * 1e3,
            limit * 1e3,
        )
