"""What the executor believes work costs: the cost models it puts in every Observation.

A simulated device knows its costs (the profile it simulates: `StaticCosts`); a real one
learns them from the work it times (`ProfiledCosts`, an online fit per task and for
training, starting from a profile as the prior). The executor reports every finished work
item to its cost model, so the two kinds of device are told the same things.

The plain cost fields price the time-shared device (an item on every core; one core is
today's device). On a device whose cores can be split, `split` prices the lanes of a split
(docs/profiles.md, "Cores"): one-core costs and the speedup curves. The executor reports a
split-lane item with the cores it ran on and its duration with the other lane's interference
taken out, so the fit learns one-core costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from dartfl.estimators import ServiceTimeProfiler
from dartfl.types import CoreCosts, CoreModel, DeviceProfile, InferenceCost, RequestPathCost

__all__ = ["CostModel", "ProfiledCosts", "StaticCosts", "split_costs"]


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

    @property
    def split(self) -> CoreCosts | None: ...

    def observe_batch(self, task: int, size: int, duration_s: float, cores: int | None = None) -> None:
        """An inference batch of `size` requests of `task` took `duration_s` (on a split lane
        of `cores` cores, interference removed; None: on the time-shared device)."""

    def observe_step(self, samples: int, duration_s: float, cores: int | None = None) -> None:
        """A training microbatch of `samples` took `duration_s` (`cores` as for batches)."""


def split_costs(
    profile: DeviceProfile,
    task_names: Sequence[str],
    one_core: Sequence[tuple[float, float]] | None = None,
    training: tuple[float, float] | None = None,
) -> CoreCosts | None:
    """The split-lane prices of `profile` for the task order (None: it cannot be split).

    `one_core` / `training` replace the profile's one-core costs with learnt ones."""
    model = profile.cores
    if not model.can_split:
        return None
    if one_core is None:
        one_core = [_one_core_inference(profile, name) for name in task_names]
    if training is None:
        training = (profile.training.microbatch_fixed_s, profile.training.per_sample_s)
    return CoreCosts(
        cores=model.count,
        batch_fixed_s=tuple(a for a, _ in one_core),
        per_request_s=tuple(c for _, c in one_core),
        microbatch_fixed_s=training[0],
        per_sample_s=training[1],
        inference_speedup=model.inference_speedup,
        training_speedup=model.training_speedup,
        inference_interference=model.inference_interference,
        training_interference=model.training_interference,
        switch_s=model.switch_s,
        serving_lane_trains=not model.has_gpu,
    )


def _one_core_inference(profile: DeviceProfile, task: str) -> tuple[float, float]:
    cost = profile.lane_inference(task, 1)
    return cost.batch_fixed_s, cost.per_request_s


class StaticCosts:
    """A profile's costs for the given task order; what the executor observes changes nothing."""

    def __init__(self, profile: DeviceProfile, task_names: Sequence[str]) -> None:
        n = profile.cores.count
        costs = [profile.lane_inference(name, n) for name in task_names]
        self.batch_fixed_s = tuple(c.batch_fixed_s for c in costs)
        self.per_request_s = tuple(c.per_request_s for c in costs)
        train = profile.lane_training(n)
        self.microbatch_fixed_s = train.microbatch_fixed_s
        self.per_sample_s = train.per_sample_s
        self.split = split_costs(profile, task_names)

    def observe_batch(self, task: int, size: int, duration_s: float, cores: int | None = None) -> None:
        pass

    def observe_step(self, samples: int, duration_s: float, cores: int | None = None) -> None:
        pass


# How fast the network thread's costs follow new measurements: about the last 1,000 requests.
PATH_WEIGHT = 1e-3


