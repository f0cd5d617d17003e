"""The telemetry recorder: subscribes to every device's telemetry and appends it to the run
store, so the dashboard's history survives restarts (`dartfl record`).

Snapshots are buffered and written in one transaction per `flush_s` (run-store guidance:
batches, not single rows); the buffer is bounded, so a store that cannot keep up drops the
oldest snapshots with a warning rather than growing without limit.

What the decoder lets through is bounded once more against this host's clock and the store
(dartfl.store.limits): snapshots dated too far ahead or older than the retention, and new
devices past the device limit, are refused, counted in `refused` and logged; a device past
its row limit loses its oldest rows; pruning also removes rows dated in the future.

A subscription the broker refuses ends the recorder (`fatal_error`, an MqttAclError naming
the topic). Mosquitto's ACL file refuses none: it drops, without a word, every message the
account may not read. So a recorder that has heard nothing says so (`silence`): once as a
warning after QUIET_WARNING_S, and `dartfl record --duration-s` fails with it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

from dartfl import protocol
from dartfl.errors import ConfigError, ProtocolError
from dartfl.store import RunStore, StoreBusyError, StoreWriteError, TelemetryRow
from dartfl.store.limits import REFUSALS, TelemetryAdmission, TelemetryLimits
from dashboard.feed import TELEMETRY_SUBSCRIPTION, Subscriber
from dashboard.telemetry import row_from_snapshot
from messaging.accounts import grant_hint
from messaging.link import Message
from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["Recorder"]

MAX_BUFFERED = 100_000
QUIET_WARNING_S = 60.0  # heard nothing for this long since the start: say why that may be

# What a store refuses about one row (its content), as opposed to the store being unwritable:
# such a batch is written row by row, so one bad snapshot costs only itself.
_ROW_ERRORS = (ConfigError, sqlite3.Error, ValueError, OverflowError, UnicodeError)


class Recorder:
    """Buffers decoded snapshots from the broker and flushes them into the store."""

    def __init__(
        self,
        store_path: Path,
        broker_url: str,
        *,
        flush_s: float = 1.0,
        limits: TelemetryLimits | None = None,
        clock: Callable[[], float] = time.time,
        security: MqttSecurity | None = None,
    ) -> None:
        if flush_s <= 0:
            raise ConfigError(f"flush interval must be > 0 s, got {flush_s}")
        self.store = RunStore(store_path)
        self.flush_s = flush_s
        self.limits = limits or TelemetryLimits()
        self._clock = clock
        self._buffer: deque[TelemetryRow] = deque(maxlen=MAX_BUFFERED)
        self._lock = threading.Lock()  # the buffer, the counters and the admission's counts
        self._admission = TelemetryAdmission(self.limits, self._rows_in_store())
        self._warned_s: dict[str, float] = {}  # reason (or store, buffer) -> when last logged
        self.received = 0
        self.written = 0
        self.bad = 0
        self.refused: Counter[str] = Counter()  # by reason, a key of dartfl.store.limits.REFUSALS
        self._account = security.username if security is not None else None
        self.subscriber = Subscriber(
            broker_url,
            "recorder",
            self.handle,
            [(TELEMETRY_SUBSCRIPTION, protocol.TELEMETRY_QOS)],
            security=security,
        )

    def _rows_in_store(self) -> dict[str, int]:
        return {d.device: d.rows for d in self.store.telemetry_devices()}

    def handle(self, message: Message) -> None:
        try:
            snapshot = protocol.decode_telemetry(message.payload, message.topic)
            row = row_from_snapshot(snapshot)
        except (ProtocolError, ConfigError) as exc:
            self.bad += 1
            log.debug("ignoring a bad telemetry message on %s: %s", message.topic, exc)
            return
        now = self._clock()
        with self._lock:
            reason = self._admission.refusal(row.device, row.t_s, now)
            if reason is not None:
                self.refused[reason] += 1
            else:
                self._admission.admitted(row.device)
                if len(self._buffer) == self._buffer.maxlen:
                    self._warn_once_a_minute(
                        "buffer-full", now, "recorder buffer full: dropping the oldest snapshot"
                    )
                self._buffer.append(row)
                self.received += 1
        if reason is not None:
            self._log_refusal(reason, row, now)

    def _warned_lately(self, key: str, now: float) -> bool:
        """Whether a warning for `key` went out in the last minute; if not, one goes now. A
        broken device repeats itself every second, and a store that stays locked or full, or
        a buffer that stays full, every flush."""
        if now - self._warned_s.get(key, -math.inf) < 60.0:
            return True
        self._warned_s[key] = now
        return False

    def _warn_once_a_minute(self, key: str, now: float, message: str) -> None:
        """A warning at most once a minute per `key`, the repeats at debug level."""
        log.log(logging.DEBUG if self._warned_lately(key, now) else logging.WARNING, "%s", message)

    def _log_refusal(self, reason: str, row: TelemetryRow, now: float) -> None:
        """A warning per reason at most once a minute (a broken device repeats itself every
        second), the rest at debug level; `refused` counts them all."""
        if self._warned_lately(reason, now):
            log.debug("refused a snapshot of %r at t=%.3f: %s", row.device, row.t_s, REFUSALS[reason])
            return
        if reason == "ahead":
            why = (
                f"dated {row.t_s - now:.0f} s ahead of this host's clock (limit "
                f"{self.limits.max_ahead_s:g} s): check that device's clock"
            )
        elif reason == "behind":
            why = f"dated {now - row.t_s:.0f} s ago, past the {self.limits.retention_s:g}-s retention"
            why += ": check that device's clock"
        else:
            why = f"already recording {self.limits.max_devices} devices (--max-devices raises it)"
        log.warning(
            "refused a snapshot of %r %s; %d refused so far", row.device, why, sum(self.refused.values())
        )

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
        except (StoreBusyError, StoreWriteError) as exc:  # locked, disk full: it may heal
            self._warn_once_a_minute(
                "store",
                self._clock(),
                f"cannot write the run store now ({exc}): {len(rows)} snapshots kept for later",
            )
            self._requeue(rows)
            return 0
        except _ROW_ERRORS:
            written = self._write_one_by_one(rows)
        self.written += written
        self._trim()
        return written

    def _trim(self) -> None:
        """Bring devices past their row limit back to it, oldest rows first."""
        with self._lock:
            over = self._admission.over_limit()
        for device in over:
            try:
                rows = self.store.trim_telemetry(device, self.limits.max_rows_per_device)
            except (StoreBusyError, StoreWriteError) as exc:
                log.warning("cannot trim %r's snapshots now (%s); trying after the next flush", device, exc)
                return
            with self._lock:
                self._admission.trimmed(device, rows)
            log.info("trimmed %r to its newest %d snapshots (the per-device limit)", device, rows)

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
            except _ROW_ERRORS as exc:
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
        """Delete rows past the retention and rows dated ahead of the clock (recorded before
        they were refused, or by another writer); recount what each device holds."""
        pruned = self.store.prune_telemetry(*self.limits.prune_window(self._clock()))
        counts = self._rows_in_store()
        with self._lock:
            self._admission.recount(counts, (row.device for row in self._buffer))
        return pruned

    def _prune_now(self) -> bool:
        """Prune; False when the store cannot be written now (try again soon)."""
        try:
            pruned = self.prune()
        except (StoreBusyError, StoreWriteError) as exc:
            log.warning("cannot prune the run store now (%s); trying again in a minute", exc)
            return False
        if pruned:
            log.info("pruned %d snapshots outside the retention or dated ahead of the clock", pruned)
        return True

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Flush every `flush_s` until `stop` is set (or `duration_s` has passed); prune hourly.
        Raises the subscriber's MqttSecurityError: wrong TLS or login settings never heal."""
        started = time.monotonic()
        deadline = None if duration_s is None else started + duration_s
        next_prune = 0.0  # on the first pass: the store may hold future-dated rows from before
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
                next_prune = time.monotonic() + (3600.0 if self._prune_now() else 60.0)
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.flush()

    def close(self) -> None:
        self.subscriber.close()
        try:
            self.flush()
        finally:
            self.store.close()
