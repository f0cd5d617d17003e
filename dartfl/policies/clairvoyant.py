"""`clairvoyant`: a reference that knows future arrivals (simulator only).

At every training step it picks the largest microbatch after which every request arriving
during the step still meets its SLO when served in one batch right after; if even one
sample would make someone miss, it leaves the device idle until that request comes. It is a
greedy oracle, not the true optimum, but it bounds what foresight buys: DART's distance to
it is the price of not knowing the future.
"""

from __future__ import annotations

import numpy as np

from dartfl.policies.base import EvenSplit, FutureAwarePolicy, FutureView
from dartfl.types import Allocation, Observation

__all__ = ["Clairvoyant"]


class Clairvoyant(FutureAwarePolicy, EvenSplit):
    name = "clairvoyant"

    def decide(self, obs: Observation) -> Allocation:
        return self.allocation(obs, 1.0, obs.max_microbatch)

    def choose_microbatch(self, view: FutureView) -> int:
        """Largest m whose step delays no future arrival past the SLO (0: do not train now);
        the step is assumed to start on an empty queue, as it does under strict priority."""
        future, m_max = view.future_times_s, view.max_microbatch
        if future.size == 0:
            return m_max
        first = float(future[0])
        for m in range(m_max, 0, -1):
            end = view.now_s + view.microbatch_fixed_s + view.per_sample_s * m
            if first >= end:
                return m  # nobody arrives during the step
            waiting = int(np.searchsorted(future, end, side="left"))
            finish = end + view.batch_fixed_s + view.per_request_s * waiting
            if finish - first <= view.slo_s:
                return m
        return 0
