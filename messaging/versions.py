"""Which MQTT version a client speaks: 5 where the broker does, 3.1.1 where it does not.

MQTT 5 is what makes the broker's refusals visible (a PUBACK reason code for a publish its ACL
denies, messaging.refusals) and what carries the Response Topic / Correlation Data properties.
Older brokers (Mosquitto before 1.6, amqtt, some hosted ones) speak 3.1.1 only, and some of
them do not refuse an MQTT 5 CONNECT but drop the connection, which looks like any other
failure; so any failure but a TLS or login one (which no protocol version cures) falls back to
3.1.1, with a warning that says what is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from messaging.errors import MqttConnectError, MqttSecurityError
from messaging.link import MQTT_V5, MQTT_V311, MqttLink

log = logging.getLogger(__name__)

__all__ = ["connect_preferring_v5"]


def connect_preferring_v5(connect: Callable[[str], MqttLink], url: str, lost: str) -> MqttLink:
    """`connect(MQTT_V5)`, or `connect(MQTT_V311)` when that fails for any reason but TLS or the
    login; `lost` says what the client cannot do under 3.1.1 (for the warning)."""
    try:
        return connect(MQTT_V5)
    except MqttSecurityError:
        raise
    except MqttConnectError as exc:
        log.warning("MQTT 5 to %s failed (%s); using MQTT 3.1.1, so %s", url, exc, lost)
        return connect(MQTT_V311)
