"""paho's client with its per-packet costs cut (messaging.lean_client, messaging.publish_decoder):
the quick PUBLISH decoder agrees with paho's on every packet it accepts and hands every other
one to paho; queued packets leave joined, in order, without packets whose writing paho must
see one by one; and over a real broker, a burst arrives whole, in order, with its properties, and is
acknowledged."""

from __future__ import annotations

import queue
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from paho.mqtt import _packet
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from messaging.brokers import BrokerHandle
from messaging.buffered_socket import raw_socket
from messaging.lean_client import LeanClient, join_queued
from messaging.link import MQTT_V5, MQTT_V311, Message, connect
from messaging.publish_decoder import decode_publish
from tests.messaging import mqtt_fixtures as fx

if TYPE_CHECKING:
    from paho.mqtt.client import _OutPacket


def _publish(topic: bytes, qos: int, props: bytes, payload: bytes, mid: int = 7) -> tuple[int, bytes]:
    """A PUBLISH's first header byte and its remainder, as they arrive from a broker."""
    body = struct.pack("!H", len(topic)) + topic + (struct.pack("!H", mid) if qos else b"") + props + payload
    return 0x30 | (qos << 1), body


def _props(**values: Any) -> bytes:
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(props, name, value)
    return bytes(props.pack())  # type: ignore[no-untyped-call]


ACCEPTED = {
    "no properties": (1, _props()),
    "content type only": (1, _props(ContentType="application/vnd.dartfl.request+binary; v=1")),
    "request properties": (
        1,
        _props(
            ContentType="application/json",
            ResponseTopic="dartfl/v1/_reply/r-1",
            CorrelationData=b"\x00\xffid",
        ),
    ),
    "every single-valued one": (
        0,
        _props(PayloadFormatIndicator=1, MessageExpiryInterval=70_000, TopicAlias=3, ContentType="a/b"),
    ),
}


@pytest.mark.parametrize("qos_props", ACCEPTED.values(), ids=ACCEPTED.keys())
@pytest.mark.parametrize("payload", [b"", b"{}", bytes(range(256)) * 4])
def test_what_the_quick_decoder_accepts_it_reads_as_paho_does(
    qos_props: tuple[int, bytes], payload: bytes
) -> None:
    qos, props = qos_props
    header, body = _publish(b"dartfl/v1/dev-1/req/digits", qos, props, payload)
    ours = decode_publish(header, bytearray(body))  # paho hands over a bytearray
    paho = _packet.decode_publish(header, bytearray(body), MQTTProtocolVersion.MQTTv5)
    assert ours is not None and paho.properties is not None
    assert (ours.topic, ours.mid, ours.payload) == (paho.topic, paho.mid, paho.payload)
    assert ours.properties.json() == paho.properties.json()  # type: ignore[no-untyped-call]
    assert str(ours.properties) == str(paho.properties)


def test_a_received_properties_object_has_all_that_pahos_constructor_sets() -> None:
    """The decoder fills Properties without running its constructor: a paho that sets more
    state there must fail here, not lose it silently."""
    fresh = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    header, body = _publish(b"t", 1, _props(), b"x")
    decoded = decode_publish(header, bytearray(body))
    assert decoded is not None
    assert vars(decoded.properties) == vars(fresh)


DECLINED = {
    "QoS 2": _publish(b"t", 2, _props(), b"x"),
    "a user property": _publish(b"t", 1, _props(UserProperty=[("k", "v")]), b"x"),
    "a subscription identifier": _publish(b"t", 1, _props(SubscriptionIdentifier=5), b"x"),
    "non-ASCII text": _publish(b"t", 1, _props(ContentType="caf\u00e9"), b"x"),
    "a property list of 128 bytes": _publish(b"t", 1, _props(ContentType="c" * 200), b"x"),
    "a repeated property": _publish(b"t", 1, b"\x08\x03\x00\x01a\x03\x00\x01b", b""),
    "a property PUBLISH may not carry": _publish(b"t", 1, b"\x03\x21\x00\x05", b""),  # receive maximum
    "a null in a string": _publish(b"t", 1, b"\x04\x03\x00\x01\x00", b""),
    "topic alias 0": _publish(b"t", 1, b"\x03\x23\x00\x00", b""),
    "payload format 2": _publish(b"t", 1, b"\x02\x01\x02", b""),
    "a string past the property list": _publish(b"t", 1, b"\x03\x03\x00\x09ab", b""),
    "a property list past the packet": (0x32, b"\x00\x01t\x00\x07\x09"),
    "a topic past the packet": (0x32, b"\x00\x40abc"),
    "no packet identifier": (0x32, b"\x00\x01t\x00"),
}


