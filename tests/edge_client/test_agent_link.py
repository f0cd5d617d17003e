"""The agent's MQTT connection: MQTT 5 where the broker speaks it, 3.1.1 only where it refuses 5."""

from __future__ import annotations

import paho.mqtt.client as paho
import pytest

from edge_client.agent_config import AgentConfig
from edge_client.agent_link import open_agent_link
from messaging.brokers import start_embedded_broker, start_mosquitto

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
    with start_embedded_broker() as amqtt:  # refuses an MQTT 5 CONNECT
        assert _version(amqtt.url) == paho.MQTTv311


def test_a_fallback_to_3_1_1_is_said_out_loud(caplog: pytest.LogCaptureFixture) -> None:
    # MQTT 5 requesters get no replies from a 3.1.1 agent: the downgrade must not be silent.
    with start_embedded_broker() as amqtt:
        _version(amqtt.url)
    assert "using MQTT 3.1.1, so requests must carry reply_to" in caplog.text
