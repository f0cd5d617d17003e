"""What can go wrong between a client and its broker, as exceptions: no connection in time (or
a wait for one given up), a broker that refuses the MQTT version, a TLS or login failure that
retrying cannot fix, and a right the broker's ACL refuses."""

from __future__ import annotations

from dartfl.errors import ConfigError, DartflError

__all__ = [
    "MqttAclError",
    "MqttConnectError",
    "MqttSecurityError",
    "MqttVersionError",
    "MqttWaitStoppedError",
]


class MqttConnectError(DartflError):
    """The broker did not accept the connection or the subscriptions in time."""


class MqttVersionError(MqttConnectError):
    """The broker answered the CONNECT with "unsupported protocol version": it does not speak
    the MQTT version asked for (the embedded amqtt broker and MQTT 5). Another version may work."""


class MqttWaitStoppedError(MqttConnectError):
    """The caller stopped a wait for the broker before it came up (a SIGTERM, say)."""


class MqttSecurityError(MqttConnectError, ConfigError):
    """TLS or the login failed in a way retrying cannot fix: the settings are wrong (exit 2)."""


class MqttAclError(MqttSecurityError):
    """The broker refused this account a subscription or a publish: its ACL lacks the right
    (docs/deployment.md section 5 lists each role's rights). Retrying cannot fix it either."""
