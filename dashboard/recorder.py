"""The telemetry recorder: subscribes to every device's telemetry and appends it to the run
store, so the dashboard's history survives restarts (`dartfl record`).

Snapshots are buffered and written in one transaction per `flush_s` (run-store guidance:
batches, not single rows); the buffer is bounded, so a store that cannot keep up drops the
oldest snapshots with a warning rather than growing without limit.
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
from messaging.link import Message
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["Recorder"]

MAX_BUFFERED = 100_000


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

    def prune(self) -> int:
        if self.retention_s is None:
            return 0
        return self.store.prune_telemetry(self._clock() - self.retention_s)

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Flush every `flush_s` until `stop` is set (or `duration_s` has passed); prune hourly.
        Raises the subscriber's MqttSecurityError: wrong TLS or login settings never heal."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        next_prune = 0.0
        while not stop.wait(self.flush_s):
            if self.subscriber.fatal_error is not None:
                raise self.subscriber.fatal_error
            self.flush()
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
