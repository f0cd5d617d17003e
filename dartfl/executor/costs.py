"""What the executor believes work costs: the cost models it puts in every Observation.

A simulated device knows its costs (the profile it simulates: `StaticCosts`); a real one
learns them from the work it times (`ProfiledCosts`, an online fit per task and for
training, starting from a profile as the prior). The executor reports every finished work
item to its cost model, so the two kinds of device are told the same things.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from dartfl.estimators import ServiceTimeProfiler
from dartfl.types import DeviceProfile, InferenceCost, RequestPathCost

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


# How fast the ingress cost follows new measurements: about the last 1,000 requests.
INGRESS_WEIGHT = 1e-3


class ProfiledCosts:
    """Online fits of every work item's duration, with `profile` (end to end) as the prior.

    A batch's measured duration covers what the executor thread spends on it: preparing the
    inputs, the model, encoding and publishing the replies. What a request costs before it is
    queued (decoding, admission, on the ingress thread) is told per request through
    `observe_ingress`; receiving it off the network (paho's thread, which no handler can time)
    stays at the profile's `receive_s`. Both are added to the per-request cost, so the
    Observation prices a request by everything the device spends on it (docs/profiles.md).
    """

    def __init__(self, profile: DeviceProfile, task_names: Sequence[str]) -> None:
        path = profile.request_path
        # What a batch costs the executor thread: the model, the per-batch work, the replies.
        executor = [profile.model_inference_for(name) for name in task_names]
        self.inference = [
            ServiceTimeProfiler(c.batch_fixed_s + path.per_batch_s, c.per_request_s + path.egress_s)
            for c in executor
        ]
        train = profile.training
        self.training = ServiceTimeProfiler(train.microbatch_fixed_s, train.per_sample_s)
        self.ingress_s = path.ingress_s  # smoothed CPU seconds to decode and admit a request
        self._ingress_seen = 0
        self.receive_s = path.receive_s

    @property
    def batch_fixed_s(self) -> tuple[float, ...]:
        return tuple(p.fixed_s for p in self.inference)

    @property
    def per_request_s(self) -> tuple[float, ...]:
        extra = self.ingress_s + self.receive_s
        return tuple(p.per_item_s + extra for p in self.inference)

    def observe_ingress(self, cpu_s: float) -> None:
        """One request's decode and admission took `cpu_s` of CPU time."""
        if not (cpu_s >= 0.0 and math.isfinite(cpu_s)):
            return
        self._ingress_seen += 1
        # A plain mean over the first requests, then an exponential one (no slow ramp from 0).
        weight = max(INGRESS_WEIGHT, 1.0 / self._ingress_seen)
        self.ingress_s += weight * (cpu_s - self.ingress_s)

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

    def profile(self, base: DeviceProfile, task_names: Sequence[str]) -> DeviceProfile:
        """The costs believed now, as a profile like `base`: each task's batch cost on the
        executor thread (model and replies), the receive and ingress as the request path,
        the training cost."""
        fits = [InferenceCost(p.fixed_s, p.per_item_s) for p in self.inference]
        return replace(
            base,
            inference=fits[0],
            task_inference={name: fit for name, fit in zip(task_names, fits, strict=True) if fit != fits[0]},
            training=replace(
                base.training, microbatch_fixed_s=self.training.fixed_s, per_sample_s=self.training.per_item_s
            ),
            request_path=RequestPathCost(receive_s=self.receive_s, ingress_s=self.ingress_s),
        )
