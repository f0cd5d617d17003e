"""Request/reply through a real broker (Mosquitto, MQTT 3.1.1 and 5) with paho: an echo
device speaking edge_client.protocol answers a requester; error replies, MQTT 5 properties,
the last will, and reconnect after a broker restart."""

from __future__ import annotations

import json
import queue
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from dartfl import protocol
from messaging.brokers import BrokerHandle, free_port, start_mosquitto
from messaging.link import MQTT_V5, MQTT_V311, Message, MqttConnectError, Will, connect
from tests.messaging import mqtt_fixtures as fx

pytestmark = pytest.mark.integration

TASKS = ("mnist", "fashion", "digits")
STARTERS = {"mosquitto": start_mosquitto}
# A device process that announces itself online with an offline last will, then dies
# without a DISCONNECT: the broker must publish the will.
CRASHING_DEVICE = """
import os, sys
from dartfl import protocol
from messaging.link import Will, connect
url, name = sys.argv[1], sys.argv[2]
online, offline = protocol.DeviceStatus(name, True, 1.0), protocol.DeviceStatus(name, False)
will = Will(protocol.status_topic(name), protocol.encode_status(offline))
link = connect(url, "dev-" + name, on_message=lambda m: None, will=will)
link.publish(protocol.status_topic(name), protocol.encode_status(online), retain=True)
sys.stdin.readline()
os._exit(1)
"""
ROUND_TRIPS = 300


@pytest.fixture
def mosquitto() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


@pytest.fixture(params=["mosquitto-3.1.1", "mosquitto-5"])
def plane(request: pytest.FixtureRequest) -> Iterator[tuple[BrokerHandle, str]]:
    """(broker, MQTT protocol version) for every supported combination."""
    kind, version = request.param.split("-")
    with STARTERS[kind]() as broker:
        yield broker, version


@pytest.fixture
def echo_pair(plane: tuple[BrokerHandle, str]) -> Iterator[tuple[fx.EchoDevice, fx.Requester]]:
    broker, version = plane
    device = fx.EchoDevice(broker.url, "pi-01", TASKS, protocol_version=version)
    requester = fx.Requester(broker.url, "tester", protocol_version=version)
    yield device, requester
    requester.close()
    device.close()


def _images(n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, size=(n, 28, 28), dtype=np.uint8)


def test_request_reply_round_trip(
    echo_pair: tuple[fx.EchoDevice, fx.Requester], plane: tuple[BrokerHandle, str]
) -> None:
    _, requester = echo_pair
    rtts = []
    for i, image in enumerate(_images(ROUND_TRIPS)):
        task = TASKS[i % len(TASKS)]
        reply, rtt_s = requester.ask("pi-01", task, image)
        assert (reply.status, reply.task, reply.label) == ("ok", task, fx.expected_label(image))
        assert reply.model_version == "echo-1"
        assert reply.latency_ms is not None and 0 <= reply.latency_ms < rtt_s * 1e3
        rtts.append(rtt_s * 1e3)
    broker, version = plane
    q = statistics.quantiles(rtts, n=100)
    print(  # informational, never asserted (benchmarks belong in benchmarks/)
        f"\nloopback RTT {broker.kind} MQTT {version} QoS 1, {ROUND_TRIPS} requests: "
        f"p50 {q[49]:.3f} ms, p99 {q[98]:.3f} ms, min {min(rtts):.3f} ms"
    )


def test_malformed_requests_get_error_replies(echo_pair: tuple[fx.EchoDevice, fx.Requester]) -> None:
    _, requester = echo_pair
    good = json.loads(protocol.encode_request("bad-1", _images(1)[0], requester.reply_to))
    cases = [
        ("mnist", {**good, "dtype": "float32"}, "bad-dtype"),
        ("mnist", {**good, "shape": [32, 32]}, "bad-shape"),
        ("cifar", good, "unknown-task"),
        ("mnist", {**good, "v": 9}, "unsupported-version"),
    ]
    for task, obj, code in cases:
        requester.send_raw(f"dartfl/v1/pi-01/req/{task}", json.dumps(obj).encode())
        _, msg = requester.wait_reply()
        reply = protocol.decode_reply(msg.payload)
        assert (reply.status, reply.code, reply.id) == ("error", code, "bad-1")
    # Unparsable and without a reply address: nothing comes back, and the device still serves.
    requester.send_raw(protocol.request_topic("pi-01", "mnist"), b"\x00garbage")
    reply, _ = requester.ask("pi-01", "mnist", _images(1)[0])
    assert reply.status == "ok"


