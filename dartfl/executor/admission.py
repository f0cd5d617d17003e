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
once: serving it would only take the device from requests that still can (docs/allocator.md,
"Queues"). `DeadlineAdmission` applies both rules for the executor, and has each such miss
judged (`MissCauses`: did training or the core split cause it).
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
    plans to; and once queued, when even a batch of one started now would finish late.
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
        queues, counts = self.queues, self.causes.counts
        fixed, per = self.prices.inference(costs)
        expired: list[tuple[int, R, float, float]] = []
        for k, times in enumerate(queues.times):
            finish = now_s + fixed[k] + per[k]  # of a batch of one, started now
            if not times or times[0] + queues.slo_s[k] >= finish:
                continue
            requests, arrivals = queues.pop_due_before(k, finish)
            counts.misses[k] += len(requests)
            # On the whole device it could have started `lane_s` sooner.
            lane_s = fixed[k] + per[k] - costs.batch_fixed_s[k] - costs.per_request_s[k]
            causes = self.causes.expired(k, finish, arrivals, lane_s, costs)
            expired += [(k, r, delay, cause) for r, (delay, cause) in zip(requests, causes, strict=True)]
        return expired
