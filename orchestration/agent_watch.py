"""Waiting for a device agent, from what it publishes (docs/protocol.md): its retained status and
its telemetry.

A device counts as alive when its latest status says `online`, or when a telemetry snapshot of
it arrives: telemetry is never retained, so a snapshot that arrives was published while we
listened. The retained status alone is not enough. It is whatever was written last: a spoofed
`offline` on a broker without the shipped ACL (which lets only the device's own account write
its status), or the last will of a connection the device has since replaced, stays until the
device reconnects. Comparing the status's `t` with the telemetry's would not settle it either:
both are publishers' clocks, and a forged status can carry any `t` (a future one would hide a
healthy device for good). The order in which messages reach the requester is what it can trust.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from dartfl import protocol
from dartfl.errors import DartflError
from dartfl.protocol import DeviceStatus, Telemetry
from dartfl.types import DeviceProfile
from messaging.accounts import grant_hint
from messaging.link import Message, connect
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["AgentSighting", "AgentWatch", "wait_for_agent", "wait_for_status"]


@dataclass(frozen=True)
class AgentSighting:
    """What showed a device alive: its online status, or a live snapshot (whatever its status)."""

    device: str
    status: DeviceStatus | None
    telemetry: Telemetry | None

    @property
    def profile(self) -> DeviceProfile | None:
        """The cost profile it published: in its online status, else in its telemetry."""
        if self.status is not None and self.status.online and self.status.profile is not None:
            return self.status.profile
        return self.telemetry.profile if self.telemetry is not None else None


class AgentWatch:
    """Decides from one device's status and telemetry messages whether it is alive."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._status_topic = protocol.status_topic(device)
        self._telemetry_topic = protocol.telemetry_topic(device)
        self._lock = threading.Lock()
        self._status: DeviceStatus | None = None
        self._telemetry: Telemetry | None = None
        self.alive = threading.Event()

    @property
    def subscriptions(self) -> list[tuple[str, int]]:
        return [(self._status_topic, protocol.STATUS_QOS), (self._telemetry_topic, protocol.TELEMETRY_QOS)]

    def handle(self, message: Message) -> None:
        """One message on the device's status or telemetry topic (paho's thread)."""
        try:
            if message.topic == self._status_topic:
                status = protocol.decode_status(message.payload, message.topic)
                with self._lock:
                    self._status = status
                if status.online:
                    self.alive.set()
            elif message.topic == self._telemetry_topic and not message.retain:
                snapshot = protocol.decode_telemetry(message.payload, message.topic)
                with self._lock:
                    self._telemetry = self._telemetry or snapshot
                self.alive.set()
        except DartflError as exc:
            log.debug("ignoring a bad message on %s: %s", message.topic, exc)

    def sighting(self) -> AgentSighting | None:
        """Why the device is alive, or None while nothing shows it."""
        with self._lock:
            status, telemetry = self._status, self._telemetry
        if status is not None and status.online:
            return AgentSighting(self.device, status, None)
        if telemetry is not None:
            return AgentSighting(self.device, status, telemetry)
        return None

    def silence(self, broker_url: str, timeout_s: float, account: str | None) -> str:
        """Why nothing showed the device alive, and what to check."""
        with self._lock:
            status = self._status
        seen = "its retained status says offline and " if status is not None else ""
        return (
            f"device {self.device!r} did not report 'online' on {broker_url} within {timeout_s:.0f} s: "
            f"{seen}no online status on {self._status_topic} and no telemetry on {self._telemetry_topic} "
            "arrived. Is its agent running? Mosquitto also drops, without a word, what an account may "
            f"not read: {grant_hint('read', self._telemetry_topic, account)}"
        )


def wait_for_agent(
    broker_url: str,
    device: str,
    *,
    timeout_s: float = 60.0,
    security: MqttSecurity | None = None,
    check: Callable[[], None] | None = None,
) -> AgentSighting:
    """Block until `device` shows itself alive (AgentWatch); raise DartflError after `timeout_s`.

    `check` is called about once a second while waiting and may raise to stop the wait (say,
    the agent process it waits for has exited), on the one broker connection."""
    watch = AgentWatch(device)
    link = connect(
        broker_url,
        client_id=f"dartfl-wait-{uuid.uuid4().hex[:8]}",
        on_message=watch.handle,
        subscriptions=watch.subscriptions,
        security=security,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while (sighting := watch.sighting()) is None:
            if watch.alive.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                continue
            if check is not None:
                check()
            if time.monotonic() >= deadline:
                account = security.username if security is not None else None
                raise DartflError(watch.silence(broker_url, timeout_s, account))
    finally:
        link.close()
    if sighting.telemetry is not None and sighting.status is not None:
        log.warning(
            "device %r publishes telemetry although its retained status says offline "
            "(a stale last will, or a status written by someone else): going by the telemetry",
            device,
        )
    return sighting


def wait_for_status(
    broker_url: str,
    device: str,
    want: str = "online",
    timeout_s: float = 60.0,
    security: MqttSecurity | None = None,
) -> DeviceStatus:
    """Block until the device's status says `want`; return that status message (a stopped
    agent's offline status carries its final report)."""
    got: list[DeviceStatus] = []
    ready = threading.Event()

    def on_message(message: Message) -> None:
        try:
            status = protocol.decode_status(message.payload, message.topic)
        except DartflError:
            return
        if status.online == (want == "online"):
            got.append(status)
            ready.set()

    link = connect(
        broker_url,
        client_id=f"dartfl-wait-{uuid.uuid4().hex[:8]}",
        on_message=on_message,
        subscriptions=[(protocol.status_topic(device), protocol.STATUS_QOS)],
        security=security,
    )
    try:
        if not ready.wait(timeout_s):
            raise DartflError(
                f"device {device!r} did not report {want!r} on {broker_url} within {timeout_s:.0f} s"
            )
    finally:
        link.close()
    return got[-1]
