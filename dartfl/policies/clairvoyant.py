"""`clairvoyant`: a reference that knows future arrivals (simulator only).

At every training step it picks the largest microbatch after which every request arriving
during the step still meets its SLO when served in one batch right after; if even one
sample would make someone miss, it leaves the device idle until that request comes. It is a
greedy oracle, not the true optimum, but it bounds what foresight buys: DART's distance to
it is the price of not knowing the future.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dartfl.policies.base import FutureAwarePolicy
from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["Clairvoyant"]


class Clairvoyant(FutureAwarePolicy):
    def __init__(self, loss_weighting: str = "uniform") -> None:
        self.name = "clairvoyant"
        self.loss_weighting = loss_weighting

    def decide(self, obs: Observation) -> Allocation:
        shares = uniform_shares(obs.num_tasks)
        return Allocation(
            1.0, shares, loss_weights(self.loss_weighting, shares), obs.max_microbatch, obs.max_batch
        )

    def choose_microbatch(
        self,
        now_s: float,
        future_times_s: npt.NDArray[np.float64],
        slo_s: float,
        batch_fixed_s: float,
        per_request_s: float,
        microbatch_fixed_s: float,
        per_sample_s: float,
        max_microbatch: int,
    ) -> int:
        """Largest m whose step delays no future arrival past `slo_s` (0: do not train now).

        `future_times_s` are the sorted arrival times at or after `now_s`; the step is assumed
        to start on an empty queue, as it does under strict inference priority.
        """
        if future_times_s.size == 0:
            return max_microbatch
        first = float(future_times_s[0])
        for m in range(max_microbatch, 0, -1):
            end = now_s + microbatch_fixed_s + per_sample_s * m
            if first >= end:
                return m  # nobody arrives during the step
            waiting = int(np.searchsorted(future_times_s, end, side="left"))
            finish = end + batch_fixed_s + per_request_s * waiting
            if finish - first <= slo_s:
                return m
        return 0
