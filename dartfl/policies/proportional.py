"""`proportional`: inference share proportional to the estimated inference load.

x = sum_k (lambda_k + Q_k / period) * c_k(b_max), clipped to [0, 1]: the fraction of the
device that serving the arrival rate and draining the backlog within one period needs at the
cheapest per-request cost. Training always uses full-size microbatches.
"""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["Proportional"]


class Proportional(EvenSplit):
    name = "proportional"

    def decide(self, obs: Observation) -> Allocation:
        b = obs.max_batch
        load = 0.0
        for rate, q, fixed, per in zip(
            obs.arrival_rate_per_s, obs.backlog, obs.batch_fixed_s, obs.per_request_s, strict=True
        ):
            load += (rate + q / obs.period_s) * (per + fixed / b)
        return self.allocation(obs, min(1.0, load), obs.max_microbatch)
