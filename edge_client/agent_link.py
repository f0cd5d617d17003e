"""The device agent's MQTT side: the connection (request subscription, offline last will, TLS
and login from the agent's config, a private Mosquitto on loopback when no broker is given), and
what the agent publishes on it: replies, telemetry and its retained status.

Its client id is `dartfl-agent-<device>` when anonymous, its account's name when logged in
(messaging.link): with the shipped broker's `use_username_as_clientid`, nobody but the
device's own account can connect under the id the device uses and knock it offline."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dartfl import protocol
from dartfl.protocol import DeviceStatus
from edge_client.agent_config import AgentConfig
from messaging.brokers import BrokerHandle, BrokerStartError, find_mosquitto, start_mosquitto
from messaging.link import Message, MqttLink, Will, connect
from messaging.versions import connect_preferring_v5

log = logging.getLogger(__name__)

__all__ = ["DeviceLink", "check_private_broker", "open_agent_link", "start_private_broker"]


def open_agent_link(
    config: AgentConfig, on_message: Callable[[Message], None]
) -> tuple[MqttLink, BrokerHandle | None, str]:
    """Connect the agent; returns (link, the private broker it started or None, broker URL)."""
    broker = None
    url = config.broker_url
    if url is None:
        broker = start_private_broker()
        url = broker.url
        log.info("private Mosquitto (pid %s) on %s", broker.pid, url)
    device = config.device_id
    account = config.mqtt_security.username if config.mqtt_security is not None else None
    if account is not None and account != device:
        log.warning(
            "logging in as %r for device %r: the shipped broker ACL gives a device account rights "
            "on dartfl/v1/<account>/ only, so name the account after the device (--mqtt-username %s)",
            account,
            device,
            device,
        )

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
        # MQTT 5 lets requesters use Response Topic / Correlation Data and shows the replies
        # the broker refuses.
        lost = "requests must carry reply_to and replies the broker refuses go unnoticed"
        return connect_preferring_v5(link, url, lost), broker, url
    except BaseException:
        if broker is not None:
            broker.stop()
        raise


def check_private_broker(config: AgentConfig) -> None:
    """Before anything loads: an agent without a broker URL needs Mosquitto for its own one;
    BrokerStartError, one line saying what to install or pass, when it is not installed."""
    if config.broker_url is None:
        try:
            find_mosquitto()
        except BrokerStartError as exc:
            raise _no_mosquitto(exc) from None


def start_private_broker() -> BrokerHandle:
    """The agent's own Mosquitto on a free loopback port (no --broker given)."""
    try:
        return start_mosquitto()
    except BrokerStartError as exc:
        if "not installed" not in str(exc):
            raise
        raise _no_mosquitto(exc) from None


def _no_mosquitto(exc: BrokerStartError) -> BrokerStartError:
    return BrokerStartError(
        f"no --broker given, so the agent would start its own Mosquitto on loopback, but {exc}; "
        "or give --broker mqtt://HOST:1883"
    )


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
        """Disconnect (the broker drops the last will), then stop the private broker if any."""
        self.link.close()
        if self.broker is not None:
            self.broker.stop()
