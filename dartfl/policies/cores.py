"""`cores:<k>[,m]`: a static split of the device's cores, the baseline of spatial sharing.

Inference runs on k cores, training on the other N - k in full-size steps, concurrently.
The serving lane gives its idle time to training steps of m samples (0, the default: it
only serves), under strict priority, as `inference-first:m` does on the whole device. k >= N
is time sharing on every core (`inference-first:m`, or `inference-only` for m = 0).
"""

from __future__ import annotations

from dartfl.policies.base import Policy
from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["StaticCores"]


class StaticCores(Policy):
    def __init__(self, inference_cores: int, microbatch: int = 0, loss_weighting: str = "uniform") -> None:
        self.inference_cores = inference_cores
        self.microbatch = microbatch
        self.name = f"cores:{inference_cores}" + (f",{microbatch}" if microbatch else "")
        self.loss_weighting = loss_weighting

    def decide(self, obs: Observation) -> Allocation:
        shares = uniform_shares(obs.num_tasks)
        return Allocation(
            1.0,
            shares,
            loss_weights(self.loss_weighting, shares),
            min(self.microbatch, obs.max_microbatch),
            obs.max_batch,
            inference_cores=self.inference_cores,
        )
