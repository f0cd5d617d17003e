"""How a split device's lanes follow the allocation: core moves at boundaries, and the reclaim.

A device whose driver runs two lanes (dartfl.executor.lanes) holds the split the allocation
asks for (`inference_cores`), moved only when a lane falls free, since items are not
preemptible. Work conservation overrides it: with no training to do, every core serves; and
once the serving lane has fallen behind, where the allocation allows it to reclaim the
training lane's cores (`reclaim_when_behind`), every core serves until the next tick.

The reclaim is the split's counterpart of `ShareGate`: a decision holds for a control period,
and a burst that starts inside one finds the split as it was. Time sharing answers at every
step boundary (the gate serves a queue first); a split asks at each of the training lane's
step boundaries whether the serving lane has fallen behind, and if so the training lane gives
its cores up there instead of starting a step (docs/allocator.md, "Reclaiming the cores").
Behind means either of two things: the queue's work will not fit before its earliest
deadline (`serving_behind`), or the serving lane has lost, since the last boundary, a request
that the whole device would have answered in time (refused, expired or late: the split's own
misses, `MissCauses.split_miss`). The second is what admission and expiry leave of the first:
they refuse what the lane cannot serve in time, so its queue always looks as if it keeps up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dartfl.estimators import EwmaRates
from dartfl.executor.costs import CostModel
from dartfl.executor.lanes import CoreLanes, ServingLanePrices, step_prices
from dartfl.executor.misses import MissCauses
from dartfl.executor.queues import TaskQueues
from dartfl.executor.work import INFERENCE_LANE, CoreSwitch, Lane
from dartfl.types import Allocation

__all__ = ["LaneControl", "serving_behind"]


def serving_behind(
    now_s: float,
    queues: TaskQueues[Any],
    fast_rates_per_s: Sequence[float],
    batch_fixed_s: Sequence[float],
    per_request_s: Sequence[float],
    training_step_s: Callable[[], float],
) -> bool:
    """Whether the serving lane, at the prices `batch_fixed_s` and `per_request_s`, has fallen
    behind: its queue's work, plus the lag one more training step (`training_step_s`, asked
    only when requests wait) would add at the arrivals' fast rates, exceeds the time left to
    the earliest queued deadline."""
    fixed, per = batch_fixed_s, per_request_s
    work, rho, left_s = 0.0, 0.0, math.inf
    for k, (times, rate) in enumerate(zip(queues.times, fast_rates_per_s, strict=True)):
        rho += rate * per[k]
        if times:
            work += fixed[k] + per[k] * len(times)
            left_s = min(left_s, times[0] + queues.slo_s[k] - now_s)
    if work == 0.0:
        return False
    return work + max(0.0, rho - 1.0) * training_step_s() > left_s


class LaneControl:
    """The lanes of a split device under the allocation: which cores each lane takes at its
    boundary, whether the training lane's cores are reclaimed, and what a finished item's
    duration was without the other lane's interference."""

    __slots__ = (
        "causes",
        "lanes",
        "max_microbatch",
        "prices",
        "queues",
        "rates",
        "reclaimed",
        "reclaims",
        "split_misses_seen",
    )

    def __init__(
        self,
        lanes: CoreLanes,
        prices: ServingLanePrices,
        queues: TaskQueues[Any],
        rates: EwmaRates,
        max_microbatch: int,
        causes: MissCauses,
    ) -> None:
        self.lanes = lanes
        self.prices = prices  # the serving lane's, refreshed whenever its cores move
        self.queues = queues
        self.rates = rates
        self.max_microbatch = max_microbatch
        self.reclaimed = False  # the serving lane fell behind: every core serves until the tick
        self.reclaims = 0  # how often that happened
        self.causes = causes
        self.split_misses_seen = 0  # the split's misses up to the training lane's last boundary

    def decided(self, alloc: Allocation, costs: CostModel) -> None:
        """A tick decided `alloc`: the split it asks for, tried afresh at the lanes' boundaries."""
        self.reclaimed = False
        self.lanes.want(alloc.inference_cores or self.lanes.total)
        self.prices.refresh(costs, self.lanes)  # the cost model may have learnt

    def boundary(
        self, lane: Lane, now_s: float, alloc: Allocation, may_train: bool, costs: CostModel
    ) -> CoreSwitch | None:
        """`lane` fell free at `now_s`: the `CoreSwitch` it runs first, where its cores move
        (None: it keeps them). `may_train`: whether training may run at all now."""
        lanes, i = self.lanes, 0 if lane == INFERENCE_LANE else 1
        cores = lanes.total
        # Work conservation: with no training to do, every core serves; nor once the serving
        # lane has fallen behind, where the allocation allows it to reclaim the training lane.
        reclaimable = i == 1 and alloc.reclaim_when_behind and lanes.held[1] > 0
        if reclaimable and not self.reclaimed and self._serving_behind(now_s, alloc, costs):
            self.reclaimed = True
            self.reclaims += 1
        if i == 1:
            self.split_misses_seen = self.causes.split_misses_total
        split = may_train and not self.reclaimed
        lanes.want((alloc.inference_cores or cores) if split else cores)
        held, moved = lanes.held[i], lanes.move(i)
        if moved is None:
            return None
        lanes.held[i] = moved
        if i == 0:
            self.prices.refresh(costs, lanes)
        return CoreSwitch(lane, held, moved, now_s)

    def solo(self, lane: int, now_s: float, duration_s: float, cores: int) -> tuple[float, int | None]:
        """What the cost model learns from an item that ran `duration_s` on `cores` of `lane`:
        its duration without the other lane's interference, and its cores (None: the whole
        device)."""
        solo_s = self.lanes.solo_s(lane, now_s, duration_s, self.prices.slowdown[lane])
        return solo_s, cores if cores < self.lanes.total else None

    def _serving_behind(self, now_s: float, alloc: Allocation, costs: CostModel) -> bool:
        if self.causes.split_misses_total > self.split_misses_seen:
            return True  # the lane lost a request that the whole device would have answered
        fixed, per = self.prices.inference(costs)

        def training_step_s() -> float:
            """How long the training lane's next step would hold its cores."""
            split = costs.split
            if split is None:
                return 0.0
            m = alloc.split_microbatch
            m = self.max_microbatch if m is None else m
            step_fixed, per_sample = step_prices(split, max(1, self.lanes.held[1]), self.prices.slowdown[1])
            return step_fixed + per_sample * m

        return serving_behind(now_s, self.queues, self.rates.fast_rates_per_s, fixed, per, training_step_s)
