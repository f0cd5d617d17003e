"""What the executor believes work costs: the cost models it puts in every Observation.

A simulated device knows its costs (the profile it simulates: `StaticCosts`); a real one
learns them from the work it times (`ProfiledCosts`, an online fit per task and for
training, starting from a profile as the prior). The executor reports every finished work
item to its cost model, so the two kinds of device are told the same things.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dartfl.estimators import ServiceTimeProfiler
from dartfl.types import DeviceProfile

__all__ = ["CostModel", "ProfiledCosts", "StaticCosts"]


class CostModel(Protocol):
    """t_k(b) = a_k + c_k b per task and s(m) = a_T + c_T m, as the executor plans with them."""

    @property
    def batch_fixed_s(self) -> tuple[float, ...]: ...

    @property
    def per_request_s(self) -> tuple[float, ...]: ...

    @property
    def microbatch_fixed_s(self) -> float: ...

    @property
    def per_sample_s(self) -> float: ...

    def observe_batch(self, task: int, size: int, duration_s: float) -> None:
        """An inference batch of `size` requests of `task` took `duration_s`."""

    def observe_step(self, samples: int, duration_s: float) -> None:
        """A training microbatch of `samples` took `duration_s`."""


class StaticCosts:
    """A profile's costs for the given task order; what the executor observes changes nothing."""

    def __init__(self, profile: DeviceProfile, task_names: Sequence[str]) -> None:
        costs = [profile.inference_for(name) for name in task_names]
        self.batch_fixed_s = tuple(c.batch_fixed_s for c in costs)
        self.per_request_s = tuple(c.per_request_s for c in costs)
        self.microbatch_fixed_s = profile.training.microbatch_fixed_s
        self.per_sample_s = profile.training.per_sample_s

    def observe_batch(self, task: int, size: int, duration_s: float) -> None:
        pass

    def observe_step(self, samples: int, duration_s: float) -> None:
        pass


class ProfiledCosts:
    """Online fits of every work item's duration, with `profile` as the prior."""

    def __init__(self, profile: DeviceProfile, task_names: Sequence[str]) -> None:
        costs = [profile.inference_for(name) for name in task_names]
        self.inference = [ServiceTimeProfiler(c.batch_fixed_s, c.per_request_s) for c in costs]
        train = profile.training
        self.training = ServiceTimeProfiler(train.microbatch_fixed_s, train.per_sample_s)

    @property
    def batch_fixed_s(self) -> tuple[float, ...]:
        return tuple(p.fixed_s for p in self.inference)

    @property
    def per_request_s(self) -> tuple[float, ...]:
        return tuple(p.per_item_s for p in self.inference)

    @property
    def microbatch_fixed_s(self) -> float:
        return self.training.fixed_s

    @property
    def per_sample_s(self) -> float:
        return self.training.per_item_s

    def observe_batch(self, task: int, size: int, duration_s: float) -> None:
        self.inference[task].observe(size, duration_s)

    def observe_step(self, samples: int, duration_s: float) -> None:
        self.training.observe(samples, duration_s)
