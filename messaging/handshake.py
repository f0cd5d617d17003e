"""What the broker's answer to a CONNECT means, or its silence.

A refused CONNACK is either for now (the broker is up but busy: paho retries, as for a broker
that is not up) or for good: the broker does not speak the MQTT version (`MqttVersionError`)
or refuses the login (`MqttSecurityError`). A broker that took the TCP connection and then
closed it before any CONNACK, twice in a row, or that has not answered an MQTT 5 CONNECT in
`CONNACK_WAIT_S`, does not speak MQTT 5 either: some 3.1.1-only brokers do that instead of
refusing (amqtt stays silent on a CONNECT with a will). A broker that is not up refuses the
TCP connection and never gets that far.

`ConnectFailure` keeps what a link's `wait_ready` raises once the failure is for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from messaging.errors import MqttConnectError, MqttSecurityError, MqttVersionError

if TYPE_CHECKING:
    from messaging.tls import FailedAttempts

__all__ = ["CONNACK_WAIT_S", "ConnectFailure", "UnansweredConnects", "is_transient", "refused_connection"]

_CLOSES_MEAN_NO_V5: Final = 2  # MQTT 5 connections closed before a CONNACK, in a row
CONNACK_WAIT_S: Final = 5.0  # a broker silent this long after an MQTT 5 CONNECT does not speak it

# What the broker says when it refuses a login (MQTT 3.1.1 and 5 wording).
_AUTH_REFUSALS = ("not authorized", "bad user name or password")
# Refusals of a broker that is up but cannot take the client now: paho retries, and so do we.
_TRANSIENT_REFUSALS = ("server unavailable", "server busy", "quota exceeded", "connection rate exceeded")
_USE_V311 = "this broker speaks MQTT 3.1.1 only: use protocol=MQTT_V311"


def is_transient(reason: Any) -> bool:
    """A refusal of a broker that is up but busy: paho tries again."""
    return str(reason).lower() in _TRANSIENT_REFUSALS


def refused_connection(reason: Any) -> tuple[str, type[MqttConnectError]]:
    """The failure a refused CONNACK is for good, and the error class to raise it as."""
    said = str(reason).lower()
    hint, kind = "", MqttConnectError
    if "protocol version" in said:
        hint = f" ({_USE_V311})"
        kind = MqttVersionError
    elif said in _AUTH_REFUSALS:
        hint = " (check --mqtt-username and $DARTFL_MQTT_PASSWORD against the broker's accounts)"
        kind = MqttSecurityError
    return f"broker refused the connection: {reason}{hint}", kind


class UnansweredConnects:
    """Whether the broker answers this link's MQTT 5 CONNECTs: when the current attempt's
    socket opened, until its CONNACK, and how many attempts in a row the broker closed before
    answering. The link calls it with its lock held."""

    def __init__(self, label: str, *, v5: bool) -> None:
        self._label = label
        self._v5 = v5
        self._opened_at: float | None = None
        self._closed = 0

    def opened(self, now_s: float) -> None:
        """The attempt's socket is open: the CONNECT is on its way."""
        self._opened_at = now_s

    def answered(self) -> None:
        """A CONNACK came, refusal or not."""
        self._opened_at, self._closed = None, 0

    def closed(self, ever_ready: bool) -> None:
        """The connection closed; before any CONNACK if one was awaited (and never ready)."""
        if self._opened_at is not None and not ever_ready:
            self._closed += 1
        self._opened_at = None

    def version_error(self, now_s: float, deadline_passed: bool) -> MqttVersionError | None:
        """The error for a broker that does not answer an MQTT 5 CONNECT; None while it may."""
        if not self._v5:
            return None
        if self._closed >= _CLOSES_MEAN_NO_V5:
            return MqttVersionError(
                f"{self._label}: the broker closed {self._closed} MQTT 5 connections in a "
                f"row before answering ({_USE_V311})"
            )
        if self._opened_at is None:
            return None
        silent_s = now_s - self._opened_at
        if silent_s < CONNACK_WAIT_S and not (deadline_passed and silent_s > 1.0):
            return None
        return MqttVersionError(
            f"{self._label}: the broker took the connection but did not answer an MQTT 5 CONNECT "
            f"within {silent_s:.0f} s ({_USE_V311})"
        )


class ConnectFailure:
    """Why a link cannot connect, once that is known for good: a refused CONNACK or subscription,
    an attempt that shows retrying cannot help (`FailedAttempts`: TLS, the login), or a broker
    that does not answer MQTT 5 (`unanswered`). The link calls it with its lock held."""

    def __init__(self, label: str, attempts: FailedAttempts, *, v5: bool) -> None:
        self.label = label
        self.attempts = attempts  # why the attempts so far failed
        self.unanswered = UnansweredConnects(label, v5=v5)
        self.detail: str | None = None  # once set, what connecting raises
        self.kind: type[MqttConnectError] = MqttConnectError

    def fail(self, detail: str, kind: type[MqttConnectError]) -> None:
        self.detail, self.kind = detail, kind

    def attempt_failed(self, detail: str) -> bool:
        """One more failed attempt: True when it shows that retrying cannot help."""
        permanent = self.attempts.note(detail)
        if permanent is not None:
            self.fail(permanent, MqttSecurityError)
        return permanent is not None

    def error(self, ready: bool, now_s: float, deadline_passed: bool) -> MqttConnectError | None:
        """What the link's `wait_ready` raises now, if anything."""
        if self.detail is not None:
            return self.kind(f"{self.label}: {self.detail}")
        return None if ready else self.unanswered.version_error(now_s, deadline_passed)
