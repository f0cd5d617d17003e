"""The datacenter allocator's port, the same shape as the edge one (dartfl/policies/base.py).

`decide(obs) -> DcAllocation` is pure given the policy's state; `update(obs)` folds in the last
period. `mode` tells the executor how rollout runs:
- `colocated`: every GPU rolls a whole batch out, then every GPU trains on it (synchronous);
- `batch`: a static split; rollout makes one whole batch at a time (one-step off-policy);
- `stream`: continuous batching with AReaL's staleness admission control.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from dartfl.datacenter.types import DcAllocation, DcObservation

__all__ = ["MODES", "DcPolicy", "split_gpus"]

MODES = ("colocated", "batch", "stream")


class DcPolicy(ABC):
    """A rollout/training GPU split policy. Subclasses set `name` and `mode`."""

    name: str = "policy"
    mode: str = "stream"
    eta: int | None = None  # a staleness bound the algorithm fixes (one-step: 1); None: the run's

    def update(self, obs: DcObservation) -> None:  # noqa: B027 - stateless policies need nothing
        """Fold the last period's outcome into internal state. Default: stateless."""

    @abstractmethod
    def decide(self, obs: DcObservation) -> DcAllocation:
        """The rollout GPU count for the period that starts at `obs.now_s`."""

    def reset(self) -> None:  # noqa: B027 - stateless policies need nothing
        """Forget all state (the simulator calls it before each run)."""


def split_gpus(fraction: float, gpus: int, tp: int, train_min_gpus: int) -> int:
    """Rollout GPUs for a rollout fraction: a multiple of tp, leaving the trainer its minimum."""
    most = (gpus - train_min_gpus) // tp * tp
    engines = round(fraction * gpus / tp)
    return max(tp, min(most, engines * tp))
