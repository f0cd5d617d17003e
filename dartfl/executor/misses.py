"""Why a request missed its SLO: training held it back, the core split slowed it, or neither.

A request misses in one of three ways: refused at admission because it could not make its
deadline (dartfl/executor/admission.py), expired in its queue once it no longer could
(`DeviceExecutor.expire_hopeless`), or answered late. `MissCauses` judges all three alike,
into the period's counts the policy observes (`PeriodCounts`), from the evidence the
executor's loop keeps: the training delay of the busy period (`BusyPeriodDelay`, with the
part a core split added), the step running on the serving lane, and for a refusal the
training that ran while the request was on its way (`TrainingTimeline`). dartfl/attribution.py
says why each of them counts.

- A miss that the split's slower serving lane alone explains (it would have made its
  deadline that much sooner) is a split miss. Not capped as training's are: the split is a
  bonus, judged by all it may have cost (docs/allocator.md, "What the split has cost").
- A miss that the training delay explains is a training miss, while the delay can account
  for one more: inference-only, with that much more device time, could have served only so
  many more requests (`BusyPeriodDelay.charge`, at `catch_up_per_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dartfl.attribution import BusyPeriodDelay, TrainingTimeline, is_training_miss
from dartfl.executor.costs import CostModel
from dartfl.executor.lanes import CoreLanes
from dartfl.executor.periods import PeriodCounts
from dartfl.executor.work import InferenceBatch

__all__ = ["MissCauses", "catch_up_per_s"]


def catch_up_per_s(costs: CostModel) -> float:
    """Requests inference-only could serve in one more second of the whole device: one
    per its cheapest marginal per-request cost (a request added to a batch that runs anyway)."""
    return 1.0 / max(min(costs.per_request_s), 1e-9)


class MissCauses:
    """The evidence of what training has held back on one device, and the verdict on each miss.

    The executor's loop feeds the evidence (a request queued, a step started or ended, a batch
    started, the device free and empty); `refused`, `expired` and `answered` count the causes
    of the misses of the three kinds into `counts`."""

    __slots__ = (
        "counts",
        "delay",
        "lanes",
        "request_path_up_since_s",
        "serving_step",
        "slo_s",
        "split_misses_total",
        "timeline",
    )

    def __init__(self, slo_s: Sequence[float], counts: PeriodCounts, lanes: CoreLanes | None) -> None:
        self.slo_s = tuple(slo_s)
        self.counts = counts
        self.lanes = lanes  # None: the device is never split
        # Which late answers training caused: the training time of each busy period.
        self.delay = BusyPeriodDelay()
        self.timeline = TrainingTimeline()  # what training may have cost a request in transit
        # Since when the request path (an agent's broker link) is up: training that ran while it
        # was down held no request back on its way in (`request_path_up`).
        self.request_path_up_since_s = -math.inf
        self.serving_step: tuple[float, float] | None = None  # (start, expected end)
        self.split_misses_total = 0  # every miss the split alone explained, never reset

    def refused(
        self,
        now_s: float,
        task: int,
        arrival_s: float,
        waited_s: float,
        finish_s: float,
        whole_finish_s: float | None,
        costs: CostModel,
    ) -> tuple[float, float]:
        """A request of `task` that arrived at `arrival_s` (it waited `waited_s` on its way) is
        refused now: its earliest finish, `finish_s`, is past its deadline; `whole_finish_s` is
        the same on the whole device when it is split (None: not split). Returns the training
        delay that caused the miss and when it started, or (0, NaN): training did not."""
        deadline = arrival_s + self.slo_s[task]
        busy = self.delay
        delay, cause = busy.delay_s, busy.cause_s
        split_s = busy.split_s
        if self.serving_step is not None:
            start, end = self.serving_step
            delay, cause = busy.delay_behind_step_s(now_s, start, end), start
        # Split: the cores given to training are delay too.
        if whole_finish_s is not None and finish_s > whole_finish_s:
            delay, cause = delay + finish_s - whole_finish_s, now_s
            split_s += finish_s - whole_finish_s
        self.split_miss(task, finish_s, deadline, split_s)
        if waited_s > 0.0:  # training starves the request path too: its part of the transit wait
            # At most the wait itself: the timeline caps its sum at the window [arrival, now].
            # Not before the path was last up: while the broker was unreachable, requests waited
            # for it, not for the CPU, and the idle device trained all along (a 10-s broker
            # restart charged thousands of refusals to training and stopped it for good).
            since = max(arrival_s, self.request_path_up_since_s)
            starved = self.timeline.seconds_since(since, now_s, self._steps_running())
            if starved > 0.0:
                delay, cause = delay + starved, now_s
        if delay > 0.0 and finish_s - delay <= deadline and busy.charge(delay, catch_up_per_s(costs)):
            self.counts.training_misses[task] += 1
            return delay, cause
        return 0.0, math.nan

    def expired(
        self, task: int, finish_s: float, arrivals_s: Sequence[float], lane_s: float, costs: CostModel
    ) -> list[tuple[float, float]]:
        """Queued requests of `task` that arrived at `arrivals_s` expire: the earliest they could
        be answered is `finish_s`, `lane_s` later than on the whole device. Returns per request
        the training delay that caused its miss and its cause, or (0, NaN): training did not."""
        busy = self.delay
        causes: list[tuple[float, float]] = []
        for arrived in arrivals_s:
            self.split_miss(task, finish_s, arrived + self.slo_s[task], busy.split_s + max(0.0, lane_s))
            caused = busy.delay_s > 0.0 and finish_s - busy.delay_s <= arrived + self.slo_s[task]
            if caused and busy.charge(busy.delay_s, catch_up_per_s(costs)):
                self.counts.training_misses[task] += 1
                causes.append((busy.delay_s, busy.cause_s))
            else:
                causes.append((0.0, math.nan))
        return causes

    def answered(
        self, batch: InferenceBatch[Any], now_s: float, costs: CostModel
    ) -> tuple[int, tuple[int, ...]]:
        """`batch` was answered at `now_s`: how many of it were late, and the positions in it
        of those training made miss (usually none)."""
        k = batch.task
        slo, delay = self.slo_s[k], batch.training_delay_s
        late = 0
        caused: tuple[int, ...] = ()
        for i, arrived in enumerate(batch.arrivals_s):
            if now_s - arrived > slo:
                late += 1
                self.split_miss(k, now_s, arrived + slo, batch.split_delay_s)
                if is_training_miss(now_s - arrived, slo, delay) and self.delay.charge(
                    delay, catch_up_per_s(costs)
                ):
                    self.counts.training_misses[k] += 1
                    caused += (i,)
        return late, caused

    def split_miss(self, task: int, finish_s: float, deadline_s: float, split_s: float) -> None:
        """Count a miss that the split's slower serving lane alone explains: it would have made
        its deadline `split_s` sooner."""
        if split_s > 0.0 and finish_s - split_s <= deadline_s:
            self.counts.split_misses[task] += 1
            self.split_misses_total += 1

    def _steps_running(self) -> tuple[float, ...]:
        """Start times of the training steps running now, on either lane."""
        running: tuple[float, ...] = () if self.serving_step is None else (self.serving_step[0],)
        lanes = self.lanes
        if lanes is not None and lanes.busy_since_s[1] >= 0.0:
            running += (lanes.busy_since_s[1],)
        return running
