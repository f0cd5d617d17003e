"""Rescaling workloads to a mean rate or to a target load on a device profile."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.types import InferenceCost
from tests.profile_fixtures import SMALL
from workloads.registry import generate
from workloads.rescale import capacity_for, offered_load, rate_for_load, rescale_to_load, scale_to_rate

# "big" costs 4x per request: the load depends on the task mix, not just the rate.
PROFILE = replace(SMALL, task_inference={"big": InferenceCost(batch_fixed_s=0.02, per_request_s=0.01)})
CHEAP = 0.0025 + 0.005 / 32
BIG = 0.01 + 0.02 / 32


def _workload(seed: int = 1) -> Arrivals:
    return generate(
        "mmpp",
        duration_s=600.0,
        rate_per_s=40.0,
        task_names=("small", "big"),
        rng=np.random.default_rng(seed),
        zipf=1.0,
    )


def test_scale_to_rate_hits_the_rate_and_keeps_the_pattern() -> None:
    arrivals = _workload()
    scaled = scale_to_rate(arrivals, 10.0)
    assert scaled.mean_rate_per_s() == pytest.approx(10.0, rel=1e-12)
    factor = scaled.duration_s / arrivals.duration_s
    np.testing.assert_allclose(scaled.times_s, arrivals.times_s * factor)
    np.testing.assert_array_equal(scaled.tasks, arrivals.tasks)


def test_capacity_uses_the_workloads_own_task_mix() -> None:
    arrivals = _workload()
    small, big = arrivals.counts_per_task()
    expected = (small + big) / (small * CHEAP + big * BIG)
    assert capacity_for(arrivals, PROFILE) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("target", [0.1, 0.5, 0.95, 1.3])
def test_rescale_to_load_hits_the_target_load(target: float) -> None:
    arrivals = _workload()
    rescaled = rescale_to_load(arrivals, PROFILE, target)
    assert offered_load(rescaled, PROFILE) == pytest.approx(target, rel=1e-12)
    # By hand: mean rate x mean cheapest per-request cost of the realized mix.
    small, big = rescaled.counts_per_task()
    assert rescaled.num_requests / rescaled.duration_s * (small * CHEAP + big * BIG) / (
        small + big
    ) == pytest.approx(target, rel=1e-9)
    np.testing.assert_array_equal(rescaled.tasks, arrivals.tasks)


def test_a_costlier_mix_needs_a_lower_rate_for_the_same_load() -> None:
    def mostly_first(names: tuple[str, str]) -> Arrivals:
        rng = np.random.default_rng(1)
        return generate("poisson", duration_s=100.0, rate_per_s=50.0, task_names=names, rng=rng, zipf=3.0)

    small_heavy, big_heavy = mostly_first(("small", "big")), mostly_first(("big", "small"))
    a = rescale_to_load(small_heavy, PROFILE, 0.5).mean_rate_per_s()
    b = rescale_to_load(big_heavy, PROFILE, 0.5).mean_rate_per_s()
    assert b < a / 2


def test_rate_for_load_inverts_the_capacity() -> None:
    rate = rate_for_load(PROFILE, ("small", "big"), (0.75, 0.25), 0.5)
    assert rate == pytest.approx(0.5 / (0.75 * CHEAP + 0.25 * BIG))


@pytest.mark.parametrize("target", [0.0, -0.5, float("nan"), float("inf")])
def test_invalid_target_load_is_rejected(target: float) -> None:
    with pytest.raises(ConfigError, match=r"target load must be a finite number > 0 \(--target-load: "):
        rescale_to_load(_workload(), PROFILE, target)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_invalid_target_rate_is_rejected(rate: float) -> None:
    with pytest.raises(ConfigError, match=r"target rate \(--rate\) must be"):
        scale_to_rate(_workload(), rate)


def test_empty_workload_cannot_be_rescaled() -> None:
    empty = Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), ("a",), 10.0)
    with pytest.raises(ConfigError, match="0 requests"):
        scale_to_rate(empty, 5.0)
    with pytest.raises(ConfigError, match="no requests"):
        rescale_to_load(empty, PROFILE, 0.5)
