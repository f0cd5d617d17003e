"""`sync`: colocated synchronous RL. Every GPU rolls out a batch, then every GPU trains on it."""

from __future__ import annotations

from dartfl.datacenter.policies.base import DcPolicy
from dartfl.datacenter.types import DcAllocation, DcObservation

__all__ = ["Colocated"]


class Colocated(DcPolicy):
    name = "sync"
    mode = "colocated"
    eta = 0

    def decide(self, obs: DcObservation) -> DcAllocation:
        return DcAllocation(obs.gpus)  # the executor time-shares all of them between the roles
