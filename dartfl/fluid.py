"""The fluid limit's prices on a device of N cores (docs/allocator.md, "The fluid limit").

Harvest compares what a run trained with what the device could have trained had it spent on
inference only the least compute that serving every request needs. On N cores the compute is
core-seconds, N per second: a work item on a lane of j cores for d seconds spends j d of them,
and an item never takes less than its solo time, so the cheapest price of a request is
min over j of j t_j(b_max) / b_max (one core, unless a curve is superlinear), and of a sample
min over j of j s_j(m_max) / m_max. No policy, split or time-shared, can spend less, so 1.0
stays the physical limit for every run that serves every request.

A GPU device trains on its GPU only. Its fluid resource is GPU-seconds (one per second); its
CPU cores can take requests off the GPU: at most (N - 1) / (their cheapest core-seconds per
request) per second (one core always hosts the GPU's training), each saving at most the
dearest request's GPU cost. One core is exactly today's limit: the prices are today's
cheapest per-request and per-sample costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dartfl.types import DeviceProfile, InferenceCost, TrainingCost

__all__ = ["FluidPrices", "FluidTerms", "fluid_prices", "fluid_terms"]


@dataclass(frozen=True)
class FluidTerms:
    """What the fluid limit of a run needs (see `dartfl.metrics.fluid_trainable_samples`)."""

    inference_min_s: float  # unit-seconds that serving every request needs at least
    cheapest_sample_s: float  # unit-seconds of one trained sample, at the cheapest
    units: float = 1.0  # fluid units per second: N cores, or one GPU
    offload_per_s: float = 0.0  # a GPU device: requests per second its cores could serve at most
    offload_saves_s: float = 0.0  # GPU-seconds one request served on the cores saves at most


@dataclass(frozen=True)
class FluidPrices:
    """The fluid limit's prices of one device, per task: `terms` adds up a run's requests."""

    request_s: tuple[float, ...]  # unit-seconds of one request of each task, at the cheapest
    sample_s: float
    units: float
    offload_per_s: float = 0.0
    offload_saves_s: float = 0.0

    def terms(self, counts: Sequence[int]) -> FluidTerms:
        inference = float(sum(c * r for c, r in zip(counts, self.request_s, strict=True)))
        return FluidTerms(inference, self.sample_s, self.units, self.offload_per_s, self.offload_saves_s)


def _request_s(cost: InferenceCost, cores: int, max_batch: int) -> float:
    return cores * cost.cheapest_per_request_s(max_batch)


def _sample_s(cost: TrainingCost, cores: int) -> float:
    return cores * cost.cheapest_per_sample_s()


def fluid_prices(profile: DeviceProfile, task_names: Sequence[str]) -> FluidPrices:
    """The fluid prices of `profile` for the task order."""
    model, b = profile.cores, profile.max_batch
    n = model.count
    if model.has_gpu:
        gpu = tuple(profile.lane_inference(t, n).cheapest_per_request_s(b) for t in task_names)
        # A split leaves at least one core to host the GPU's training: n - 1 serve at most.
        cpu = min((_request_s(profile.lane_inference("", j), j, b) for j in range(1, n)), default=0.0)
        return FluidPrices(
            gpu,
            profile.training.cheapest_per_sample_s(),
            1.0,
            (n - 1) / cpu if cpu > 0 else 0.0,
            max(gpu),
        )
    request_s = tuple(
        min(_request_s(profile.lane_inference(t, j), j, b) for j in range(1, n + 1)) for t in task_names
    )
    sample_s = min(_sample_s(profile.lane_training(j), j) for j in range(1, n + 1))
    return FluidPrices(request_s, sample_s, float(n))


def fluid_terms(profile: DeviceProfile, task_names: Sequence[str], counts: Sequence[int]) -> FluidTerms:
    """The fluid prices of `profile` for a run with `counts[k]` requests of task k."""
    return fluid_prices(profile, task_names).terms(counts)
