"""The batch hold: under dense traffic a few requests wait a moment to share a batch, in the
agent and, when asked, in the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.executor.batch_hold import HOLD_BATCH, BatchHold, batch_hold_s, wakes_executor
from dartfl.policies import make_policy
from dartfl.sim import SimConfig, simulate
from dartfl.types import DeviceProfile, InferenceCost, TaskSpec, TrainingCost


def test_a_few_requests_under_dense_traffic_wait_out_one_hold_from_when_they_were_found() -> None:
    hold = BatchHold(batch_hold_s(slo_s=0.25))
    assert hold.hold_s == pytest.approx(0.010)
    assert hold.wait_for_s(2, 9.999, 10.0, rate_per_s=2000.0) == pytest.approx(0.010)
    assert hold.wait_for_s(3, 9.999, 10.0075, rate_per_s=2000.0) == pytest.approx(0.0025)
    assert hold.wait_for_s(3, 9.999, 10.0101, rate_per_s=2000.0) == 0.0  # held long enough: serve them
    assert hold.wait_for_s(1, 10.0105, 10.011, rate_per_s=2000.0) == pytest.approx(0.010)  # the next few anew


def test_what_waited_through_a_hold_is_not_held_again_in_a_later_batch() -> None:
    hold = BatchHold(batch_hold_s(slo_s=0.25))
    assert hold.wait_for_s(6, 9.999, 10.0, rate_per_s=2000.0) == pytest.approx(0.010)
    assert hold.wait_for_s(6, 9.999, 10.010, rate_per_s=2000.0) == 0.0  # one task's batch goes
    # Another task's requests waited through that hold too: served now, not held again.
    assert hold.wait_for_s(4, 10.004, 10.0102, rate_per_s=2000.0) == 0.0
    # Only requests that came after the hold ended wait: a new hold for them.
    assert hold.wait_for_s(2, 10.0101, 10.0103, rate_per_s=2000.0) == pytest.approx(0.010)


def test_no_hold_when_nobody_would_join_or_the_batch_is_full_or_the_slo_is_tight() -> None:
    hold = BatchHold(batch_hold_s(slo_s=0.25))
    assert hold.wait_for_s(1, 0.0, 0.0, rate_per_s=50.0) == 0.0  # one arrival per 20 ms: no company coming
    assert hold.wait_for_s(HOLD_BATCH, 0.0, 0.0, rate_per_s=5000.0) == 0.0
    assert hold.wait_for_s(0, math.inf, 0.0, rate_per_s=5000.0) == 0.0
    assert batch_hold_s(slo_s=0.03) == pytest.approx(0.003)  # 10% of a tight SLO


def test_the_ingress_wakes_the_executor_when_a_queue_starts_or_a_batch_is_full_only() -> None:
    assert [n for n in range(1, 40) if wakes_executor(n)] == [1, HOLD_BATCH]


def test_no_hold_for_a_model_whose_full_batch_outlasts_the_hold() -> None:
    quick = BatchHold(batch_hold_s(slo_s=0.15, model_per_request_s=30e-6))  # width 1: 32 of them take ~1 ms
    assert quick.wait_for_s(2, 0.0, 0.0, rate_per_s=2000.0) == pytest.approx(0.010)
    slow = BatchHold(batch_hold_s(slo_s=0.15, model_per_request_s=8e-3))  # width 24: a full batch is 256 ms
    assert slow.hold_s == 0.0
    assert slow.wait_for_s(2, 0.0, 0.0, rate_per_s=2000.0) == 0.0


QUICK = DeviceProfile(  # a width-1-like model: 32 requests cost 2.6 ms, well inside a 10 ms hold
    name="quick",
    inference=InferenceCost(batch_fixed_s=0.001, per_request_s=0.00005),
    max_batch=32,
    training=TrainingCost(microbatch_fixed_s=0.001, per_sample_s=0.0003, max_microbatch=32),
)


def _latencies(rate_per_s: float, batch_hold: bool) -> np.ndarray:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(1.0 / rate_per_s, int(rate_per_s * 20)))
    arrivals = Arrivals.build(times, np.zeros(len(times), dtype=np.int64), ("t",))
    config = SimConfig(batch_hold=batch_hold, record_periods=False)
    record = simulate(arrivals, QUICK, [TaskSpec("t", 0.15, 10_000)], make_policy("inference-only"), config)
    assert not np.isnan(record.finish_s).any()
    return record.finish_s - record.arrival_s


def test_the_simulator_holds_small_batches_under_dense_traffic_as_the_agent_does() -> None:
    held, at_once = _latencies(1000.0, True), _latencies(1000.0, False)
    hold = batch_hold_s(0.15, QUICK.inference.per_request_s)
    assert np.median(at_once) < 0.2 * hold  # served as they come: batches of one or two
    # Held: the requests found waiting wait out the hold, the ones that join it less.
    assert 0.3 * hold < np.median(held) < hold + 0.003
    assert held.max() < hold + 0.01  # never more than one hold and a batch or two behind it


def test_the_simulator_does_not_hold_sparse_traffic() -> None:
    sparse = _latencies(50.0, True)  # one arrival per 20 ms: nobody would join
    np.testing.assert_array_equal(sparse, _latencies(50.0, False))


def test_a_hold_never_outlasts_the_control_period_in_the_simulator_or_the_agent() -> None:
    # The executor refuses a hold longer than its period: a short period must shorten the
    # hold, not stop the device from starting (it did, with a 5 ms period and a quick model).
    assert batch_hold_s(0.15, QUICK.inference.per_request_s, period_s=0.005) == 0.005
    assert batch_hold_s(0.15, QUICK.inference.per_request_s, period_s=0.25) == pytest.approx(0.010)
    times = np.arange(0.0, 2.0, 0.001)
    arrivals = Arrivals.build(times, np.zeros(len(times), dtype=np.int64), ("t",))
    config = SimConfig(batch_hold=True, period_s=0.005, record_periods=False)
    record = simulate(arrivals, QUICK, [TaskSpec("t", 0.15, 10_000)], make_policy("inference-only"), config)
    assert not np.isnan(record.finish_s).any()