def test_mqtt5_response_topic_and_correlation_data(mosquitto: BrokerHandle) -> None:
    device = fx.EchoDevice(mosquitto.url, "pi-05", TASKS, protocol_version=MQTT_V5)
    requester = fx.Requester(mosquitto.url, "v5", protocol_version=MQTT_V5)
    try:
        obj = json.loads(protocol.encode_request("unused", _images(1)[0], requester.reply_to))
        del obj["id"], obj["reply_to"]  # a pure MQTT 5 requester: addressing in properties only
        requester.send_raw(
            protocol.request_topic("pi-05", "digits"),
            json.dumps(obj).encode(),
            response_topic=requester.reply_to,
            correlation_data=b"corr-42",
        )
        _, msg = requester.wait_reply()
        assert msg.correlation_data == b"corr-42"
        reply = protocol.decode_reply(msg.payload)
        assert (reply.status, reply.id, reply.label) == ("ok", "corr-42", fx.expected_label(_images(1)[0]))
        # An unparsable payload is still answered through the properties.
        requester.send_raw(
            protocol.request_topic("pi-05", "digits"),
            b"{oops",
            response_topic=requester.reply_to,
            correlation_data=b"corr-43",
        )
        _, msg = requester.wait_reply()
        reply = protocol.decode_reply(msg.payload)
        assert (msg.correlation_data, reply.code, reply.id) == (b"corr-43", "bad-json", "corr-43")
    finally:
        requester.close()
        device.close()


def test_a_broker_that_refuses_mqtt5_is_named_with_a_hint() -> None:
    with fx.mqtt311_only_peer() as url, pytest.raises(MqttConnectError, match=r"3\.1\.1 only"):
        connect(url, "v5-client", on_message=lambda m: None, protocol=MQTT_V5, timeout=3)


def test_connect_to_nothing_times_out_clearly() -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(MqttConnectError, match="not connected"):
        connect(url, "lonely", on_message=lambda m: None, timeout=0.5)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("kind", sorted(STARTERS))
def test_last_will_fires_on_a_crash_but_not_on_close(kind: str) -> None:
    statuses: queue.Queue[protocol.DeviceStatus] = queue.Queue()
    with (
        STARTERS[kind]() as broker,
        connect(
            broker.url,
            "watcher",
            on_message=lambda m: statuses.put(protocol.decode_status(m.payload)),
            subscriptions=[("dartfl/v1/+/status", protocol.STATUS_QOS)],
        ),
    ):
        # A clean close: the broker discards the will.
        will = Will(
            protocol.status_topic("clean"), protocol.encode_status(protocol.DeviceStatus("clean", False))
        )
        link = connect(broker.url, "dev-clean", on_message=lambda m: None, will=will)
        link.publish(
            protocol.status_topic("clean"),
            protocol.encode_status(protocol.DeviceStatus("clean", True, 1.0)),
            retain=True,
        )
        assert statuses.get(timeout=5) == protocol.DeviceStatus("clean", True, 1.0)
        link.close()
        with pytest.raises(queue.Empty):
            statuses.get(timeout=0.5)
        # A crash: the broker publishes the will.
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_DEVICE, broker.url, "crash"], stdin=subprocess.PIPE
        )
        try:
            assert statuses.get(timeout=15) == protocol.DeviceStatus("crash", True, 1.0)
            proc.communicate(b"die\n", timeout=10)
            assert statuses.get(timeout=5) == protocol.DeviceStatus("crash", False, None)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_link_survives_a_raising_handler_and_a_broker_restart() -> None:
    port = free_port()
    received: queue.Queue[Message] = queue.Queue()

    def handler(msg: Message) -> None:
        if msg.payload == b"boom":
            raise RuntimeError("handler bug")
        received.put(msg)

    broker = start_mosquitto(port)
    link = connect(broker.url, "survivor", on_message=handler, subscriptions=[("t/x", 1)])
    try:
        sender = connect(broker.url, "sender", on_message=lambda m: None)
        sender.publish("t/x", b"boom")
        sender.publish("t/x", b"after-boom")
        assert received.get(timeout=5).payload == b"after-boom"
        sender.close()
        broker.stop()
        deadline = time.monotonic() + 5
        while link.connected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not link.connected
        broker = start_mosquitto(port)
        deadline = time.monotonic() + 15
        while not link.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert link.connected, "paho did not reconnect after the broker came back"
        sender = connect(broker.url, "sender", on_message=lambda m: None)
        deadline = time.monotonic() + 5
        while received.empty() and time.monotonic() < deadline:  # the re-subscribe may still be in flight
            sender.publish("t/x", b"after-restart")
            time.sleep(0.1)
        assert received.get(timeout=1).payload == b"after-restart"
        sender.close()
    finally:
        link.close()
        broker.stop()


def test_runtime_subscribe_waits_for_the_broker(mosquitto: BrokerHandle) -> None:
    got: queue.Queue[Message] = queue.Queue()
    with connect(mosquitto.url, "late", on_message=got.put, protocol=MQTT_V311) as link:
        link.subscribe("late/topic", 1)
        with connect(mosquitto.url, "pub", on_message=lambda m: None) as pub:
            assert pub.publish("late/topic", b"hi", 1)
        msg = got.get(timeout=5)
        assert (msg.topic, msg.payload, msg.qos, msg.retain) == ("late/topic", b"hi", 1, False)
