"""What can go wrong between a client and its broker, as exceptions: no connection in time, a
TLS or login failure that retrying cannot fix, and a right the broker's ACL refuses."""

from __future__ import annotations

from dartfl.errors import ConfigError, DartflError

__all__ = ["MqttAclError", "MqttConnectError", "MqttSecurityError"]


class MqttConnectError(DartflError):
    """The broker did not accept the connection or the subscriptions in time."""


class MqttSecurityError(MqttConnectError, ConfigError):
    """TLS or the login failed in a way retrying cannot fix: the settings are wrong (exit 2)."""


class MqttAclError(MqttSecurityError):
    """The broker refused this account a subscription or a publish: its ACL lacks the right
    (docs/deployment.md section 5 lists each role's rights). Retrying cannot fix it either."""
