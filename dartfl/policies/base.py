"""The allocator's port: a policy turns an Observation into an Allocation.

`decide` is pure given the policy's state; `update` folds the last period's outcome into that
state (virtual queues, estimators). The executor calls `update(obs)` then `decide(obs)` once
per control period, so deciding stays apart from updating, as in vLLM's scheduler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from dartfl.types import Allocation, Observation

__all__ = ["Policy"]


class Policy(ABC):
    """A co-scheduling policy. Subclasses set `name` (the spec they were built from)."""

    name: str = "policy"

    def update(self, obs: Observation) -> None:  # noqa: B027 - stateless policies need nothing
        """Fold the last period's outcome into internal state. Default: stateless."""

    @abstractmethod
    def decide(self, obs: Observation) -> Allocation:
        """The allocation for the period that starts at `obs.now_s`."""

    def reset(self) -> None:  # noqa: B027 - stateless policies need nothing
        """Forget all state, as if newly built (the simulator calls it before each run)."""
