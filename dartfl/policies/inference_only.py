"""`inference-only`: never trains. The latency reference every other policy is held to."""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["InferenceOnly"]


class InferenceOnly(EvenSplit):
    name = "inference-only"

    def decide(self, obs: Observation) -> Allocation:
        return self.allocation(obs, 1.0, 0)
