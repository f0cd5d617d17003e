"""A fleet's workloads: which bursty workload and load each device gets, and their arrivals
binned per control period for the vectorised fleet simulator (dartfl.sim.fleet).

Used by `dartfl fleet` and benchmarks/fleet_scale.py alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dartfl.sim.fleet import FleetArrivals, bin_arrivals
from dartfl.types import DeviceProfile
from workloads.mix import TaskMix
from workloads.registry import generate
from workloads.rescale import rate_for_load

__all__ = ["ASSIGNMENTS", "DEFAULT_MIX", "FleetWorkloads", "device_counts"]

DEFAULT_MIX = "pareto-onoff,mmpp,gamma,poisson"
ASSIGNMENTS = ("round-robin", "random")


@dataclass(frozen=True)
class FleetWorkloads:
    """How every device's workload is drawn; picklable, so worker processes rebuild the counts.

    Device i's randomness comes from SeedSequence([seed, i]) alone, so a device's arrivals do
    not depend on how the fleet is split into chunks or workers.
    """

    mix: tuple[str, ...]
    assignment: str
    duration_s: float
    target_load: float
    load_jitter: float
    task_names: tuple[str, ...]
    zipf: float
    seed: int
    period_s: float
    profile: DeviceProfile

    def device(self, index: int) -> tuple[str, float, np.random.Generator]:
        """(workload name, load, rng for its arrivals) of device `index`."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, index]))
        if self.assignment == "random":
            name = self.mix[int(rng.integers(len(self.mix)))]
        else:
            name = self.mix[index % len(self.mix)]
        load = self.target_load * float(rng.uniform(1.0 - self.load_jitter, 1.0 + self.load_jitter))
        return name, load, rng


def device_counts(spec: FleetWorkloads, lo: int, hi: int) -> FleetArrivals:
    """The per-period counts of devices lo..hi-1 (a module-level function: it runs in workers)."""
    periods = max(1, math.ceil(spec.duration_s / spec.period_s - 1e-9))
    counts = np.zeros((periods, len(spec.task_names), hi - lo), dtype=np.int32)
    shares = TaskMix(spec.task_names, spec.zipf).expected_shares(spec.duration_s)
    for d in range(lo, hi):
        name, load, rng = spec.device(d)
        rate = rate_for_load(spec.profile, spec.task_names, shares, load)
        arrivals = generate(
            name,
            duration_s=spec.duration_s,
            rate_per_s=rate,
            task_names=spec.task_names,
            rng=rng,
            zipf=spec.zipf,
        )
        counts[:, :, d - lo] = bin_arrivals(arrivals, spec.period_s, periods)
    return FleetArrivals(counts, spec.task_names, spec.period_s)
