"""Two clients with one client id (two agents with one --device on an anonymous broker) take
the connection from each other: said once a minute, naming the client id, not blamed on the
network. The bookkeeping with given times; then two real links on a real Mosquitto."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from messaging.brokers import BrokerHandle
from messaging.client_id_clash import CLASH_SAID_EVERY_S, SHORT_CONNECTION_S, ClientIdClash
from messaging.link import MQTT_V5, connect
from tests.messaging import mqtt_fixtures as fx


def _cycles(clash: ClientIdClash, start: float, count: int, up_s: float = 2.0) -> list[str | None]:
    """`count` connections, each closed `up_s` after it was accepted, one second apart."""
    said = []
    t = start
    for _ in range(count):
        clash.connected(t)
        said.append(clash.closed(t + up_s))
        t += up_s + 1.0
    return said


def test_connections_closed_again_and_again_soon_after_connecting_are_a_clash_said_once_a_minute() -> None:
    clash = ClientIdClash("dartfl-agent-dev5")
    said = _cycles(clash, 0.0, 3 + 30)  # 99 s of a fight, a drop every 3 s
    assert said[:2] == [None, None]  # the first drops are logged as drops
    lines = [s for s in said if s]
    assert len(lines) == 2  # at 8 s and once more a minute later
    assert all(s == "" for s in said[2:] if not s)  # the rest are explained: nothing logged
    assert "'dartfl-agent-dev5'" in lines[0] and "same --device" in lines[0]
    assert "network" not in lines[0] and lines[0].startswith("the broker closed this connection 3 times")
    assert lines[1].startswith(f"the broker closed this connection {int(CLASH_SAID_EVERY_S // 3)} times")


def test_drops_of_connections_that_lasted_or_never_came_up_are_no_clash() -> None:
    clash = ClientIdClash("c")
    assert _cycles(clash, 0.0, 5, up_s=SHORT_CONNECTION_S + 1.0) == [None] * 5
    for _ in range(5):  # closed before the broker accepted them: the network's or the broker's
        assert clash.closed(100.0) is None
    _cycles(clash, 200.0, 4)
    assert clash.suspected
    assert _cycles(clash, 300.0, 1, up_s=SHORT_CONNECTION_S + 1.0) == [None]  # peace again
    assert not clash.suspected


@pytest.fixture
def broker() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


@pytest.mark.integration
def test_two_links_with_one_client_id_are_told_apart_from_a_failing_network(
    broker: BrokerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="messaging"):
        first = connect(broker.url, "dartfl-agent-twin", on_message=lambda _m: None, protocol=MQTT_V5)
        second = connect(broker.url, "dartfl-agent-twin", on_message=lambda _m: None, protocol=MQTT_V5)
        try:
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and not any(
                "same client id" in r.getMessage() for r in caplog.records
            ):
                time.sleep(0.2)
        finally:
            second.close()
            first.close()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("'dartfl-agent-twin'" in e and "same --device" in e for e in errors), errors
    assert not any("network failing" in e for e in errors), errors
