"""The fleet simulator's bookkeeping: every request accounted for, arrivals binned into
periods, runs deterministic whatever their chunking or worker processes, mixed profiles, the
aggregates of devices without a harvest or a known SLO attainment, and bad input refused."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.sim.fleet import FleetArrivals, FleetConfig, FleetResult, bin_arrivals, run_fleet, simulate_fleet
from dartfl.sim.fleet_policies import make_fleet_policy
from dartfl.types import TaskSpec
from tests.dartfl.fleet_fixtures import NAMES, PI4, PI5, poisson_device


def _bursty_counts(devices: int, periods: int, seed: int) -> FleetArrivals:
    """On/off counts: quiet periods, then bursts far above a pi4's capacity."""
    rng = np.random.default_rng(seed)
    level = np.where(rng.random((periods, 1, devices)) < 0.2, 150.0, 10.0)
    counts = rng.poisson(level * rng.uniform(0.5, 1.5, (1, 3, devices))).astype(np.int32)
    return FleetArrivals(counts, NAMES, 0.25)


@pytest.mark.parametrize("spec", ["dart", "inference-only", "inference-first:8", "static:0.4"])
def test_every_request_is_completed_rejected_or_still_queued(spec: str) -> None:
    counts = _bursty_counts(40, 400, seed=1)
    tasks = [TaskSpec(n, 0.25, queue_capacity=64) for n in NAMES]
    result = simulate_fleet(counts, PI4, tasks, make_fleet_policy(spec))
    np.testing.assert_allclose(
        result.completed + result.rejected + result.queued_end, result.requests, rtol=1e-9
    )
    np.testing.assert_array_equal(result.requests, counts.totals().sum(axis=0))
    assert (result.rejected > 0).any()  # the bursts overflow the small queues
    assert np.all(result.completed >= 0) and np.all(result.queued_end >= 0)
    assert np.all((result.slo_attainment >= 0) & (result.slo_attainment <= 1))
    assert np.all(result.slo_met <= result.requests - result.rejected + 1e-6)
    assert np.all(np.isfinite(result.trained_samples)) and np.all(result.trained_samples >= 0)
    np.testing.assert_allclose(result.trained_per_task.sum(axis=1), result.trained_samples, rtol=1e-9)


def test_binning_keeps_every_arrival_in_its_period() -> None:
    arrivals = poisson_device(0.3, 10.0, seed=5)
    counts = bin_arrivals(arrivals, 0.25, 40)
    assert counts.shape == (40, 3)
    assert counts.sum() == arrivals.num_requests
    np.testing.assert_array_equal(counts.sum(axis=0), arrivals.counts_per_task())
    first = arrivals.times_s < 0.25
    np.testing.assert_array_equal(counts[0], np.bincount(arrivals.tasks[first], minlength=3))


def _source(seed: int, lo: int, hi: int) -> FleetArrivals:
    full = _bursty_counts(12, 200, seed)
    return FleetArrivals(full.counts[:, :, lo:hi].copy(), NAMES, 0.25)


