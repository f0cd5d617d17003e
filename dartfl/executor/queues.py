"""`TaskQueues`: the requests a device holds, per task, oldest first.

A queue keeps two parallel deques, the requests' arrival times (what the executor reasons
with: ages, deadlines, lateness) and the driver's handles (what it answers: a simulator's
index, the agent's parsed request). The executor alone pushes and pops them, so the two
deques always have the same length.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

__all__ = ["TaskQueues"]

R = TypeVar("R")


class TaskQueues(Generic[R]):
    """One bounded FIFO per task, with the total held now and the most ever held."""

    def __init__(self, slo_s: Sequence[float], capacity: Sequence[int]) -> None:
        self.slo_s = tuple(slo_s)
        self.capacity = tuple(capacity)
        self.times: list[deque[float]] = [deque() for _ in self.slo_s]
        self.items: list[deque[R]] = [deque() for _ in self.slo_s]
        self.total = 0
        self.peak = 0

    def full(self, task: int) -> bool:
        return len(self.times[task]) >= self.capacity[task]

    def push(self, task: int, arrival_s: float, request: R) -> None:
        self.times[task].append(arrival_s)
        self.items[task].append(request)
        self.total += 1
        if self.total > self.peak:
            self.peak = self.total

    def pop(self, task: int, size: int) -> tuple[list[R], list[float]]:
        """The `size` oldest requests of `task` and their arrival times."""
        times, items = self.times[task], self.items[task]
        self.total -= size
        return [items.popleft() for _ in range(size)], [times.popleft() for _ in range(size)]

    def lengths(self) -> tuple[int, ...]:
        return tuple(len(q) for q in self.times)

    def oldest_arrival_s(self) -> float:
        """When the oldest request waiting in any queue arrived (inf: none waits)."""
        return min((q[0] for q in self.times if q), default=math.inf)

    def oldest_age_s(self, now_s: float) -> tuple[float, ...]:
        return tuple(now_s - q[0] if q else 0.0 for q in self.times)

    def head_deadlines_s(self) -> list[float]:
        """When each queue's oldest request misses its SLO (inf for an empty queue)."""
        return [q[0] + slo if q else math.inf for q, slo in zip(self.times, self.slo_s, strict=True)]

    def due_before(self, task: int, deadline_s: float) -> int:
        """How many of `task`'s queued requests are due before `deadline_s`."""
        times = self.times[task]
        if not times:
            return 0
        latest_arrival = deadline_s - self.slo_s[task]
        if times[-1] < latest_arrival:  # the common case: all of them (equal SLOs, FIFO)
            return len(times)
        if times[0] >= latest_arrival:
            return 0
        return bisect.bisect_left(times, latest_arrival)

    def pop_due_before(self, task: int, deadline_s: float) -> tuple[list[R], list[float]]:
        """Pop `task`'s oldest requests that are due before `deadline_s`, from the head up to
        the first that is not, and their arrival times."""
        times = self.times[task]
        latest_arrival = deadline_s - self.slo_s[task]
        n = 0
        while n < len(times) and times[n] < latest_arrival:
            n += 1
        return self.pop(task, n)

    def arrival_at(self, task: int, position: int) -> float:
        """The arrival time of `task`'s request at `position` (0: the oldest)."""
        return self.times[task][position]

    def drain(self) -> list[tuple[int, R]]:
        """Remove everything, as (task, request)."""
        left = [(k, r) for k, items in enumerate(self.items) for r in items]
        for times, items in zip(self.times, self.items, strict=True):
            times.clear()
            items.clear()
        self.total = 0
        return left
