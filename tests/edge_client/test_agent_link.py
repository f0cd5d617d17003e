"""The agent's MQTT connection: MQTT 5 where the broker speaks it, 3.1.1 only where it refuses 5
(an older broker, played by tests.messaging.mqtt_fixtures.mqtt311_only_peer)."""

from __future__ import annotations

import paho.mqtt.client as paho
import pytest

from edge_client.agent_config import AgentConfig
from edge_client.agent_link import open_agent_link
from messaging.brokers import start_mosquitto
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
