"""Which misses training caused: the busy period's training delay, in the tracker and in the
simulator, against the inference-only counterfactual."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.attribution import BusyPeriodDelay, TrainingTimeline, is_training_miss
from dartfl.metrics import summarize, training_caused_misses
from dartfl.policies import make_policy
from dartfl.sim import SimConfig, simulate
from dartfl.types import DeviceProfile, InferenceCost, TaskSpec, TrainingCost


def test_only_the_part_of_a_step_with_requests_waiting_delays_them() -> None:
    delay = BusyPeriodDelay()
    delay.step_ended(1.0, 0.5)  # nobody waited
    assert delay.delay_s == 0.0 and math.isnan(delay.cause_s)
    delay.request_queued(1.3)
    delay.request_queued(1.4)  # the busy period began at the first one
    delay.step_ended(1.5, 1.0)
    assert delay.delay_s == pytest.approx(0.2) and delay.cause_s == 1.0


def test_steps_in_one_busy_period_add_up_and_an_empty_free_device_ends_it() -> None:
    delay = BusyPeriodDelay()
    delay.request_queued(0.0)
    delay.step_ended(0.3, 0.1)  # owed training while a request waited (share < 1)
    delay.step_ended(0.6, 0.4)
    assert delay.delay_s == pytest.approx(0.4) and delay.cause_s == 0.4
    delay.device_free_and_empty()
    assert delay.delay_s == 0.0 and math.isnan(delay.cause_s)
    delay.step_ended(1.0, 0.7)
    assert delay.delay_s == 0.0


def test_a_miss_is_training_caused_only_if_the_delay_explains_it() -> None:
    assert is_training_miss(latency_s=0.30, slo_s=0.25, delay_s=0.1)
    assert not is_training_miss(latency_s=0.40, slo_s=0.25, delay_s=0.1)  # late anyway
    assert not is_training_miss(latency_s=0.20, slo_s=0.25, delay_s=0.1)  # not late
    assert not is_training_miss(latency_s=0.30, slo_s=0.25, delay_s=0.0)


# One task, so that service is first come, first served and the bound on the delay is exact.
PROFILE = DeviceProfile(
    name="one-task",
    inference=InferenceCost(0.002, 0.004),
    max_batch=8,
    training=TrainingCost(0.02, 0.02, 16),
)


def test_a_timeline_counts_the_training_inside_a_window_running_steps_included() -> None:
    timeline = TrainingTimeline(capacity=3)
    for end in (1.0, 2.0, 3.0):
        timeline.step_ended(end, 0.5)  # steps 0.5-1.0, 1.5-2.0, 2.5-3.0
    assert timeline.seconds_since(1.75, 3.2) == pytest.approx(0.25 + 0.5)
    assert timeline.seconds_since(3.0, 3.2) == 0.0
    assert timeline.seconds_since(3.0, 3.2, running_since_s=(3.1,)) == pytest.approx(0.1)
    # Two lanes training at once cannot delay a request by more than the window's length.
    assert timeline.seconds_since(2.5, 3.0, running_since_s=(2.0,)) == pytest.approx(0.5)
    timeline.step_ended(4.0, 0.5)  # the oldest step is forgotten
    assert timeline.seconds_since(0.0, 4.0) == pytest.approx(1.5)


def _clumpy_trace(seed: int) -> Arrivals:
    rng = np.random.default_rng(seed)
    quiet = rng.uniform(0.0, 120.0, 200)
    clumps = np.concatenate([t + rng.uniform(0.0, 0.05, 25) for t in rng.uniform(1.0, 119.0, 12)])
    times = np.sort(np.concatenate([quiet, clumps]))
    return Arrivals(times, np.zeros(times.size, dtype=np.int64), ("a",), 120.0)


@pytest.mark.parametrize("spec", ["inference-first:16", "inference-first:4", "dart"])
def test_every_miss_that_inference_only_would_have_met_is_counted(spec: str) -> None:
    arrivals = _clumpy_trace(3)
    tasks = [TaskSpec("a", 0.15)]
    alone = simulate(arrivals, PROFILE, tasks, make_policy("inference-only"), SimConfig())
    shared = simulate(arrivals, PROFILE, tasks, make_policy(spec), SimConfig())
    met_alone = alone.finish_s - alone.arrival_s <= 0.15
    missed_shared = ~(shared.finish_s - shared.arrival_s <= 0.15)
    caused = training_caused_misses(shared)
    assert caused is not None
    flipped = met_alone & missed_shared
    assert flipped.any() or spec == "dart"
    assert not (flipped & ~caused).any()  # every flip is counted as caused by training
    assert summarize(shared)["training_miss_fraction"] == pytest.approx(caused.mean())


def test_misses_of_an_overloaded_device_that_trains_nothing_are_not_training_caused() -> None:
    arrivals = _clumpy_trace(4)
    record = simulate(arrivals, PROFILE, [TaskSpec("a", 0.01)], make_policy("inference-only"), SimConfig())
    caused = training_caused_misses(record)
    assert caused is not None and not caused.any()
    assert summarize(record)["slo_attainment"] < 1.0


def test_a_busy_periods_delay_is_charged_no_more_misses_than_the_device_could_have_served() -> None:
    delay = BusyPeriodDelay()
    # 0.1 s behind, at 200 requests a second of the whole device: 20 more could have been served.
    charged = sum(delay.charge(0.1, 200.0) for _ in range(50))
    assert charged == 20
    assert delay.charge(0.105, 200.0)  # a longer delay explains one more
    delay.device_free_and_empty()
    assert delay.charged == 0 and delay.charge(0.001, 200.0)  # a new busy period, a new count


def _overload_trace(seed: int) -> Arrivals:
    """A quiet minute with clumps, 30 s at 3x the capacity of PROFILE, 30 quiet seconds."""
    rng = np.random.default_rng(seed)
    capacity = 1.0 / (0.004 + 0.002 / 8)
    quiet = rng.uniform(0.0, 60.0, 600)
    clumps = np.concatenate([t + rng.uniform(0.0, 0.05, 40) for t in rng.uniform(1.0, 59.0, 10)])
    over = rng.uniform(60.0, 90.0, int(3 * capacity * 30))
    times = np.sort(np.concatenate([quiet, clumps, over, rng.uniform(90.0, 120.0, 300)]))
    return Arrivals(times, np.zeros(times.size, dtype=np.int64), ("a",), 120.0)


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("spec", ["inference-first:16", "inference-first:4", "dart"])
def test_in_an_overload_the_count_tracks_the_misses_training_really_cost(spec: str, seed: int) -> None:
    # Issue 12: before the cap, every refusal of the 30-s overload was explained by the
    # training delay of its endless busy period (20,191 counted against a net cost of 15-843).
    arrivals = _overload_trace(seed)
    tasks = [TaskSpec("a", 0.15)]
    alone = simulate(arrivals, PROFILE, tasks, make_policy("inference-only"), SimConfig())
    shared = simulate(arrivals, PROFILE, tasks, make_policy(spec), SimConfig())
    met_alone = alone.finish_s - alone.arrival_s <= 0.15
    met_shared = shared.finish_s - shared.arrival_s <= 0.15
    net = int((met_alone & ~met_shared).sum() - (~met_alone & met_shared).sum())
    caused = training_caused_misses(shared)
    assert caused is not None
    overload_misses = int((~met_alone).sum())
    assert overload_misses > 10_000  # the overload is deep: inference alone misses this many
    assert 0.7 * net - 10 <= caused.sum() <= 1.3 * net + 10