@pytest.mark.parametrize("packet", DECLINED.values(), ids=DECLINED.keys())
def test_anything_else_is_left_to_paho(packet: tuple[int, bytes]) -> None:
    header, body = packet
    assert decode_publish(header, bytearray(body)) is None


def _queued(command: int, body: bytes, qos: int = 1, pos: int = 0) -> _OutPacket:
    return {"command": command, "mid": 1, "qos": qos, "pos": pos, "to_process": len(body) - pos,
            "packet": body, "info": None}  # fmt: skip


def test_queued_acknowledgements_and_qos1_publishes_leave_as_one_write() -> None:
    acks = [_queued(0x40, bytes([0x40, 2, 0, i])) for i in range(3)]
    partly_sent = _queued(0x32, b"PUBLISH-1", pos=3)
    qos0 = _queued(0x30, b"Q0", qos=0)
    out = deque([partly_sent, *acks, qos0, _queued(0x40, b"\x40\x02\x00\x09")])
    join_queued(out)
    assert len(out) == 3
    joined = out[0]
    assert joined["packet"] == b"LISH-1" + b"".join(a["packet"] for a in acks)
    assert (joined["pos"], joined["to_process"], joined["command"]) == (0, len(joined["packet"]), 0x32)
    assert out[1] is qos0  # its on_publish fires when it is written: it goes alone


@pytest.mark.parametrize(
    "head", [_queued(0x30, b"Q0", qos=0), _queued(0xE0, b"\xe0\x00", qos=0)], ids=["qos0", "disconnect"]
)
def test_a_packet_paho_must_see_written_is_never_joined(head: _OutPacket) -> None:
    out = deque([head, _queued(0x40, b"A"), _queued(0x40, b"B")])
    join_queued(out)
    assert [p["packet"] for p in out] == [head["packet"], b"A", b"B"]


def test_joining_stops_at_the_size_limit_and_keeps_the_order() -> None:
    out = deque(_queued(0x40, bytes([i]) * 10) for i in range(10))
    join_queued(out, limit=35)
    assert [p["to_process"] for p in out] == [30] + [10] * 7
    assert b"".join(p["packet"] for p in out) == b"".join(bytes([i]) * 10 for i in range(10))


@pytest.fixture
def mosquitto() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


@pytest.mark.integration
@pytest.mark.parametrize("version", [MQTT_V5, MQTT_V311])
def test_a_burst_crosses_a_real_broker_whole_in_order_and_acknowledged(
    mosquitto: BrokerHandle, version: str
) -> None:
    got: queue.Queue[Message] = queue.Queue()
    n = 2000
    done = threading.Event()

    def on_message(message: Message) -> None:
        got.put(message)
        if got.qsize() == n:
            done.set()

    subscriptions = [("burst/#", 1)]
    receiver = connect(
        mosquitto.url, "burst-rx", on_message=on_message, subscriptions=subscriptions, protocol=version
    )
    sender = connect(mosquitto.url, "burst-tx", on_message=lambda m: None, protocol=version)
    try:
        assert isinstance(receiver._client, LeanClient)
        sock = raw_socket(receiver._client.socket())
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # the wrapper hid it once
        for i in range(n):  # faster than the receiver reads: its buffer holds many at a time
            assert sender.publish(
                f"burst/{i % 3}", i.to_bytes(4, "big") + bytes(800), qos=1, content_type="application/x-test",
                response_topic=f"burst/reply/{i}", correlation_data=i.to_bytes(4, "big"),
            )  # fmt: skip
        assert done.wait(30), f"{got.qsize()} of {n} messages arrived"
        for i in range(n):
            message = got.get_nowait()
            assert int.from_bytes(message.payload[:4], "big") == i
            if version == MQTT_V5:  # the properties the quick decoder read
                assert message.content_type == "application/x-test"
                assert message.response_topic == f"burst/reply/{i}"
                assert message.correlation_data == i.to_bytes(4, "big")
        # Every QoS 1 publish was acknowledged: the sender's in-flight window is empty again.
        assert sender.flush(10)
        assert not sender._client._out_messages
    finally:
        sender.close()
        receiver.close()