class ProfiledCosts:
    """Online fits of every work item's duration, with `profile` (end to end) as the prior.

    A batch's measured duration covers what the executor thread spends on it: preparing the
    inputs, the model, encoding and publishing the replies. What a request costs the network
    thread (receiving it, decoding and admitting it, the acknowledgements) is told in sums
    through `observe_request_path` (edge_client/path_meter.py measures it). Both are added to
    the per-request cost, so the Observation prices a request by everything the device spends
    on it (docs/profiles.md).
    There is one fit per task and one for training on the time-shared device, and one-core
    fits of the same for the lanes of a split: a split lane's item is told with its cores,
    and its duration times the lane's speedup is fitted (the request path's share of it is
    scaled with the model's, an approximation).
    """

    def __init__(self, profile: DeviceProfile, task_names: Sequence[str]) -> None:
        path = profile.request_path
        shared = profile.time_shared()  # the model's costs on every core; one core: the profile
        # What a batch costs the executor thread: the model, the per-batch work, the replies.
        executor = [shared.model_inference_for(name) for name in task_names]
        self.inference = [
            ServiceTimeProfiler(c.batch_fixed_s + path.per_batch_s, c.per_request_s + path.egress_s)
            for c in executor
        ]
        train = shared.training
        self.training = ServiceTimeProfiler(train.microbatch_fixed_s, train.per_sample_s)
        # Smoothed CPU seconds of the network thread per request: decoding and admitting it
        # (ingress), and the rest of the thread's work for it (receive); the profile's until told.
        self.ingress_s = path.ingress_s
        self.receive_s = path.receive_s
        self._path_seen = 0
        # (batch_fixed_s, per_request_s) as believed now: admission asks for them for every
        # request, and they change only when a batch or the request path is told.
        self._prices: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        self._profile = profile
        self._task_names = tuple(task_names)
        self._split_inference: list[ServiceTimeProfiler] = []
        self._split_training: ServiceTimeProfiler | None = None
        if profile.cores.can_split:
            cpu = profile.cores.gpu_inference_on_cpu
            one = [cpu if cpu is not None else profile.model_inference_for(name) for name in task_names]
            self._split_inference = [
                ServiceTimeProfiler(c.batch_fixed_s + path.per_batch_s, c.per_request_s + path.egress_s)
                for c in one
            ]
            self._split_training = ServiceTimeProfiler(
                profile.training.microbatch_fixed_s, profile.training.per_sample_s
            )

    @property
    def batch_fixed_s(self) -> tuple[float, ...]:
        return self._inference_prices()[0]

    @property
    def per_request_s(self) -> tuple[float, ...]:
        return self._inference_prices()[1]

    def _inference_prices(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        if self._prices is None:
            extra = self.ingress_s + self.receive_s
            fixed = tuple(p.fixed_s for p in self.inference)
            self._prices = fixed, tuple(p.per_item_s + extra for p in self.inference)
        return self._prices

    def observe_request_path(self, requests: int, receive_cpu_s: float, ingress_cpu_s: float) -> None:
        """The network thread spent `receive_cpu_s` receiving and `ingress_cpu_s` decoding and
        admitting `requests` requests (CPU time, summed)."""
        if requests <= 0 or not (0.0 <= receive_cpu_s < math.inf and 0.0 <= ingress_cpu_s < math.inf):
            return
        self._path_seen += requests
        # A plain mean over the first requests, then an exponential one over about the last
        # 1 / PATH_WEIGHT (no slow ramp from the prior, no lag behind a lasting change).
        weight = max(1.0 - (1.0 - PATH_WEIGHT) ** requests, requests / self._path_seen)
        self.receive_s += weight * (receive_cpu_s / requests - self.receive_s)
        self.ingress_s += weight * (ingress_cpu_s / requests - self.ingress_s)
        self._prices = None

    @property
    def microbatch_fixed_s(self) -> float:
        return self.training.fixed_s

    @property
    def per_sample_s(self) -> float:
        return self.training.per_item_s

    @property
    def split(self) -> CoreCosts | None:
        train = self._split_training
        if train is None:
            return None
        outside = self.ingress_s + self.receive_s
        one_core = [(p.fixed_s, p.per_item_s + outside) for p in self._split_inference]
        return split_costs(self._profile, self._task_names, one_core, (train.fixed_s, train.per_item_s))

    def observe_batch(self, task: int, size: int, duration_s: float, cores: int | None = None) -> None:
        if cores is None or not self._split_inference:
            self.inference[task].observe(size, duration_s)
            self._prices = None
            return
        speedup = self._profile.cores.inference_speedup[cores - 1]
        self._split_inference[task].observe(size, duration_s * speedup)

    def observe_step(self, samples: int, duration_s: float, cores: int | None = None) -> None:
        train = self._split_training
        if cores is None or train is None:
            self.training.observe(samples, duration_s)
            return
        train.observe(samples, duration_s * self._profile.cores.training_speedup[cores - 1])

    def profile(self, base: DeviceProfile, task_names: Sequence[str]) -> DeviceProfile:
        """The costs believed now, as a profile like `base`: each task's batch cost on the
        executor thread (model and replies), the receive and ingress as the request path,
        the training cost. On a multi-core `base` they are the time-shared device's, so the
        profile comes back with one core."""
        fits = [InferenceCost(p.fixed_s, p.per_item_s) for p in self.inference]
        return replace(
            base,
            inference=fits[0],
            task_inference={name: fit for name, fit in zip(task_names, fits, strict=True) if fit != fits[0]},
            training=replace(
                base.training, microbatch_fixed_s=self.training.fixed_s, per_sample_s=self.training.per_item_s
            ),
            request_path=RequestPathCost(receive_s=self.receive_s, ingress_s=self.ingress_s),
            cores=CoreModel(),
        )
