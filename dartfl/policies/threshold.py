"""`threshold[:low,high]`: switch between a training mode and an inference mode on backlog.

Training mode shares the device half and half; when the total backlog reaches `high`
requests it switches to strict inference priority and stays there until the backlog falls to
`low` (hysteresis, so it does not flap on every request).
"""

from __future__ import annotations

from dartfl.errors import ConfigError
from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["Threshold"]

TRAINING_MODE_SHARE = 0.5


class Threshold(EvenSplit):
    def __init__(self, low: int = 2, high: int = 16, loss_weighting: str = "uniform") -> None:
        if not 0 <= low < high:
            raise ConfigError(f"threshold needs 0 <= low < high, got low={low}, high={high}")
        super().__init__(loss_weighting)
        self.low, self.high = low, high
        self.name = f"threshold:{low},{high}"
        self.inference_mode = False

    def reset(self) -> None:
        self.inference_mode = False

    def update(self, obs: Observation) -> None:
        backlog = sum(obs.backlog)
        if backlog >= self.high:
            self.inference_mode = True
        elif backlog <= self.low:
            self.inference_mode = False

    def decide(self, obs: Observation) -> Allocation:
        share = 1.0 if self.inference_mode else TRAINING_MODE_SHARE
        return self.allocation(obs, share, obs.max_microbatch)
