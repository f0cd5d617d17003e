"""The fluid limit on N cores: 1.0 stays the physical limit for every policy that serves
every request, split or time-shared, on adversarial curves; one core is today's limit."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.fluid import fluid_terms
from dartfl.metrics import summarize
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.types import CoreModel, DeviceProfile, InferenceCost, TaskSpec, TrainingCost


def cores(speedup: tuple[float, ...], interference: float = 0.0, fixed_s: float = 0.002) -> DeviceProfile:
    n = len(speedup)
    return DeviceProfile(
        name=f"{n}-cores",
        inference=InferenceCost(fixed_s, 0.004),
        max_batch=16,
        training=TrainingCost(fixed_s, 0.010, 16),
        cores=CoreModel(n, speedup, speedup, interference, interference, 0.001),
    )


# Adversarial curves: Amdahl-like, exactly linear (no waste anywhere), superlinear (two cores
# beat two single cores: caches), and flat (more cores buy nothing).
CURVES = {
    "amdahl": (1.0, 1.6, 2.0, 2.3),
    "linear": (1.0, 2.0, 3.0, 4.0),
    "superlinear": (1.0, 2.6, 3.0, 3.2),
    "flat": (1.0, 1.0, 1.0, 1.0),
}
POLICIES = [
    "inference-first",
    "inference-first:2",
    "dart",
    "dart:split=off",
    "cores:1,16",
    "cores:2,16",
    "cores:3",
]


def poisson(rate: float, duration_s: float, seed: int) -> Arrivals:
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * duration_s))
    times = np.sort(rng.uniform(0.0, duration_s, n))
    return Arrivals(times, rng.integers(0, 2, n).astype(np.int64), ("a", "b"), duration_s)


@pytest.mark.parametrize("curve", sorted(CURVES))
@pytest.mark.parametrize("rate", [0.0, 150.0])
def test_no_policy_that_serves_every_request_harvests_more_than_the_fluid_limit(
    curve: str, rate: float
) -> None:
    profile = cores(CURVES[curve])
    arrivals = poisson(rate, 30.0, seed=1)
    tasks = [TaskSpec(t, 0.25, queue_capacity=100_000) for t in arrivals.task_names]
    for spec in POLICIES:
        m = summarize(
            simulate(arrivals, profile, tasks, make_policy(spec), SimConfig(deadline_admission=False))
        )
        assert m["rejected"] == 0 and m["lost"] == 0
        assert 0.0 <= m["harvest_efficiency"] <= 1.0, (curve, spec)


def test_the_limit_is_tight_where_nothing_is_wasted() -> None:
    # Linear speedup, no fixed costs, no requests: full steps on all cores trade core-seconds
    # for samples at the fluid price, so time sharing reaches the limit (but for the warm-up).
    profile = cores(CURVES["linear"], fixed_s=0.0)
    idle = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), ("a", "b"), 60.0)
    tasks = [TaskSpec(t, 0.25) for t in idle.task_names]
    m = summarize(simulate(idle, profile, tasks, make_policy("inference-first")))
    assert m["harvest_efficiency"] == pytest.approx(1.0, abs=0.01)


def test_one_core_prices_are_todays_cheapest_costs() -> None:
    profile = get_profile("pi4").with_cores(1)
    terms = fluid_terms(profile, ("a", "b"), (10, 5))
    assert terms.units == 1.0
    assert terms.inference_min_s == 15 * profile.inference_for("a").cheapest_per_request_s(profile.max_batch)
    assert terms.cheapest_sample_s == profile.training.cheapest_per_sample_s()


def test_on_n_cores_a_price_is_the_cheapest_core_seconds_over_lane_sizes() -> None:
    superlinear = cores(CURVES["superlinear"])
    terms = fluid_terms(superlinear, ("a",), (1,))
    # Two cores at 2.6x cost 2 / 2.6 of one core's core-seconds: the cheapest way to serve.
    one_core = superlinear.inference.cheapest_per_request_s(superlinear.max_batch)
    assert terms.units == 4.0
    assert terms.inference_min_s == pytest.approx(one_core * 2 / 2.6)


def test_a_gpu_device_is_priced_in_gpu_seconds_less_what_its_cores_can_serve() -> None:
    jetson = get_profile("jetson-orin-nano")
    arrivals = poisson(700.0, 20.0, seed=2)  # about half of what it serves end to end
    tasks = [TaskSpec(t, 0.1, queue_capacity=100_000) for t in arrivals.task_names]
    serve_all = SimConfig(deadline_admission=False)  # the bound is for runs that serve everything
    for spec in ("dart", "inference-first", "cores:5", "cores:3,16"):
        m = summarize(simulate(arrivals, jetson, tasks, make_policy(spec), serve_all))
        assert m["rejected"] == 0
        assert 0.0 <= m["harvest_efficiency"] <= 1.0, spec
