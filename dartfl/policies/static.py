"""`static:<x>`: a fixed inference share x, full-size training microbatches.

When both sides have work the executor gives inference the fraction x of device time; the
executor's work conservation still hands all idle inference time to training.
"""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["StaticShare"]


class StaticShare(EvenSplit):
    def __init__(self, inference_share: float, loss_weighting: str = "uniform") -> None:
        super().__init__(loss_weighting)
        self.inference_share = inference_share
        self.name = f"static:{inference_share:g}"

    def decide(self, obs: Observation) -> Allocation:
        return self.allocation(obs, self.inference_share, obs.max_microbatch)
