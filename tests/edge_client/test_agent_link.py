"""The agent's MQTT connection: MQTT 5 where the broker speaks it, 3.1.1 only where it refuses 5
(an older broker, played by tests.messaging.mqtt_fixtures.mqtt311_only_peer); a broker that is
not up yet is waited for, TLS and login failures are not."""

from __future__ import annotations

import logging
import threading
import time

import paho.mqtt.client as paho
import pytest

from edge_client.agent_config import AgentConfig
from edge_client.agent_link import open_agent_link
from messaging.brokers import BrokerHandle, free_port, start_mosquitto
from messaging.errors import MqttSecurityError, MqttWaitStoppedError
from messaging.security import MqttSecurity
from tests.messaging import tls_fixtures as tls
from tests.messaging.mqtt_fixtures import mqtt311_only_peer

pytestmark = pytest.mark.integration


def _version(broker_url: str) -> int:
    link, _, _ = open_agent_link(AgentConfig(device_id="link-test", broker_url=broker_url), lambda m: None)
    try:
        return int(link._protocol)
    finally:
        link.close()


def test_mqtt_5_where_the_broker_speaks_it_and_3_1_1_where_it_refuses_5() -> None:
    with start_mosquitto() as mosquitto:
        assert _version(mosquitto.url) == paho.MQTTv5
    with mqtt311_only_peer() as old_broker:  # refuses an MQTT 5 CONNECT
        assert _version(old_broker) == paho.MQTTv311


def test_a_fallback_to_3_1_1_is_said_out_loud(caplog: pytest.LogCaptureFixture) -> None:
    # MQTT 5 requesters get no replies from a 3.1.1 agent: the downgrade must not be silent.
    with mqtt311_only_peer() as old_broker:
        _version(old_broker)
    assert "using MQTT 3.1.1, so requests must carry reply_to" in caplog.text


def test_the_agent_client_id_is_its_account_when_logged_in_and_a_foreign_account_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The shipped broker renames a logged-in client after its account (so nobody else can take
    # over the id); the agent's own id must agree, or broker logs and takeovers would differ.
    from messaging.security import MqttSecurity

    with start_mosquitto() as mosquitto:  # anonymous, takes any user name
        for login, expected in [(None, "dartfl-agent-pi-7"), ("pi-7", "pi-7"), ("someone", "someone")]:
            security = MqttSecurity(username=login) if login else None
            config = AgentConfig(device_id="pi-7", broker_url=mosquitto.url, mqtt_security=security)
            link, _, _ = open_agent_link(config, lambda m: None)
            try:
                assert link._client._client_id.decode() == expected
            finally:
                link.close()
    warnings = [r.getMessage() for r in caplog.records if "logging in as" in r.getMessage()]
    assert len(warnings) == 1 and "'someone' for device 'pi-7'" in warnings[0]


def _agent_config(url: str, **overrides: object) -> AgentConfig:
    return AgentConfig(device_id="waiting", broker_url=url, **overrides)  # type: ignore[arg-type]


def test_an_agent_started_before_its_broker_waits_for_it_and_keeps_mqtt_5(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It gave up after 5 s per version, and on a plain "connection refused" fell back to
    # MQTT 3.1.1 for good. The broker comes up after the 5 s the old wait allowed.
    port = free_port()
    brokers: list[BrokerHandle] = []
    later = threading.Timer(7.0, lambda: brokers.append(start_mosquitto(port)))
    later.start()
    try:
        with caplog.at_level(logging.WARNING):
            link, _, _ = open_agent_link(_agent_config(f"mqtt://127.0.0.1:{port}"), lambda m: None)
        try:
            assert int(link._protocol) == paho.MQTTv5
        finally:
            link.close()
    finally:
        later.join()
        for broker in brokers:
            broker.stop()
    waits = [r.getMessage() for r in caplog.records if "not reachable yet" in r.getMessage()]
    assert len(waits) == 1 and "Connection refused" in waits[0]  # said once, with the reason
    assert "MQTT 3.1.1" not in caplog.text


def test_a_stop_ends_the_wait_for_a_broker_at_once() -> None:
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    started = time.monotonic()
    with pytest.raises(MqttWaitStoppedError, match="stopped while waiting for the broker"):
        open_agent_link(_agent_config(f"mqtt://127.0.0.1:{free_port()}"), lambda m: None, stop)
    assert time.monotonic() - started < 5


def test_tls_and_login_failures_still_end_the_wait_at_once(
    strict_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    # Waiting cannot cure them: an agent that waited forever on them would hide the cause.
    assert strict_broker.tls_url is not None
    cases = [
        (MqttSecurity(tls_files.other_ca), "wrong CA"),
        (tls.client_login(tls_files, "nope"), "Not authorized"),
    ]
    for security, problem in cases:
        started = time.monotonic()
        with pytest.raises(MqttSecurityError, match=problem):
            open_agent_link(_agent_config(strict_broker.tls_url, mqtt_security=security), lambda m: None)
        assert time.monotonic() - started < 15


@pytest.mark.parametrize("on_v5", ["refuse", "silent", "close"])
def test_each_way_an_older_broker_turns_down_mqtt_5_falls_back_to_3_1_1(on_v5: str) -> None:
    # A CONNACK refusal, silence (amqtt with a will), or a close before any CONNACK; a broker
    # that is not up is none of these and is waited for.
    with mqtt311_only_peer(on_v5) as url:
        assert _version(url) == paho.MQTTv311
