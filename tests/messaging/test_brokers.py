"""Broker plumbing: URL parsing, and private Mosquitto brokers on loopback that start, answer
MQTT, report why they cannot start, and leave nothing behind when stopped."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from dartfl.errors import ConfigError
from messaging.brokers import (
    BrokerStartError,
    _probe_mqtt,
    find_mosquitto,
    free_port,
    parse_broker_url,
    start_mosquitto,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://127.0.0.1:1883", ("127.0.0.1", 1883)),
        ("mqtt://localhost:41000/", ("localhost", 41000)),
        ("tcp://127.0.0.1:5", ("127.0.0.1", 5)),
        ("mqtt://127.0.0.1", ("127.0.0.1", 1883)),
        ("mqtt://[::1]:1884", ("::1", 1884)),
        ("mqtts://broker.example", ("broker.example", 8883)),
        ("mqtts://127.0.0.1:18883", ("127.0.0.1", 18883)),
    ],
)
def test_parse_broker_url_accepts_mqtt_urls(url: str, expected: tuple[str, int]) -> None:
    assert parse_broker_url(url) == expected


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("127.0.0.1:1883", "must look like"),
        ("ws://127.0.0.1:8883", "scheme"),
        ("http://127.0.0.1:1883", "scheme"),
        ("mqtt://127.0.0.1:99999", "bad port"),
        ("mqtt://127.0.0.1:abc", "bad port"),
        ("mqtt://127.0.0.1:0", "port 0"),
        ("mqtt://:1883", "no host"),
        ("mqtt://127.0.0.1:1883/topic", "no path"),
        ("mqtt://user:pw@127.0.0.1:1883", "credentials"),
    ],
)
def test_parse_broker_url_says_what_is_wrong(url: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        parse_broker_url(url)


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_missing_mosquitto_binary_says_how_to_install_it() -> None:
    with pytest.raises(BrokerStartError, match="apt-get install mosquitto") as missing:
        start_mosquitto(mosquitto="/nonexistent/mosquitto")
    assert "\n" not in str(missing.value)
    with pytest.raises(BrokerStartError, match="not installed"):
        find_mosquitto("no-such-mosquitto-binary")


@pytest.fixture
def occupied_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.integration
def test_broker_serves_mqtt_on_loopback_and_stops_cleanly() -> None:
    with start_mosquitto() as broker:
        assert (broker.host, broker.kind) == ("127.0.0.1", "mosquitto")
        assert broker.url == f"mqtt://127.0.0.1:{broker.port}"
        assert _probe_mqtt(broker.port)
        pid = broker.pid
    assert not _probe_mqtt(broker.port)
    broker.stop()  # idempotent
    assert pid is not None
    with pytest.raises(ProcessLookupError):  # reaped, not a zombie
        os.kill(pid, 0)


@pytest.mark.integration
def test_broker_on_an_explicit_port() -> None:
    port = free_port()
    with start_mosquitto(port) as broker:
        assert broker.port == port and _probe_mqtt(port)


@pytest.mark.integration
def test_mosquitto_on_a_busy_port_fails_with_its_log(occupied_port: int) -> None:
    with pytest.raises(BrokerStartError, match=r"(?s)exited with code.*Address already in use"):
        start_mosquitto(occupied_port)


@pytest.mark.integration
def test_mosquitto_same_port_can_be_reused_after_stop() -> None:
    with start_mosquitto() as first:
        port = first.port
    with start_mosquitto(port) as second:
        assert _probe_mqtt(second.port)


@pytest.mark.integration
def test_mosquitto_refuses_a_publish_larger_than_its_packet_limit() -> None:
    # A 60 MB publish reached the agent whole (+123 MiB RSS) before it was judged oversized.
    import queue

    from messaging.brokers import MAX_PACKET_BYTES
    from messaging.link import connect

    got: queue.Queue[int] = queue.Queue()
    with (
        start_mosquitto() as broker,
        connect(broker.url, "sink", on_message=lambda m: got.put(len(m.payload)), subscriptions=[("t", 1)]),
    ):
        with connect(broker.url, "big", on_message=lambda m: None) as big:
            big.publish("t", b"x" * (MAX_PACKET_BYTES + 1), qos=1)
            big.flush(timeout=5.0)
        with connect(broker.url, "small", on_message=lambda m: None) as small:
            small.publish("t", b"y" * 1000, qos=1)
            assert small.flush(timeout=5.0)
        assert got.get(timeout=5.0) == 1000  # only the small one came through
        assert got.empty()
