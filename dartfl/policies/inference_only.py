"""`inference-only`: never trains. The latency reference every other policy is held to."""

from __future__ import annotations

from dartfl.policies.base import Policy
from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["InferenceOnly"]


class InferenceOnly(Policy):
    def __init__(self, loss_weighting: str = "uniform") -> None:
        self.name = "inference-only"
        self.loss_weighting = loss_weighting

    def decide(self, obs: Observation) -> Allocation:
        shares = uniform_shares(obs.num_tasks)
        return Allocation(1.0, shares, loss_weights(self.loss_weighting, shares), 0, obs.max_batch)
