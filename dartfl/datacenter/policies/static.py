"""`static:<f>`: a fixed split, a fraction f of the GPUs rolling out, fully asynchronous."""

from __future__ import annotations

from dartfl.datacenter.policies.base import DcPolicy, split_gpus
from dartfl.datacenter.types import DcAllocation, DcObservation
from dartfl.errors import ConfigError

__all__ = ["StaticSplit"]


class StaticSplit(DcPolicy):
    mode = "stream"

    def __init__(self, fraction: float) -> None:
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"static rollout fraction must lie in (0, 1), got {fraction}")
        self.fraction = fraction
        self.name = f"static:{fraction:g}"

    def decide(self, obs: DcObservation) -> DcAllocation:
        return DcAllocation(split_gpus(self.fraction, obs.gpus, obs.tp, obs.train_min_gpus))
