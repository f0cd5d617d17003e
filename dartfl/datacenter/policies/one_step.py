"""`one-step[:f]`: one-step off-policy on a static split (verl's one_step_off_policy).

Rollout makes the next whole batch with the weights one version behind while the trainer
trains on the current one: staleness is 1, and rollout still waits for each batch's longest
sample (the long tail), since a batch is generated as a unit.
"""

from __future__ import annotations

from dartfl.datacenter.policies.base import DcPolicy, split_gpus
from dartfl.datacenter.types import DcAllocation, DcObservation
from dartfl.errors import ConfigError

__all__ = ["OneStep"]


class OneStep(DcPolicy):
    mode = "batch"
    eta = 1

    def __init__(self, fraction: float = 0.5) -> None:
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"one-step rollout fraction must lie in (0, 1), got {fraction}")
        self.fraction = fraction
        self.name = "one-step" if fraction == 0.5 else f"one-step:{fraction:g}"

    def decide(self, obs: DcObservation) -> DcAllocation:
        return DcAllocation(split_gpus(self.fraction, obs.gpus, obs.tp, obs.train_min_gpus))
