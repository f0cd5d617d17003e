"""Rolling request statistics for telemetry: latency percentiles and SLO attainment over a
recent window, plus lifetime counters. Bounded memory: the window keeps at most `max_events`.

A rejected request enters the window as a miss without a latency: SLO attainment counts it
(a rejecting, overloaded device must not look healthy), the latency percentiles do not.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["RequestStats", "Window"]


@dataclass(frozen=True, slots=True)
class Window:
    """The last window's latency percentiles and SLO attainment (None without events), and
    the counters since the agent started."""

    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    slo_attainment: float | None
    requests: int
    replies: int
    rejected: int
    errors: int


class RequestStats:
    def __init__(self, window_s: float = 60.0, max_events: int = 100_000) -> None:
        self.window_s = window_s
        # (t, latency or None for a rejection, met)
        self._events: deque[tuple[float, float | None, bool]] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.requests = 0
        self.replies = 0
        self.rejected = 0
        self.errors = 0

    def answered_batch(self, now_s: float, latencies_s: list[float], slo_s: float) -> None:
        """A batch answered at `now_s`, one lock for all of it."""
        with self._lock:
            self.replies += len(latencies_s)
            self._events.extend((now_s, latency, latency <= slo_s) for latency in latencies_s)

    def rejected_now(self, now_s: float, n: int = 1) -> None:
        """`n` requests rejected at `now_s` (queue full, shutting down): misses in the window."""
        with self._lock:
            self.rejected += n
            self._events.extend([(now_s, None, False)] * n)

    def count(self, *, requests: int = 0, errors: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.errors += errors

    def window(self, now_s: float) -> Window:
        """p50/p95/p99 latency (ms) and SLO attainment of answers in the last window."""
        with self._lock:
            while self._events and self._events[0][0] < now_s - self.window_s:
                self._events.popleft()
            events = list(self._events)
            counters = (self.requests, self.replies, self.rejected, self.errors)
        latencies = [e[1] for e in events if e[1] is not None]
        p50 = p95 = p99 = None
        if latencies:
            p50, p95, p99 = (float(v) for v in np.percentile(np.array(latencies) * 1e3, [50, 95, 99]))
        attainment = sum(e[2] for e in events) / len(events) if events else None
        return Window(p50, p95, p99, attainment, *counters)
