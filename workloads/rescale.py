"""Rescaling a workload in time to a target mean rate or a target device load.

The offered load of a workload on a device is its mean arrival rate divided by the device's
inference capacity for the workload's own task mix, at the cheapest per-request cost (full
batches): load = rate / DeviceProfile.capacity_per_s(task_names, per-task counts). Rescaling
stretches or compresses the time axis, so the arrival pattern (bursts, order, task mix) is
kept and only its speed changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.types import DeviceProfile

__all__ = ["capacity_for", "offered_load", "rate_for_load", "rescale_to_load", "scale_to_rate"]


def scale_to_rate(arrivals: Arrivals, rate_per_s: float) -> Arrivals:
    """The same arrivals on a time axis scaled so the mean rate (requests / duration) is rate_per_s."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ConfigError(
            f"the target rate (--rate) must be a finite number of requests/s > 0, got {rate_per_s!r}"
        )
    current = arrivals.mean_rate_per_s()
    if current <= 0:
        raise ConfigError(
            f"cannot rescale a workload with {arrivals.num_requests} requests over "
            f"{arrivals.duration_s:g} s: it needs at least one request and a positive duration"
        )
    return arrivals.scaled_in_time(current / rate_per_s)


def capacity_for(arrivals: Arrivals, profile: DeviceProfile) -> float:
    """Requests/s the device serves at full batches for this workload's realized task mix."""
    counts = arrivals.counts_per_task()
    if counts.sum() == 0:
        raise ConfigError("the workload has no requests, so it has no task mix to size the device load by")
    return profile.capacity_per_s(arrivals.task_names, tuple(float(c) for c in counts))


def offered_load(arrivals: Arrivals, profile: DeviceProfile) -> float:
    """Mean arrival rate as a fraction of the device's inference capacity for the task mix."""
    return arrivals.mean_rate_per_s() / capacity_for(arrivals, profile)


def rescale_to_load(arrivals: Arrivals, profile: DeviceProfile, target_load: float) -> Arrivals:
    """Scale the time axis so offered_load(result, profile) == target_load."""
    _check_load(target_load)
    return scale_to_rate(arrivals, target_load * capacity_for(arrivals, profile))


def rate_for_load(
    profile: DeviceProfile, task_names: Sequence[str], shares: Sequence[float], target_load: float
) -> float:
    """The mean rate that puts target_load on the device for an expected task mix (shares)."""
    _check_load(target_load)
    return target_load * profile.capacity_per_s(tuple(task_names), tuple(shares))


def _check_load(target_load: float) -> None:
    if not (math.isfinite(target_load) and target_load > 0):
        raise ConfigError(
            f"target load must be a finite number > 0 (--target-load: a fraction of the device's inference "
            f"capacity, e.g. 0.5), got {target_load!r}"
        )
