"""`static:<x>`: a fixed inference share x, full-size training microbatches.

When both sides have work the executor gives inference the fraction x of device time; the
executor's work conservation still hands all idle inference time to training.
"""

from __future__ import annotations

from dartfl.policies.base import Policy
from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["StaticShare"]


class StaticShare(Policy):
    def __init__(self, inference_share: float, loss_weighting: str = "uniform") -> None:
        self.inference_share = inference_share
        self.name = f"static:{inference_share:g}"
        self.loss_weighting = loss_weighting

    def decide(self, obs: Observation) -> Allocation:
        shares = uniform_shares(obs.num_tasks)
        return Allocation(
            self.inference_share,
            shares,
            loss_weights(self.loss_weighting, shares),
            obs.max_microbatch,
            obs.max_batch,
        )
