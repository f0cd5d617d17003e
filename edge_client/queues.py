"""Bounded per-task request queues shared by the MQTT ingress and the executor thread.

The ingress thread (paho's network loop) offers requests; the executor pops batches. A full
queue refuses the request at once, so memory stays bounded whatever arrives; the caller
sends the explicit rejection reply. Counters since the last control period feed the
allocator's Observation.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PeriodCounts", "QueuedRequest", "RequestQueues"]


@dataclass(frozen=True, slots=True, eq=False)
class QueuedRequest:
    """A decoded request waiting for service; `received_s` is the agent's monotonic clock."""

    id: str
    task: int
    reply_to: str
    image: npt.NDArray[np.uint8]
    received_s: float
    correlation_data: bytes | None = None  # MQTT 5: echoed on the reply


@dataclass(frozen=True, slots=True)
class PeriodCounts:
    arrivals: tuple[int, ...]
    misses: tuple[int, ...]
    training_misses: tuple[int, ...]


class RequestQueues:
    def __init__(self, num_tasks: int, capacity: int, slo_s: Sequence[float]) -> None:
        self.capacity = capacity
        self.slo_s = tuple(slo_s)
        self._queues: list[deque[QueuedRequest]] = [deque() for _ in range(num_tasks)]
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)  # notified on every accepted request
        self._arrivals = [0] * num_tasks
        self._misses = [0] * num_tasks
        self._training_misses = [0] * num_tasks
        self.closed = False

    def offer(self, request: QueuedRequest) -> bool:
        """Queue the request; False if its queue is full or the agent is shutting down."""
        with self._lock:
            k = request.task
            self._arrivals[k] += 1
            if self.closed or len(self._queues[k]) >= self.capacity:
                self._misses[k] += 1  # a rejection counts as a miss
                return False
            self._queues[k].append(request)
            self.changed.notify()
            return True

    def backlog(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(len(q) for q in self._queues)

    def total(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues)

    def oldest_age_s(self, now_s: float) -> tuple[float, ...]:
        with self._lock:
            return tuple(now_s - q[0].received_s if q else 0.0 for q in self._queues)

    def head_deadlines_s(self) -> list[float]:
        with self._lock:
            return [q[0].received_s + self.slo_s[k] if q else math.inf for k, q in enumerate(self._queues)]

    def pop_batch(self, task: int, max_size: int) -> list[QueuedRequest]:
        with self._lock:
            q = self._queues[task]
            return [q.popleft() for _ in range(min(max_size, len(q)))]

    def record_answer(self, task: int, late: bool, waited_behind_training: bool) -> None:
        if late:
            with self._lock:
                self._misses[task] += 1
                if waited_behind_training:
                    self._training_misses[task] += 1

    def take_period_counts(self) -> PeriodCounts:
        """Counts since the previous call (one control period), then reset them."""
        with self._lock:
            counts = PeriodCounts(tuple(self._arrivals), tuple(self._misses), tuple(self._training_misses))
            k = len(self._queues)
            self._arrivals, self._misses, self._training_misses = [0] * k, [0] * k, [0] * k
            return counts

    def close(self) -> None:
        """Refuse further requests; what is queued stays for the executor to drain."""
        with self._lock:
            self.closed = True
            self.changed.notify_all()

    def drain_all(self) -> list[QueuedRequest]:
        """Remove and return everything still queued (to reject it)."""
        with self._lock:
            left = [r for q in self._queues for r in q]
            for q in self._queues:
                q.clear()
            return left

    def wait(self, timeout_s: float) -> None:
        """Block until a request is queued or the timeout passes."""
        with self._lock:
            if not any(self._queues) and not self.closed:
                self.changed.wait(timeout_s)
