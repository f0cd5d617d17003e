"""A thin paho-mqtt wrapper shared by the device agent and the replayer.

One `MqttLink` = one paho client (set up by messaging.paho_client) with its network loop on a
background thread (`loop_start`), automatic reconnect with re-subscription, and incoming
messages converted at this edge into `Message` values.

`on_message` runs on paho's network thread: keep it short (decode and enqueue). An exception
in it is logged and the link keeps running.

`mqtts://` URLs use TLS (messaging.tls) with an `MqttSecurity`'s files and login. A TLS
failure that retrying cannot fix (wrong CA, host name mismatch, no client certificate) or a
refused login ends `connect()` at once with an `MqttSecurityError` naming the likely cause; a
subscription the broker refuses, with an `MqttAclError` naming the topic; a broker that does
not speak the MQTT version (it says so, or stays silent, messaging.handshake), with an
`MqttVersionError`. Under MQTT 5 a publish the broker refuses is logged and kept as
`MqttLink.refusal` (messaging.refusals).

A broker that is not up (connection refused, unreachable, "server unavailable") is retried,
after 1 s and then every 2 s (paho's reconnect), first connection included: `connect(...,
timeout=None)` waits until it is up, saying so once in the log, or until its `stop` event is
set. The same delays bring a link back after an outage, so a device is back within about 2 s
of its broker (docs/faults.md).

A logged-in client's id is its account's name, as the shipped broker makes it
(`use_username_as_clientid`): one account is one connection, on every broker. An anonymous
client's id is its caller's (`dartfl-agent-<device>`): two agents started with one `--device`
take the connection from each other, each reconnect closing the other's, for as long as both
run. Connections the broker closes soon after accepting them, again and again, are that, not a
failing network (which fails the connect itself): `ClientIdClash` says so, naming the client
id, at most once a minute, and the drops it explains are not logged one by one.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Final

import paho.mqtt.client as paho

from messaging.brokers import parse_broker_address
from messaging.client_id_clash import ClientIdClash
from messaging.errors import (
    MqttAclError,
    MqttConnectError,
    MqttSecurityError,
    MqttVersionError,
    MqttWaitStoppedError,
)
from messaging.handshake import ConnectFailure, is_transient, refused_connection
from messaging.messages import Message, Will, message_from_paho, publish_properties
from messaging.paho_client import MQTT_V5, MQTT_V311, RECONNECT_MAX_S, paho_client, set_nodelay
from messaging.refusals import Drops, PublishRefusals, Refusal, refused_subscription
from messaging.security import MqttSecurity
from messaging.subscriptions import Subscriptions
from messaging.tls import FailedAttempts

log = logging.getLogger(__name__)

__all__ = [
    "MQTT_V5",
    "MQTT_V311",
    "Message",
    "MqttAclError",
    "MqttConnectError",
    "MqttLink",
    "MqttSecurityError",
    "MqttVersionError",
    "MqttWaitStoppedError",
    "Will",
    "connect",
]

_WAIT_SLICE_S: Final = 0.25  # how often a wait looks at its stop event


class MqttLink(AbstractContextManager["MqttLink"]):
    """A connected client; build it with `connect()`. Thread-safe publish and subscribe; as a
    context manager it closes on exit."""

    def __init__(
        self,
        client: paho.Client,
        protocol: int,
        on_message: Callable[[Message], None],
        subscriptions: Sequence[tuple[str, int]],
        label: str,
        attempts: FailedAttempts | None = None,
        account: str | None = None,
        client_id: str = "",
    ) -> None:
        self._client = client
        self._protocol = protocol
        self._on_message = on_message
        self._subs = Subscriptions(subscriptions)
        self._label = label
        self._cond = threading.Condition()
        self._connected = False
        self._ready = False  # connected and the standing subscriptions acknowledged
        self._ever_ready = False
        attempts = attempts or FailedAttempts(label, MqttSecurity(), tls=False)
        self._failure = ConnectFailure(label, attempts, v5=protocol == paho.MQTTv5)
        self._account = account
        self._refusals = PublishRefusals(label, account) if protocol == paho.MQTTv5 else None
        self._drops = Drops(label, account)
        # A logged-in client's drops say "one account is one connection" already (Drops); an
        # anonymous one's id is its caller's, and a clash over it needs telling apart.
        self._clash = ClientIdClash(client_id or label) if account is None else None
        self._closed = False
        self._last_sent: paho.MQTTMessageInfo | None = None
        # Called on paho's thread each time the link is ready again after a reconnect.
        self.on_reconnected: Callable[[], None] | None = None
        # Called on paho's thread each time the broker accepts a connection, before any message
        # it delivers (a persistent session's queued ones come at once, before the resubscription).
        self.on_connected: Callable[[], None] | None = None
        client.on_connect = self._handle_connect
        client.on_disconnect = self._handle_disconnect
        client.on_subscribe = self._handle_subscribe
        client.on_message = self._handle_message
        if self._refusals is not None:
            client.on_publish = self._handle_publish
        # Why an attempt failed reaches us only here: a refused or failed TLS connect through
        # on_connect_fail (called while paho handles the exception, so sys.exc_info() has
        # it), a TLS alert after the handshake as paho's error-level log line. on_log is
        # dropped once ready: paho formats a line per packet while it is set.
        client.on_connect_fail = self._handle_connect_fail
        client.on_socket_open = self._handle_socket_open
        client.on_log = self._handle_log

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def refusal(self) -> Refusal | None:
        """The first publish the broker refused (MQTT 5 only; None under 3.1.1, where a broker
        acknowledges a refused publish like any other)."""
        return None if self._refusals is None else self._refusals.first

    # -- paho callbacks (network thread) --

    def _handle_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        with self._cond:
            self._failure.unanswered.answered()
        if reason.is_failure:
            if is_transient(reason):  # up but busy: paho tries again, as for a broker not up
                self._note_failed_attempt(f"the broker refused the connection for now: {reason}")
                return
            with self._cond:
                self._failure.fail(*refused_connection(reason))
                self._cond.notify_all()
            log.warning("%s: connection refused: %s", self._label, reason)
            return
        with self._cond:
            self._connected = True
            if self._clash is not None:
                self._clash.connected(time.monotonic())
            subs = list(self._subs.standing.items())
        if self.on_connected is not None:
            try:
                self.on_connected()
            except Exception:
                log.exception("%s: on_connected failed", self._label)
        if not subs:
            self._mark_ready()
            return
        _, mid = client.subscribe(subs)
        with self._cond:
            self._subs.subscribed_on_connect(mid, [t for t, _ in subs])
        log.info("%s: connected; subscribing to %s", self._label, [t for t, _ in subs])

    def _handle_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        with self._cond:
            self._connected = False
            self._ready = False
            self._failure.unanswered.closed(self._ever_ready)
            self._cond.notify_all()
            clash = None if self._closed or self._clash is None else self._clash.closed(time.monotonic())
        if self._closed:
            return
        if clash:
            log.error("%s: %s", self._label, clash)
        elif clash == "":
            log.debug("%s: disconnected (%s); another client with this id, likely", self._label, reason)
        elif not self._drops.lost(reason):
            log.warning("%s: disconnected (%s); paho reconnects", self._label, reason)

    def _handle_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: list[Any], properties: Any
    ) -> None:
        with self._cond:
            initial, topics = self._subs.answered(mid)
        refusal = refused_subscription(topics, reasons, self._account)
        if initial and refusal is None:
            self._mark_ready()
            return
        with self._cond:
            if not initial:
                self._subs.acked(mid, refusal)
            elif self._ever_ready:  # refused again after a reconnect: nobody waits to hear it
                log.error("%s: %s", self._label, refusal)
            else:
                self._failure.fail(str(refusal), MqttAclError)
            self._cond.notify_all()

    def _handle_socket_open(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        set_nodelay(client, userdata, sock)
        with self._cond:
            self._failure.unanswered.opened(time.monotonic())

    def _mark_ready(self) -> None:
        with self._cond:
            again = self._ever_ready
            self._ready = self._ever_ready = True
            self._cond.notify_all()
        self._client.on_log = None
        if again and self.on_reconnected is not None:
            # paho's thread; publishing from here only queues. A broker that restarted without
            # persistence lost the retained status, and after a dropped link the last will
            # "offline" is retained while the device serves again: the owner republishes.
            try:
                self.on_reconnected()
            except Exception:
                log.exception("%s: on_reconnected failed", self._label)

    def _handle_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        error = sys.exc_info()[1]
        self._note_failed_attempt(str(error) if error is not None else "connection failed")

    def _handle_log(self, client: paho.Client, userdata: Any, level: int, text: str) -> None:
        if level == paho.MQTT_LOG_ERR and "SSL" in text:
            self._note_failed_attempt(text)

    def _note_failed_attempt(self, detail: str) -> None:
        with self._cond:
            if self._ever_ready or self._failure.detail is not None:
                return
            if self._failure.attempt_failed(detail):
                self._cond.notify_all()
        log.debug("%s: connection attempt failed: %s", self._label, detail)

    def _handle_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        if self._refusals is not None:
            self._refusals.acked(mid, reason)

    def _handle_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        try:
            self._on_message(message_from_paho(msg))
        except Exception:  # one bad handler call must not stop the network thread
            log.exception("%s: on_message failed for a message on %s", self._label, msg.topic)

    # -- API --

    def wait_ready(self, timeout: float | None, stop: threading.Event | None = None) -> None:
        """Block until connected with subscriptions acknowledged, or raise MqttConnectError:
        after `timeout` seconds, or (None) never, saying once that it waits for the broker;
        MqttWaitStoppedError as soon as `stop` is set."""
        started = time.monotonic()
        deadline = math.inf if timeout is None else started + timeout
        said = False
        while True:
            with self._cond:
                left = deadline - time.monotonic()
                self._cond.wait_for(
                    lambda: self._ready or self._failure.detail is not None,
                    min(max(left, 0.0), _WAIT_SLICE_S),
                )
                ready, last = self._ready, self._failure.attempts.last
                over = time.monotonic() >= deadline
                error = self._failure.error(ready, time.monotonic(), over)
            if error is not None:
                raise error
            if ready:
                if said:
                    log.warning("%s: connected after %.0f s", self._label, time.monotonic() - started)
                return
            if stop is not None and stop.is_set():
                raise MqttWaitStoppedError(f"{self._label}: stopped while waiting for the broker")
            if time.monotonic() >= deadline:
                detail = f" (last attempt: {last})" if last else ""
                raise MqttConnectError(
                    f"{self._label}: not connected and subscribed within {timeout} s{detail}"
                )
            if timeout is None and last is not None and not said:
                log.warning(
                    "%s: the broker is not reachable yet (%s); retrying every %d s until it is",
                    self._label,
                    last,
                    RECONNECT_MAX_S,
                )
                said = True

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 1,
        *,
        retain: bool = False,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
        content_type: str | None = None,
    ) -> bool:
        """Send (or, for QoS > 0 while reconnecting, queue) a message. False if it was dropped:
        QoS 0 while disconnected, or the outgoing queue is full. The MQTT 5 properties are
        ignored under 3.1.1."""
        props = None
        if self._protocol == paho.MQTTv5:
            props = publish_properties(response_topic, correlation_data, content_type)
        info = self._client.publish(topic, payload, qos=qos, retain=retain, properties=props)
        if info.rc == paho.MQTT_ERR_SUCCESS or (info.rc == paho.MQTT_ERR_NO_CONN and qos > 0):
            if qos > 0:
                self._last_sent = info
                if self._refusals is not None:
                    self._refusals.sent(info.mid, topic)
            return True
        log.debug("%s: publish to %s dropped: %s", self._label, topic, paho.error_string(info.rc))
        return False

    def subscribe(self, topic: str, qos: int = 1, timeout: float = 5.0) -> None:
        """Add a standing subscription (kept across reconnects) and wait for the broker's ack."""
        with self._cond:
            self._subs.standing[topic] = qos
            # paho may call back before subscribe() returns the id: hold the condition's lock
            # (the callback waits on it) until the id is noted.
            rc, mid = self._client.subscribe(topic, qos)
            self._subs.sent(mid, topic)
        if rc != paho.MQTT_ERR_SUCCESS or mid is None:
            raise MqttConnectError(
                f"{self._label}: cannot subscribe to {topic!r} now: {paho.error_string(rc)}"
            )
        with self._cond:
            answered, refusal = self._subs.wait_ack(self._cond, mid, timeout)
        if not answered:
            raise MqttConnectError(f"{self._label}: no SUBACK for {topic!r} within {timeout} s")
        if refusal is not None:
            raise MqttAclError(f"{self._label}: {refusal}")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the broker has acknowledged the last QoS > 0 message (and so, in order,
        the ones before it). Call before `close()` when replies must not be lost."""
        info = self._last_sent
        if info is None or info.is_published():
            return True
        try:
            info.wait_for_publish(timeout)
        except (ValueError, RuntimeError):  # not connected any more: nothing left to wait for
            return False
        return info.is_published()

    def close(self) -> None:
        """Disconnect cleanly (the broker then drops the last will) and stop the thread."""
        if self._closed:
            return
        self._closed = True
        self._client.disconnect()
        self._client.loop_stop()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def connect(
    url: str,
    client_id: str,
    *,
    on_message: Callable[[Message], None],
    subscriptions: Sequence[tuple[str, int]] = (),
    will: Will | None = None,
    protocol: str | int = MQTT_V311,
    timeout: float | None = 5.0,
    keepalive_s: int = 30,
    security: MqttSecurity | None = None,
    stop: threading.Event | None = None,
) -> MqttLink:
    """Connect to `url` (mqtt://host:port, or mqtts://host:port for TLS), subscribe, and
    return once the broker has acknowledged both; raise MqttConnectError if that takes longer
    than `timeout` seconds (None: wait until the broker is up, or `stop` is set:
    MqttWaitStoppedError), MqttVersionError when the broker does not speak `protocol`,
    MqttSecurityError (a ConfigError) at once when TLS or the login cannot work
    (MqttAclError: a subscription refused), ConfigError for unusable `security`.

    `client_id` is for an anonymous client; a logged-in one is its account's name.

    `protocol` is MQTT_V311 (Mosquitto, and brokers that speak 3.1.1 only) or MQTT_V5
    (Mosquitto 1.6 and newer; adds Response Topic / Correlation Data properties). Clean sessions:
    requests that arrive while a device is away are not kept for it.
    """
    address = parse_broker_address(url)
    security = security or MqttSecurity()
    security.check(url, tls=address.tls)
    # The shipped broker names a logged-in client after its account, so that no account can
    # take over another's connection: so do we, and two processes on one account behave
    # alike on every broker (each closes the other's connection, see _handle_disconnect).
    client_id = security.username or client_id
    client, version = paho_client(client_id, protocol, security, tls=address.tls, will=will)
    scheme = "mqtts" if address.tls else "mqtt"
    label = f"{scheme} {client_id}@{address.host}:{address.port}"
    attempts = FailedAttempts(f"{address.host}:{address.port}", security, tls=address.tls)
    link = MqttLink(
        client, version, on_message, subscriptions, label, attempts, security.username, client_id=client_id
    )
    if version == paho.MQTTv5:
        client.connect_async(address.host, address.port, keepalive_s, clean_start=True)
    else:
        client.connect_async(address.host, address.port, keepalive_s)
    client.loop_start()
    try:
        link.wait_ready(timeout, stop)
    except MqttConnectError:
        link.close()
        raise
    return link
