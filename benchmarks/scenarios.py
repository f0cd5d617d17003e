"""The benchmark scenarios of the foundation targets: bursty workloads x device profiles.

Shared by benchmarks/sim_targets.py (the target table) and benchmarks/frontier.py (plots).
Each scenario is a workload at mean load 0.5 on a profile whose full training microbatch is
longer than its SLO slack, the regime where co-scheduling is hard. benchmarks/spatial.py
runs the same workloads (and a drifting one) on the 4-core profiles at loads 0.25 and 0.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import workloads
from dartfl.arrivals import Arrivals
from dartfl.profiles import get_profile
from dartfl.types import DeviceProfile, InferenceCost, TrainingCost

TASKS = ("digits", "fashion", "uci-digits")

# The profile of the project's public acceptance check (kept outside this repository), plus the
# issue's example profile.
PUBLIC_SMALL = DeviceProfile(
    name="public-small",
    inference=InferenceCost(0.005, 0.0025),
    max_batch=32,
    training=TrainingCost(0.012, 0.007, 32),
)
EDGE_SMALL = DeviceProfile(
    name="edge-small",
    inference=InferenceCost(0.004, 0.002),
    max_batch=32,
    training=TrainingCost(0.010, 0.006, 32),
    task_inference={"fashion": InferenceCost(0.004, 0.003)},
)

# (workload name, generator params, zipf, rotate_s): the bursty mixes the issue lists.
WORKLOADS: dict[str, tuple[str, dict[str, float], float, float | None]] = {
    "pareto-onoff": ("pareto-onoff", {}, 0.8, None),
    "mmpp": ("mmpp", {}, 0.8, None),
    "gamma-cv3": ("gamma", {"cv": 3.0}, 0.8, None),
    "hawkes": ("hawkes", {}, 0.8, None),
    "flash-crowd-rotating": ("flash-crowd", {}, 1.2, 60.0),
}


# Spatial sharing (issue 15) adds a drifting load: a compressed day (300 s) whose rate swings
# from 0.2x to 1.8x the mean, so the best split of the cores moves during the run.
SPATIAL_WORKLOADS: dict[str, tuple[str, dict[str, float], float, float | None]] = {
    **WORKLOADS,
    "diurnal-drift": ("diurnal", {"period-s": 300.0, "amplitude": 0.8}, 0.8, None),
}


@dataclass(frozen=True)
class Scenario:
    workload: str
    profile: DeviceProfile
    slo_s: float

    @property
    def name(self) -> str:
        return f"{self.workload}/{self.profile.name}/{self.slo_s * 1e3:g}ms"


def profiles_and_slos() -> list[tuple[DeviceProfile, float]]:
    """The foundation targets' profiles: one core each, as the built-in profiles were before
    they described the whole device, so these tables stay reproducible to the bit."""
    return [
        (PUBLIC_SMALL, 0.12),
        (EDGE_SMALL, 0.10),
        (get_profile("pi4").with_cores(1), 0.25),
        (get_profile("pi5").with_cores(1), 0.10),
        (get_profile("x86-1core"), 0.05),
    ]


def scenarios() -> list[Scenario]:
    names = [*WORKLOADS, "azure-conv"]
    return [Scenario(w, p, slo) for p, slo in profiles_and_slos() for w in names]


def arrivals_for(scenario: Scenario, duration_s: float = 600.0, seed: int = 1, load: float = 0.5) -> Arrivals:
    """The scenario's workload rescaled to `load` of the profile's inference capacity."""
    if scenario.workload == "azure-conv":
        base = workloads.bundled_azure_conv(TASKS)
    else:
        gen, params, zipf, rotate = SPATIAL_WORKLOADS[scenario.workload]
        base = workloads.generate(
            gen,
            duration_s=duration_s,
            rate_per_s=100.0,
            task_names=TASKS,
            rng=np.random.default_rng(seed),
            zipf=zipf,
            rotate_s=rotate,
            params=params,
        )
    return workloads.rescale_to_load(base, scenario.profile, load)
