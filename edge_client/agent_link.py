"""The device agent's MQTT side: the connection (request subscription, offline last will, TLS
and login from the agent's config, the embedded broker when no broker is given), and what the
agent publishes on it: replies, telemetry and its retained status."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dartfl import protocol
from dartfl.protocol import DeviceStatus
from edge_client.agent_config import AgentConfig
from messaging.brokers import BrokerHandle, start_embedded_broker
from messaging.link import (
    MQTT_V5,
    MQTT_V311,
    Message,
    MqttConnectError,
    MqttLink,
    MqttSecurityError,
    Will,
    connect,
)

log = logging.getLogger(__name__)

__all__ = ["DeviceLink", "open_agent_link"]


def open_agent_link(
    config: AgentConfig, on_message: Callable[[Message], None]
) -> tuple[MqttLink, BrokerHandle | None, str]:
    """Connect the agent; returns (link, the embedded broker it started or None, broker URL)."""
    broker = None
    url = config.broker_url
    if url is None:
        broker = start_embedded_broker()
        url = broker.url
        log.info("embedded MQTT broker on %s", url)
    device = config.device_id

    def link(version: str) -> MqttLink:
        return connect(
            url,
            client_id=f"dartfl-agent-{device}",
            on_message=on_message,
            subscriptions=[(protocol.request_subscription(device), protocol.REQUEST_QOS)],
            will=Will(
                protocol.status_topic(device), protocol.encode_status(DeviceStatus(device, online=False))
            ),
            protocol=version,
            security=config.mqtt_security,
        )

    try:
        # MQTT 5 lets requesters use Response Topic / Correlation Data; the embedded broker
        # (and older brokers) speak 3.1.1 only, so fall back to it. Not after a TLS or login
        # failure: the protocol version cannot cure a wrong certificate or password. The
        # embedded amqtt broker does not refuse an MQTT 5 CONNECT, it drops the connection,
        # which looks like any other failure; so any other failure falls back, loudly.
        try:
            return link(MQTT_V311 if broker is not None else MQTT_V5), broker, url
        except MqttSecurityError:
            raise
        except MqttConnectError as exc:
            log.warning(
                "MQTT 5 to %s failed (%s); using MQTT 3.1.1, so requests must carry reply_to", url, exc
            )
            return link(MQTT_V311), broker, url
    except BaseException:
        if broker is not None:
            broker.stop()
        raise


class DeviceLink:
    """What one agent publishes, on the link `open_agent_link` made (and the broker it started)."""

    def __init__(self, device: str, link: MqttLink, broker: BrokerHandle | None) -> None:
        self.device = device
        self.link = link
        self.broker = broker

    def reply(self, topic: str, reply: protocol.Encoded, correlation_data: bytes | None = None) -> None:
        """A reply to a request, in the request's form (its content type, under MQTT 5)."""
        payload, content_type = reply
        self.link.publish(
            topic,
            payload,
            qos=protocol.REPLY_QOS,
            correlation_data=correlation_data,
            content_type=content_type,
        )

    def telemetry(self, snapshot: protocol.Telemetry) -> None:
        self.link.publish(
            protocol.telemetry_topic(self.device),
            protocol.encode_telemetry(snapshot),
            qos=protocol.TELEMETRY_QOS,
        )

    def status(self, status: DeviceStatus) -> None:
        """The retained status: online/offline, the cost profile (and the final report)."""
        topic = protocol.status_topic(self.device)
        self.link.publish(topic, protocol.encode_status(status), qos=protocol.STATUS_QOS, retain=True)

    def flush(self, timeout_s: float) -> None:
        self.link.flush(timeout=timeout_s)

    def close(self) -> None:
        """Disconnect (the broker drops the last will), then stop the embedded broker if any."""
        self.link.close()
        if self.broker is not None:
            self.broker.stop()
