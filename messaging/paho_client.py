"""A paho client set up as every link uses it: the MQTT version by name, paho's VERSION2
callback API (a bare `Client()` silently selects the old VERSION1 signatures), a bounded
outgoing queue, the reconnect delays, TLS and login, the last will, TCP_NODELAY on its
socket, and paho's per-packet costs cut (messaging.lean_client)."""

from __future__ import annotations

import socket
from typing import Any, Final

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from dartfl.errors import ConfigError
from messaging.buffered_socket import raw_socket
from messaging.lean_client import LeanClient
from messaging.messages import Will
from messaging.security import MqttSecurity
from messaging.tls import apply_security

__all__ = [
    "MAX_QUEUED_OUTGOING",
    "MQTT_V5",
    "MQTT_V311",
    "RECONNECT_MAX_S",
    "RECONNECT_MIN_S",
    "paho_client",
    "set_nodelay",
]

MQTT_V311: Final = "3.1.1"
MQTT_V5: Final = "5"
_PROTOCOLS: Final = {
    MQTT_V311: paho.MQTTv311,
    MQTT_V5: paho.MQTTv5,
    paho.MQTTv311: paho.MQTTv311,
    paho.MQTTv5: paho.MQTTv5,
}
# Outgoing QoS>0 messages paho keeps while the broker is away: bounded memory on a device.
# Messages paho may hold while the broker has not acknowledged them: beyond it `publish` fails
# (it returns False) instead of growing memory; a sender must count that, not ignore it.
MAX_QUEUED_OUTGOING: Final = 10_000
# Reconnect delays (paho doubles from the first to the last): a broker that comes back is
# found within 2 s. A retry is one TCP SYN; a fleet of a thousand devices retrying every 2 s
# costs a broker nothing next to the gap a 10 s delay left in their telemetry.
RECONNECT_MIN_S: Final = 1
RECONNECT_MAX_S: Final = 2


def set_nodelay(client: paho.Client, userdata: Any, sock: Any) -> None:
    """Requests and replies are single small packets: with Nagle's algorithm against the
    peer's delayed ACK each hop would wait ~40 ms. paho leaves Nagle on, so turn it off."""
    sock = raw_socket(sock)
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def paho_client(
    client_id: str, protocol: str | int, security: MqttSecurity, *, tls: bool, will: Will | None
) -> tuple[paho.Client, int]:
    """A paho client for `protocol` (MQTT_V311 or MQTT_V5) and its paho protocol number;
    ConfigError for any other protocol."""
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"MQTT protocol {protocol!r} is not supported; expected {MQTT_V311!r} or {MQTT_V5!r}"
        )
    version = _PROTOCOLS[protocol]
    client = LeanClient(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=version,
        clean_session=True if version == paho.MQTTv311 else None,
    )
    client.max_queued_messages_set(MAX_QUEUED_OUTGOING)
    client.reconnect_delay_set(RECONNECT_MIN_S, RECONNECT_MAX_S)
    apply_security(client, security, tls=tls)
    if will is not None:
        client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
    return client, version
