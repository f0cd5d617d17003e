"""The telemetry recorder: subscribes to every device's telemetry and appends it to the run
store, so the dashboard's history survives restarts (`dartfl record`).

Snapshots are buffered and written in one transaction per `flush_s` (run-store guidance:
batches, not single rows); the buffer is bounded, so a store that cannot keep up drops the
oldest snapshots with a warning rather than growing without limit.

A subscription the broker refuses ends the recorder (`fatal_error`, an MqttAclError naming
the topic). Mosquitto's ACL file refuses none: it drops, without a word, every message the
account may not read. So a recorder that has heard nothing says so (`silence`): once as a
warning after QUIET_WARNING_S, and `dartfl record --duration-s` fails with it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from dartfl import protocol
from dartfl.errors import ConfigError, ProtocolError
from dartfl.store import RunStore, TelemetryRow
from dashboard.feed import TELEMETRY_SUBSCRIPTION, Subscriber
from dashboard.telemetry import row_from_snapshot
from messaging.accounts import grant_hint
from messaging.link import Message
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["Recorder"]

MAX_BUFFERED = 100_000
QUIET_WARNING_S = 60.0  # heard nothing for this long since the start: say why that may be


class Recorder:
    """Buffers decoded snapshots from the broker and flushes them into the store."""

    def __init__(
        self,
        store_path: Path,
        broker_url: str,
        *,
        flush_s: float = 1.0,
        retention_s: float | None = 86400.0,
        clock: Callable[[], float] = time.time,
        security: MqttSecurity | None = None,
    ) -> None:
        if flush_s <= 0:
            raise ConfigError(f"flush interval must be > 0 s, got {flush_s}")
        if retention_s is not None and retention_s <= 0:
            raise ConfigError(f"retention must be > 0 s (or None to keep everything), got {retention_s}")
        self.store = RunStore(store_path)
        self.flush_s = flush_s
        self.retention_s = retention_s
        self._clock = clock
        self._buffer: deque[TelemetryRow] = deque(maxlen=MAX_BUFFERED)
        self._lock = threading.Lock()
        self.received = 0
        self.written = 0
        self.bad = 0
        self._account = security.username if security is not None else None
        self.subscriber = Subscriber(
            broker_url,
            "recorder",
            self.handle,
            [(TELEMETRY_SUBSCRIPTION, protocol.TELEMETRY_QOS)],
            security=security,
        )

    def handle(self, message: Message) -> None:
        try:
            row = row_from_snapshot(protocol.decode_telemetry(message.payload, message.topic))
        except (ProtocolError, ConfigError) as exc:
            self.bad += 1
            log.debug("ignoring a bad telemetry message on %s: %s", message.topic, exc)
            return
        with self._lock:
            if len(self._buffer) == self._buffer.maxlen:
                log.warning("recorder buffer full: dropping the oldest snapshot")
            self._buffer.append(row)
            self.received += 1

    def flush(self) -> int:
        """Write what is buffered; returns how many new rows went into the store.

        A store that cannot be written now (locked past its timeout, disk full) keeps the rows
        buffered for the next flush, ahead of what arrived since, within the buffer's bound. A
        batch the store refuses for its content is written row by row, so one bad snapshot
        costs itself, not the batch or the recorder."""
        with self._lock:
            rows = list(self._buffer)
            self._buffer.clear()
        if not rows:
            return 0
        try:
            written = self.store.add_telemetry(rows)
        except sqlite3.OperationalError as exc:
            log.warning("cannot write the run store now (%s): %d snapshots kept for later", exc, len(rows))
            self._requeue(rows)
            return 0
        except (sqlite3.Error, ValueError, OverflowError, UnicodeError):
            written = self._write_one_by_one(rows)
        self.written += written
        return written

    def _requeue(self, rows: list[TelemetryRow]) -> None:
        """Put unwritten rows back before the ones buffered since; past the bound the oldest go."""
        with self._lock:
            merged = rows + list(self._buffer)
            dropped = max(0, len(merged) - (self._buffer.maxlen or len(merged)))
            self._buffer.clear()
            self._buffer.extend(merged[dropped:])
        if dropped:
            log.warning("recorder buffer full: dropped the %d oldest snapshots", dropped)

    def _write_one_by_one(self, rows: list[TelemetryRow]) -> int:
        written = 0
        for row in rows:
            try:
                written += self.store.add_telemetry([row])
            except (sqlite3.Error, ValueError, OverflowError, UnicodeError) as exc:
                self.bad += 1
                log.warning("dropping a snapshot of %r the store refuses: %s", row.device, exc)
        return written

    def silence(self) -> str | None:
        """Why nothing arrived (one line: the topic, the account and what to check), or None
        once any message did."""
        if self.received or self.bad:
            return None
        url = self.subscriber.url
        if not self.subscriber.connected and self.subscriber.error is not None:
            return f"no telemetry recorded: {self.subscriber.error}"
        who = f"account {self._account!r}" if self._account else "this anonymous client"
        return (
            f"no telemetry arrived on {TELEMETRY_SUBSCRIPTION} from {url}: no device publishes, or "
            f"the broker drops it without a word because {who} may not read it; "
            f"{grant_hint('read', TELEMETRY_SUBSCRIPTION, self._account)}"
        )

    def prune(self) -> int:
        if self.retention_s is None:
            return 0
        return self.store.prune_telemetry(self._clock() - self.retention_s)

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Flush every `flush_s` until `stop` is set (or `duration_s` has passed); prune hourly.
        Raises the subscriber's MqttSecurityError: wrong TLS or login settings never heal."""
        started = time.monotonic()
        deadline = None if duration_s is None else started + duration_s
        next_prune = 0.0
        quiet_warned = False
        while not stop.wait(self.flush_s):
            if self.subscriber.fatal_error is not None:
                raise self.subscriber.fatal_error
            self.flush()
            if not quiet_warned and time.monotonic() - started >= QUIET_WARNING_S:
                quiet_warned = True
                if (why := self.silence()) is not None:
                    log.warning("%s", why)
            if time.monotonic() >= next_prune:
                pruned = self.prune()
                if pruned:
                    log.info("pruned %d snapshots older than the retention", pruned)
                next_prune = time.monotonic() + 3600.0
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.flush()

    def close(self) -> None:
        self.subscriber.close()
        self.flush()
        self.store.close()
