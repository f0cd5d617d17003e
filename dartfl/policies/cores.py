"""`cores:<k>[,m]`: a static split of the device's cores, the baseline of spatial sharing.

Inference runs on k cores, training on the other N - k in full-size steps, concurrently.
The serving lane gives its idle time to training steps of m samples (0, the default: it
only serves), under strict priority, as `inference-first:m` does on the whole device. k >= N
is time sharing on every core (`inference-first:m`, or `inference-only` for m = 0).
"""

from __future__ import annotations

from dartfl.policies.base import EvenSplit
from dartfl.types import Allocation, Observation

__all__ = ["StaticCores"]


class StaticCores(EvenSplit):
    def __init__(self, inference_cores: int, microbatch: int = 0, loss_weighting: str = "uniform") -> None:
        super().__init__(loss_weighting)
        self.inference_cores = inference_cores
        self.microbatch = microbatch
        self.name = f"cores:{inference_cores}" + (f",{microbatch}" if microbatch else "")

    def decide(self, obs: Observation) -> Allocation:
        microbatch = min(self.microbatch, obs.max_microbatch)
        return self.allocation(obs, 1.0, microbatch, inference_cores=self.inference_cores)
