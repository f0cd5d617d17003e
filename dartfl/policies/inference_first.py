"""`inference-first[:m]`: strict priority to inference, training microbatches of a fixed size.

The common, strong baseline: the device trains only when no request waits, and every
training step has m samples (default: the profile's largest microbatch). Its weakness is the
fixed m: a request that arrives just after a step starts waits the whole step.
"""

from __future__ import annotations

from dartfl.policies.base import Policy
from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["InferenceFirst"]


class InferenceFirst(Policy):
    def __init__(self, microbatch: int | None = None, loss_weighting: str = "uniform") -> None:
        self.microbatch = microbatch
        self.name = "inference-first" if microbatch is None else f"inference-first:{microbatch}"
        self.loss_weighting = loss_weighting

    def decide(self, obs: Observation) -> Allocation:
        m = obs.max_microbatch if self.microbatch is None else min(self.microbatch, obs.max_microbatch)
        shares = uniform_shares(obs.num_tasks)
        return Allocation(1.0, shares, loss_weights(self.loss_weighting, shares), m, obs.max_batch)
