"""The allocator's port: a policy turns an Observation into an Allocation.

`decide` is pure given the policy's state; `update` folds the last period's outcome into that
state (virtual queues, estimators). The executor calls `update(obs)` then `decide(obs)` once
per control period, so deciding stays apart from updating, as in vLLM's scheduler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.policies.shares import loss_weights, uniform_shares
from dartfl.types import Allocation, Observation

__all__ = ["SLOW_DECISION_SHARE", "EvenSplit", "FutureAwarePolicy", "FutureView", "Policy"]

# A decision slower than this share of the control period holds a device's executor, and every
# request behind it, long enough to matter: `dartfl sim` and the agent say so (docs/plugins.md).
# The built-in policies decide in well under a thousandth of it.
SLOW_DECISION_SHARE = 0.1


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


class EvenSplit(Policy):
    """A baseline that knows nothing of tasks: it splits training evenly among them, weights
    their losses by `loss_weighting` and lets inference batch up to the profile's largest.
    Subclasses choose only the inference share, the step size and (a split) the cores."""

    def __init__(self, loss_weighting: str = "uniform") -> None:
        self.loss_weighting = loss_weighting

    def allocation(
        self, obs: Observation, inference_share: float, microbatch: int, *, inference_cores: int | None = None
    ) -> Allocation:
        shares = uniform_shares(obs.num_tasks)
        return Allocation(
            inference_share,
            shares,
            loss_weights(self.loss_weighting, shares),
            microbatch,
            obs.max_batch,
            inference_cores=inference_cores,
        )


@dataclass(frozen=True, eq=False)
class FutureView:
    """What a future-aware reference is shown before a step on an empty queue: the sorted
    arrival times at or after `now_s`, the tightest SLO, and the dearest costs."""

    now_s: float
    future_times_s: npt.NDArray[np.float64]
    slo_s: float
    batch_fixed_s: float
    per_request_s: float
    microbatch_fixed_s: float
    per_sample_s: float
    max_microbatch: int


class FutureAwarePolicy(Policy):
    """A reference that also sees the arrivals to come: only a simulator can offer them.

    Before each training step on an empty queue the simulator asks `choose_microbatch` for
    the step size; a real device refuses such a policy.
    """

    @abstractmethod
    def choose_microbatch(self, view: FutureView) -> int:
        """Training samples for a step that starts now (0: leave the device idle)."""
