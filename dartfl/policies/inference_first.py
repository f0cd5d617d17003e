"""`inference-first[:m]`: strict priority to inference, training microbatches of a fixed size.

The common, strong baseline: the device trains only when no request waits, and every
training step has m samples (default: the profile's largest microbatch). Its weakness is the
fixed m: a request that arrives just after a step starts waits the whole step.
"""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["InferenceFirst"]


class InferenceFirst(EvenSplit):
    def __init__(self, microbatch: int | None = None, loss_weighting: str = "uniform") -> None:
        super().__init__(loss_weighting)
        self.microbatch = microbatch
        self.name = "inference-first" if microbatch is None else f"inference-first:{microbatch}"

    def decide(self, obs: Observation) -> Allocation:
        m = obs.max_microbatch if self.microbatch is None else min(self.microbatch, obs.max_microbatch)
        return self.allocation(obs, 1.0, m)
