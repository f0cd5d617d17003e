"""Subscribing to the fleet's telemetry over MQTT, for the live view and the recorder.

`Subscriber` keeps trying to reach the broker on a background thread until it can (a broker
that is down when the dashboard starts is not an error), after which paho reconnects by
itself. `LiveFeed` keeps the newest snapshot and a short history per device in memory;
`Recorder` (dashboard/recorder.py) writes them to the run store.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dartfl import protocol
from dartfl.errors import DartflError, ProtocolError
from dartfl.protocol import Telemetry
from dashboard.timeuse import TILE_WINDOW_S
from messaging.link import Message, MqttLink, MqttSecurityError, connect
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["TELEMETRY_SUBSCRIPTION", "FeedState", "LiveFeed", "LiveSnapshot", "Subscriber"]

TELEMETRY_SUBSCRIPTION = f"{protocol.ROOT}/+/telemetry"
STATUS_SUBSCRIPTION = f"{protocol.ROOT}/+/status"
RETRY_S = 2.0  # between connection attempts while the broker is unreachable
HISTORY_PER_DEVICE = 600  # snapshots kept in memory per device (10 min at 1 Hz)
MAX_DEVICES = 10_000  # devices the live view keeps; a fleet larger than this needs the recorder
_V = TypeVar("_V")


class Subscriber:
    """An MQTT subscription that survives a broker that is down, at start or later.

    `on_message` runs on paho's network thread (keep it short). `state()` says whether the
    feed is connected and, if not, why. A TLS or login failure is not retried: the settings
    are wrong, and `fatal_error` says how."""

    def __init__(
        self,
        url: str,
        name: str,
        on_message: Callable[[Message], None],
        subscriptions: list[tuple[str, int]],
        *,
        retry_s: float = RETRY_S,
        security: MqttSecurity | None = None,
    ) -> None:
        self.url = url
        self._security = security
        self.fatal_error: MqttSecurityError | None = None
        self._name = name
        self._on_message = on_message
        self._subscriptions = subscriptions
        self._retry_s = retry_s
        self._link: MqttLink | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dartfl-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            client_id = f"dartfl-{self._name}-{uuid.uuid4().hex[:8]}"
            try:
                link = connect(
                    self.url,
                    client_id,
                    on_message=self._on_message,
                    subscriptions=self._subscriptions,
                    timeout=self._retry_s,
                    security=self._security,
                )
            except MqttSecurityError as exc:
                self._error, self.fatal_error = str(exc), exc
                log.error("%s: giving up on %s: %s", self._name, self.url, exc)
                return
            except DartflError as exc:
                if self._error is None:  # say it once; the state shows it from then on
                    log.warning("%s: broker %s unreachable, retrying: %s", self._name, self.url, exc)
                self._error = str(exc)
                self._stop.wait(self._retry_s)
                continue
            self._link, self._error = link, None
            log.info("%s: subscribed on %s", self._name, self.url)
            return  # from here paho reconnects and re-subscribes by itself

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.connected

    @property
    def error(self) -> str | None:
        if self.connected:
            return None
        if self._link is not None:
            return f"lost the connection to {self.url}; reconnecting"
        return self._error or f"connecting to {self.url}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self._retry_s + 6.0)
        if self._link is not None:
            self._link.close()


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """The newest snapshot of one device: when it arrived here, its retained status, and the
    start of its tile's window (the newest held snapshot `TILE_WINDOW_S` older, else the
    oldest held: the window is then shorter)."""

    device: str
    received_s: float
    snapshot: Telemetry
    offline: bool = False
    baseline: Telemetry | None = None


@dataclass(frozen=True, slots=True)
class FeedState:
    url: str | None
    connected: bool
    error: str | None
    devices: dict[str, LiveSnapshot]


class LiveFeed:
    """The fleet as the broker tells it now: newest snapshot and short history per device."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        retry_s: float = RETRY_S,
        security: MqttSecurity | None = None,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[str, LiveSnapshot] = {}
        self._history: dict[str, deque[Telemetry]] = {}
        # Per device, its snapshots of the last TILE_WINDOW_S and the one before: the first
        # is the start of the tile's window, found in O(1) a message.
        self._windows: dict[str, deque[Telemetry]] = {}
        self._offline_since: dict[str, float] = {}
        self.subscriber = Subscriber(
            url,
            "dashboard",
            self.handle,
            [(TELEMETRY_SUBSCRIPTION, protocol.TELEMETRY_QOS), (STATUS_SUBSCRIPTION, protocol.STATUS_QOS)],
            retry_s=retry_s,
            security=security,
        )

    def handle(self, message: Message) -> None:
        """Take one message (public so tests can feed messages without a broker)."""
        now = self._clock()
        try:
            if message.topic.endswith("/status"):
                status = protocol.decode_status(message.payload, message.topic)
                with self._lock:
                    if status.online:
                        self._offline_since.pop(status.device, None)
                    else:
                        _put_newest(self._offline_since, status.device, now)
                return
            snapshot = protocol.decode_telemetry(message.payload, message.topic)
        except ProtocolError as exc:
            log.debug("ignoring a bad message on %s: %s", message.topic, exc)
            return
        device = snapshot.device
        with self._lock:
            gone = _put_newest(self._latest, device, LiveSnapshot(device, now, snapshot))
            if gone is not None:
                self._history.pop(gone, None)
                self._windows.pop(gone, None)
            self._history.setdefault(device, deque(maxlen=HISTORY_PER_DEVICE)).append(snapshot)
            window = self._windows.setdefault(device, deque(maxlen=HISTORY_PER_DEVICE))
            window.append(snapshot)
            while len(window) >= 2 and window[1].t <= snapshot.t - TILE_WINDOW_S:
                window.popleft()

    def state(self) -> FeedState:
        with self._lock:
            devices = {
                name: LiveSnapshot(
                    name,
                    snap.received_s,
                    snap.snapshot,
                    offline=self._offline_since.get(name, -1.0) >= snap.received_s,
                    baseline=_first_but_newest(self._windows.get(name)),
                )
                for name, snap in self._latest.items()
            }
        return FeedState(self.subscriber.url, self.subscriber.connected, self.subscriber.error, devices)

    def history(self, device: str) -> list[Telemetry]:
        with self._lock:
            return list(self._history.get(device, ()))

    def close(self) -> None:
        self.subscriber.close()


def _put_newest(recent: dict[str, _V], key: str, value: _V) -> str | None:
    """Store `value` as the newest entry (dicts keep insertion order, so the first key is the
    longest silent); past MAX_DEVICES entries drop that one and return its key. Memory stays
    bounded whatever names arrive, at O(1) a message."""
    recent.pop(key, None)
    recent[key] = value
    if len(recent) <= MAX_DEVICES:
        return None
    oldest = next(iter(recent))
    del recent[oldest]
    return oldest


def _first_but_newest(window: deque[Telemetry] | None) -> Telemetry | None:
    """The oldest snapshot of a window that holds more than the newest one."""
    return window[0] if window is not None and len(window) >= 2 else None
