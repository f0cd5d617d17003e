"""Rolling request statistics for telemetry: latency percentiles and SLO attainment over a
recent window, plus lifetime counters. Bounded memory: the window keeps at most `max_events`.

A rejected request enters the window as a miss without a latency: SLO attainment counts it
(a rejecting, overloaded device must not look healthy), the latency percentiles do not.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

__all__ = ["RequestStats"]


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

    def answered(self, now_s: float, latency_s: float, met: bool) -> None:
        with self._lock:
            self.replies += 1
            self._events.append((now_s, latency_s, met))

    def rejected_now(self, now_s: float, n: int = 1) -> None:
        """`n` requests rejected at `now_s` (queue full, shutting down): misses in the window."""
        with self._lock:
            self.rejected += n
            self._events.extend([(now_s, None, False)] * n)

    def count(self, *, requests: int = 0, errors: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.errors += errors

    def window(self, now_s: float) -> dict[str, float | int | None]:
        """p50/p95/p99 latency (ms) and SLO attainment of answers in the last window."""
        with self._lock:
            while self._events and self._events[0][0] < now_s - self.window_s:
                self._events.popleft()
            events = list(self._events)
            counters = {
                "requests": self.requests,
                "replies": self.replies,
                "rejected": self.rejected,
                "errors": self.errors,
            }
        latencies = [e[1] for e in events if e[1] is not None]
        p50 = p95 = p99 = None
        if latencies:
            p50, p95, p99 = (float(v) for v in np.percentile(np.array(latencies) * 1e3, [50, 95, 99]))
        attainment = sum(e[2] for e in events) / len(events) if events else None
        return {"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "slo_attainment": attainment, **counters}