def _same(a: FleetResult, b: FleetResult) -> None:
    for name in ("requests", "rejected", "slo_met", "trained_samples", "max_backlog", "mean_latency_s"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_a_fleet_run_is_deterministic_and_independent_of_its_chunking() -> None:
    tasks = [TaskSpec(n, 0.25, 256) for n in NAMES]
    profile = PI4
    specs = ["dart", "inference-first:4"]
    one = run_fleet(partial(_source, 9), 12, profile, tasks, specs, FleetConfig(), chunk_devices=12)
    again = run_fleet(partial(_source, 9), 12, profile, tasks, specs, FleetConfig(), chunk_devices=12)
    chunked = run_fleet(partial(_source, 9), 12, profile, tasks, specs, FleetConfig(), chunk_devices=5)
    for spec in specs:
        _same(one[spec], again[spec])
        _same(one[spec], chunked[spec])
    other = run_fleet(partial(_source, 10), 12, profile, tasks, ["dart"], FleetConfig(), chunk_devices=12)
    assert not np.array_equal(other["dart"].trained_samples, one["dart"].trained_samples)


def test_worker_processes_give_the_same_fleet_and_report_progress() -> None:
    tasks = [TaskSpec(n, 0.25, 256) for n in NAMES]
    profile = PI4
    seen: list[float] = []
    local = run_fleet(partial(_source, 9), 12, profile, tasks, ["dart"], chunk_devices=6)
    pooled = run_fleet(
        partial(_source, 9), 12, profile, tasks, ["dart"], workers=2, chunk_devices=6, on_progress=seen.append
    )
    _same(local["dart"], pooled["dart"])
    assert seen and seen[-1] == pytest.approx(1.0)


def test_a_fleet_of_mixed_profiles_runs_each_device_on_its_own_costs() -> None:
    counts = _bursty_counts(2, 200, seed=2)
    same = FleetArrivals(np.repeat(counts.counts[:, :, :1], 2, axis=2), NAMES, 0.25)
    tasks = [TaskSpec(n, 0.25) for n in NAMES]
    mixed = simulate_fleet(same, [PI4, PI5], tasks, make_fleet_policy("dart"))
    assert mixed.trained_samples[1] > 2 * mixed.trained_samples[0]  # a pi5 trains ~3x faster


def test_bad_fleet_input_is_refused() -> None:
    tasks = [TaskSpec(n, 0.25) for n in NAMES]
    counts = _bursty_counts(2, 10, seed=2)
    with pytest.raises(ConfigError, match="control period"):
        simulate_fleet(counts, PI4, tasks, make_fleet_policy("dart"), FleetConfig(period_s=0.5))
    with pytest.raises(ConfigError, match="must match"):
        simulate_fleet(counts, PI4, tasks[:2], make_fleet_policy("dart"))
    with pytest.raises(ConfigError, match="shape"):
        FleetArrivals(np.zeros((3, 3), dtype=np.int32), NAMES, 0.25)


def test_a_device_whose_requests_need_the_whole_run_has_no_harvest() -> None:
    # Device 0 is idle; device 1 gets 1000 requests per task and period, far past its capacity.
    counts = np.zeros((8, 3, 2), dtype=np.int32)
    counts[:, :, 1] = 1000
    tasks = [TaskSpec(n, 0.25, queue_capacity=64) for n in NAMES]
    result = simulate_fleet(FleetArrivals(counts, NAMES, 0.25), PI4, tasks, make_fleet_policy("static:0.5"))
    assert result.fluid_trainable[1] == 0.0 and result.trained_samples[1] > 0
    assert math.isnan(result.harvest_efficiency[1])  # was 0.0
    assert math.isnan(result.device(1)["harvest_efficiency"])
    agg = result.aggregates()
    assert agg["harvest_efficiency"] == pytest.approx(
        result.trained_samples.sum() / result.fluid_trainable[0]
    )
    assert agg["harvest_efficiency_p5"] == agg["harvest_efficiency_p95"] == result.harvest_efficiency[0]
    alone = simulate_fleet(
        FleetArrivals(counts[:, :, 1:], NAMES, 0.25),
        PI4,
        tasks,
        make_fleet_policy("static:0.5"),
    )
    assert math.isnan(alone.aggregates()["harvest_efficiency"])


def test_a_device_whose_slo_attainment_is_unknown_counts_as_below_99_percent() -> None:
    one = np.ones(2)
    result = FleetResult(
        policy="p",
        task_names=("a",),
        horizon_s=1.0,
        requests=np.array([10, 10]),
        rejected=0 * one,
        completed=10 * one,
        queued_end=0 * one,
        slo_met=np.array([10.0, math.nan]),
        trained_samples=one,
        trained_per_task=np.ones((2, 1)),
        training_busy_s=one,
        inference_busy_s=one,
        fluid_trainable=one,
        max_backlog=one,
        mean_latency_s=one,
    )
    assert result.aggregates()["devices_below_99pct_slo"] == 1
