"""Deadline-aware admission: refuse at once a request that cannot be answered within its SLO.

Under overload a bounded queue alone lets admitted requests wait many times their SLO (issue
16: p50 7.5-10.2 s against a 250 ms SLO at 0.8-1.5x capacity): every one of them is a miss, and
serving them takes the device's time from requests that could still make it. So a request is
refused (`queue-full`, with a reply) when even the fastest service the device can give it
misses its deadline. Earliest deadline first serves a task's queue a batch at a time, with
the newcomer in its own task's batches, so it is answered no sooner than

    the end of the running work item
    + one batch of every other task whose head is due before its own task's head
    + its own task's queued requests and itself, in batches of at most `max_batch`

at the device's costs, with nothing for training. That is a lower bound on its finish, so
admission never refuses a request that any policy could have answered in time (a test checks
it against the simulator); what it admits can still miss, behind training or behind later
arrivals with earlier deadlines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["earliest_finish_s"]


def earliest_finish_s(
    now_s: float,
    busy_until_s: float,
    task: int,
    backlog: Sequence[int],
    head_deadlines_s: Sequence[float],
    slo_s: float,
    batch_fixed_s: Sequence[float],
    per_request_s: Sequence[float],
    max_batch: int,
) -> float:
    """The earliest time a request of `task` (SLO `slo_s`) arriving at `now_s` can be answered."""
    own = backlog[task]
    own_head = head_deadlines_s[task] if own else now_s + slo_s
    t = max(now_s, busy_until_s)
    for k, queued in enumerate(backlog):
        if k != task and queued and head_deadlines_s[k] < own_head:
            t += batch_fixed_s[k] + per_request_s[k] * min(queued, max_batch)
    n = own + 1
    return t + n * per_request_s[task] + math.ceil(n / max_batch) * batch_fixed_s[task]
