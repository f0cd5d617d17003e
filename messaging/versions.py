"""Which MQTT version a client speaks: 5 where the broker does, 3.1.1 where it does not.

MQTT 5 is what makes the broker's refusals visible (a PUBACK reason code for a publish its ACL
denies, messaging.refusals) and what carries the Response Topic / Correlation Data properties.
Older brokers (Mosquitto before 1.6, amqtt, some hosted ones) speak 3.1.1 only. They answer an
MQTT 5 CONNECT with a CONNACK "unsupported protocol version", or take the connection and never
answer, or close it before any CONNACK (MqttVersionError in each case, messaging.link). Only
that falls back to 3.1.1, with a warning that says what is lost: a broker that is not up yet,
or any other failure, says nothing about the versions it speaks (the agent used to switch to
3.1.1 for good on a plain "connection refused").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from messaging.errors import MqttVersionError
from messaging.link import MQTT_V5, MQTT_V311, MqttLink

log = logging.getLogger(__name__)

__all__ = ["connect_preferring_v5"]


def connect_preferring_v5(connect: Callable[[str], MqttLink], url: str, lost: str) -> MqttLink:
    """`connect(MQTT_V5)`, or `connect(MQTT_V311)` when the broker refuses MQTT 5; `lost` says
    what the client cannot do under 3.1.1 (for the warning)."""
    try:
        return connect(MQTT_V5)
    except MqttVersionError as exc:
        log.warning("the broker at %s refuses MQTT 5 (%s); using MQTT 3.1.1, so %s", url, exc, lost)
        return connect(MQTT_V311)
