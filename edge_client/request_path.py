"""What a request costs the agent besides the model (docs/profiles.md, "The request path").

Measured on the agent's own code path, not estimated: the ingress work (decoding a real
request payload, building its queued form, admitting it into a device executor under a lock)
the egress work (encoding the reply and publishing it at QoS 1 on the agent's broker
connection, the network thread's share and the acknowledgement included), and receiving the
request off the network (paho parsing and acknowledging it). All are CPU time,
which is what they take from a device's cores. A running agent keeps measuring the same
things online (`ProfiledCosts`); these figures are the prior it starts from and what
`dartfl edge profile` writes as `[request-path]`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence

import numpy as np

from dartfl import protocol
from dartfl.errors import DartflError
from dartfl.executor import Admission, DeviceExecutor, RoundClock
from dartfl.policies import make_policy
from dartfl.types import DeviceProfile, RequestPathCost, TaskSpec
from edge_client.agent_ingress import QueuedRequest, admit_request
from edge_client.telemetry import RequestStats
from edge_client.transit import TransitClock
from messaging.link import Message, MqttLink, connect

__all__ = ["ingress_cost_s", "measure_request_path", "publish_cost_s", "receive_cost_s"]

IMAGE = np.arange(28 * 28, dtype=np.uint8).reshape(28, 28)
INGRESS_REPS = 400
PUBLISH_REPS = 200


def ingress_cost_s(profile: DeviceProfile, tasks: Sequence[str], reps: int = INGRESS_REPS) -> float:
    """CPU seconds to decode and admit one request (the dearer, JSON form) on this device."""
    specs = [TaskSpec(name, 1.0, reps + 1) for name in tasks]
    device: DeviceExecutor[QueuedRequest] = DeviceExecutor(
        specs, make_policy("inference-only"), profile, RoundClock(60.0, 0)
    )
    lock = threading.Condition()

    def admit(received_s: float, task: int, request: QueuedRequest, waited_s: float) -> Admission:
        with lock:
            outcome = device.admit(received_s, task, request, waited_s)
            lock.notify()
            return outcome

    task_index = {name: i for i, name in enumerate(tasks)}
    topic = protocol.request_topic("calibration", tasks[0])
    reply = protocol.reply_topic("calibration")
    messages = [
        Message(topic, protocol.encode_request(f"c{i}", IMAGE, reply, sent_at=time.time()), 1, False)
        for i in range(reps)
    ]
    stats, transit = RequestStats(), TransitClock()
    started = time.thread_time()
    for message in messages:
        admit_request(
            message, task_index, protocol.MAX_REQUEST_BYTES, admit, stats, lambda *_: None, transit=transit
        )
    return (time.thread_time() - started) / reps


def publish_cost_s(link: MqttLink, reps: int = PUBLISH_REPS) -> float:
    """CPU seconds (this process, every thread) to encode and publish one reply at QoS 1 and
    have the broker acknowledge it. The replies go to a reply topic nobody reads."""
    topic = f"{protocol.reply_topic('calibration')}/{uuid.uuid4().hex[:8]}"
    link.flush(timeout=5.0)
    started = time.process_time()
    for i in range(reps):
        payload, content_type = protocol.answer(False, f"c{i}", "calibration", 1, 1.0, 1)
        link.publish(topic, payload, qos=protocol.REPLY_QOS, content_type=content_type)
    link.flush(timeout=10.0)
    return (time.process_time() - started) / reps


def receive_cost_s(broker_url: str, reps: int = PUBLISH_REPS) -> float:
    """CPU seconds paho's network thread spends receiving one QoS 1 request (parsing it,
    acknowledging it, handing it over), measured between the first and the last of a burst
    that a second connection publishes; the handler itself does nothing."""
    topic = f"{protocol.reply_topic('calibration')}/{uuid.uuid4().hex[:8]}"
    marks: list[float] = []
    done = threading.Event()

    def on_message(_message: Message) -> None:
        marks.append(time.thread_time())  # this is the receiving network thread's own clock
        if len(marks) == reps:
            done.set()

    receiver = connect(
        broker_url,
        f"calibration-rx-{uuid.uuid4().hex[:6]}",
        on_message=on_message,
        subscriptions=[(topic, 1)],
    )
    sender = connect(broker_url, f"calibration-tx-{uuid.uuid4().hex[:6]}", on_message=lambda _m: None)
    try:
        body = protocol.encode_request("c", IMAGE, protocol.reply_topic("calibration"))
        for _ in range(reps):
            sender.publish(topic, body, qos=protocol.REQUEST_QOS)
        if not done.wait(30.0):
            raise DartflError(f"only {len(marks)} of {reps} calibration messages came back from {broker_url}")
    finally:
        sender.close()
        receiver.close()
    return (marks[-1] - marks[0]) / (reps - 1)


def measure_request_path(
    profile: DeviceProfile, tasks: Sequence[str], link: MqttLink, broker_url: str | None = None
) -> RequestPathCost:
    """The request path's cost per request on this device, through `link`'s broker: ingress,
    egress and, with `broker_url` (a broker the measurement may publish on freely), the
    receive. Without it the receive is taken to cost what a publish does (parsing a packet
    and acknowledging it mirrors building one and handling its acknowledgement)."""
    publish = publish_cost_s(link)
    receive = receive_cost_s(broker_url) if broker_url is not None else publish
    return RequestPathCost(receive_s=receive, ingress_s=ingress_cost_s(profile, tasks), egress_s=publish)
