"""The datacenter allocator's ports, the same shape as the edge one (dartfl/policies/base.py).

`decide(obs) -> DcAllocation` is pure given the policy's state; `update(obs)` folds in the last
period. `mode` tells the executor how rollout runs:
- `colocated`: every GPU rolls a whole batch out, then every GPU trains on it (synchronous);
- `batch`: a static split; rollout makes one whole batch at a time (one-step off-policy);
- `stream`: continuous batching with AReaL's staleness admission control.

A `LendingPolicy` can also lend the trainer's GPUs to rollout between training steps (verl's
hybrid replicas): the executor asks it at every step end and reclaims the GPUs when its
threshold of sampleable groups is reached. That is a declared capability of the port, not
something the executor probes for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from dartfl.datacenter.types import DcAllocation, DcObservation, StepReport

__all__ = ["MODES", "DcPolicy", "LendingPolicy", "split_gpus"]

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


class LendingPolicy(DcPolicy):
    """A split whose trainer GPUs roll out between steps; `decide` gives the dedicated pool."""

    @abstractmethod
    def step_end(self, report: StepReport) -> bool:
        """A step ended: adapt, and say whether to lend the trainer's GPUs to rollout now."""

    @abstractmethod
    def reclaim_groups(self, batch_groups: int) -> int:
        """Sampleable groups at which a lent trainer takes its GPUs back."""


def split_gpus(fraction: float, gpus: int, tp: int, train_min_gpus: int) -> int:
    """Rollout GPUs for a rollout fraction: a multiple of tp, leaving the trainer its minimum."""
    most = (gpus - train_min_gpus) // tp * tp
    engines = round(fraction * gpus / tp)
    return max(tp, min(most, engines * tp))
