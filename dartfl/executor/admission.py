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

What it admits also expires once it can no longer make its deadline, even served alone and at
once, or once the batch about to start would end past its deadline: serving it would only
take the device from requests that still can (docs/allocator.md, "Queues"). `DeadlineAdmission`
applies these rules for the executor, and has each such miss judged (`MissCauses`: did
training or the core split cause it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from dartfl.executor.costs import CostModel
from dartfl.executor.lanes import ServingLanePrices
from dartfl.executor.misses import MissCauses
from dartfl.executor.queues import TaskQueues

__all__ = ["AdmissionMargin", "DeadlineAdmission", "earliest_finish_s"]

R = TypeVar("R")


def earliest_finish_s(
    now_s: float,
    busy_until_s: float,
    task: int,
    queues: TaskQueues[Any],
    slo_s: float,
    batch_fixed_s: Sequence[float],
    per_request_s: Sequence[float],
    max_batch: int,
) -> float:
    """The earliest time a request of `task` (with `slo_s` of its SLO left) arriving at `now_s`
    can be answered, with `queues` as they are now."""
    own = len(queues.times[task])
    n = own + 1
    batch_head = (own // max_batch) * max_batch  # where the newcomer's batch starts in its queue
    if batch_head < own:
        head_due_s = queues.arrival_at(task, batch_head) + queues.slo_s[task]
    else:
        head_due_s = now_s + slo_s
    t = max(now_s, busy_until_s)
    for k in range(len(queues.times)):
        if k != task:
            due = queues.due_before(k, head_due_s)
            if due:
                t += math.ceil(due / max_batch) * batch_fixed_s[k] + per_request_s[k] * due
    return t + n * per_request_s[task] + math.ceil(n / max_batch) * batch_fixed_s[task]


class AdmissionMargin:
    """A closed loop on the bound: the share of the SLO admission plans to, `fraction`.

    On a real device the bound is an estimate, not a lower bound: the cost model is a mean
    fit, batches vary, and replies take time to reach the requester. Admitting up to the
    deadline then lets about half of what is admitted at the edge miss (issue 16: served p50
    297 ms under a 250 ms SLO at 1.5x capacity). So the agent plans to `fraction` of the SLO
    and steers it, as a stochastic-approximation quantile tracker, until `target` of the
    admitted requests miss: each on-time answer raises it by `step` x target, each late one
    lowers it by `step` x (1 - target); in equilibrium P(late) = target. It stays at 1 while
    fewer than `target` miss, and never goes below `floor`. The simulator keeps the plain
    bound (its costs are exact).
    """

    __slots__ = ("floor", "fraction", "step", "target")

    def __init__(self, target: float, step: float = 0.004, floor: float = 0.25) -> None:
        self.target, self.step, self.floor = target, step, floor
        self.fraction = 1.0

    def answered(self, late: int, on_time: int) -> None:
        """`late` and `on_time` admitted requests were answered."""
        change = self.step * (self.target * on_time - (1.0 - self.target) * late)
        self.fraction = min(1.0, max(self.floor, self.fraction + change))


class DeadlineAdmission(Generic[R]):
    """Refuses a request that cannot make its SLO: at admission, when even its earliest finish
    at the serving lane's prices (`earliest_finish_s`) misses the share of its SLO the margin
    plans to; and once queued, when even a batch of one started now would finish late, or the
    batch about to start would.
    `miss_target`: the share of admitted requests that may miss, steered by an `AdmissionMargin`
    (None: plan to the bound alone, as the simulator does)."""

    __slots__ = ("causes", "margin", "max_batch", "past_deadline", "prices", "queues")

    def __init__(
        self,
        queues: TaskQueues[R],
        prices: ServingLanePrices,
        max_batch: int,
        miss_target: float | None,
        causes: MissCauses,
    ) -> None:
        self.queues = queues
        self.prices = prices
        self.max_batch = max_batch
        self.margin = AdmissionMargin(miss_target) if miss_target is not None else None
        self.causes = causes
        self.past_deadline = 0  # requests refused because they could not make their SLO

    def refusal(
        self,
        now_s: float,
        task: int,
        arrival_s: float,
        waited_s: float,
        busy_until_s: float,
        costs: CostModel,
    ) -> tuple[float, float] | None:
        """Whether a request of `task` that arrived at `arrival_s` (it waited `waited_s` on its way
        here) can make its deadline, with the work item running now expected to end at
        `busy_until_s`. None: it can. Otherwise it is refused: the training delay that caused
        its miss and when that started, or (0, NaN) where training did not."""
        slo_s = self.queues.slo_s[task]
        deadline = arrival_s + slo_s
        planned = deadline if self.margin is None else arrival_s + self.margin.fraction * slo_s

        def earliest(fixed: Sequence[float], per: Sequence[float]) -> float:
            left_s = deadline - now_s  # of its SLO, after its wait on the way here
            return earliest_finish_s(
                now_s, busy_until_s, task, self.queues, left_s, fixed, per, self.max_batch
            )

        finish = earliest(*self.prices.inference(costs))
        if finish <= planned:
            return None
        self.past_deadline += 1
        whole = earliest(costs.batch_fixed_s, costs.per_request_s) if self.prices.split is not None else None
        return self.causes.refused(now_s, task, arrival_s, waited_s, finish, whole, costs)

    def answered(self, late: int, on_time: int) -> None:
        """`late` and `on_time` admitted requests were answered: the margin steers by them."""
        if self.margin is not None:
            self.margin.answered(late, on_time)

    def expire(self, now_s: float, costs: CostModel) -> list[tuple[int, R, float, float]]:
        """Pop the queued requests that can no longer be answered in time, even alone and
        starting now, and count each a miss. Returns them as (task, request, the training delay
        that caused the miss or 0, its cause)."""
        fixed, per = self.prices.inference(costs)
        expired: list[tuple[int, R, float, float]] = []
        for k, times in enumerate(self.queues.times):
            finish = now_s + fixed[k] + per[k]  # of a batch of one, started now
            if times and times[0] + self.queues.slo_s[k] < finish:
                expired += self._pop_due_before(k, finish, 1, costs)
        return expired

    def expire_late_in_batch(
        self, now_s: float, task: int, max_batch: int, costs: CostModel
    ) -> list[tuple[int, R, float, float]]:
        """Pop the requests at the head of `task`'s queue that the batch about to start now
        would answer late, and count each a miss (returned as `expire` returns them).

        Under overload a full batch's head is often due before the batch ends: answered, it
        is a miss that took a batch slot. Refused instead, the slot goes to the next request,
        which (one SLO per task, first in first out) is due no sooner than the batch ends, so
        the batch is late for none of what it now holds, and the device answers in time at
        least as many as it did. What is popped was lost whatever the device did next."""
        times = self.queues.times[task]
        if not times:
            return []
        fixed, per = self.prices.inference(costs)
        size = min(len(times), max_batch)
        finish = now_s + fixed[task] + per[task] * size
        if times[0] + self.queues.slo_s[task] >= finish:
            return []
        return self._pop_due_before(task, finish, size, costs)

    def _pop_due_before(
        self, task: int, finish_s: float, size: int, costs: CostModel
    ) -> list[tuple[int, R, float, float]]:
        """Pop `task`'s requests due before `finish_s`, when a batch of `size` started now would
        answer them, and judge each miss (`MissCauses.expired`)."""
        requests, arrivals = self.queues.pop_due_before(task, finish_s)
        self.causes.counts.misses[task] += len(requests)
        # On the whole device that batch would have been `lane_s` shorter.
        fixed, per = self.prices.inference(costs)
        lane_s = fixed[task] - costs.batch_fixed_s[task] + (per[task] - costs.per_request_s[task]) * size
        causes = self.causes.expired(task, finish_s, arrivals, lane_s, costs)
        return [(task, r, delay, cause) for r, (delay, cause) in zip(requests, causes, strict=True)]
