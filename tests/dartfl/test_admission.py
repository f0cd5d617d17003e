"""Deadline-aware admission counts what earliest-deadline-first serves first, and queued
requests that can no longer make their deadline expire (issue 12; docs/allocator.md, "Queues")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.executor import DeviceExecutor, ExecutorConfig, RoundClock
from dartfl.executor.admission import earliest_finish_s
from dartfl.executor.queues import TaskQueues
from dartfl.policies import make_policy
from dartfl.sim import SimConfig, simulate
from dartfl.types import DeviceProfile, InferenceCost, TaskSpec, TrainingCost

SLO_S = 0.25
FIXED, PER, BATCH = (0.001,) * 3, (0.005,) * 3, 8


def _queues(**arrivals: list[float]) -> TaskQueues[int]:
    queues: TaskQueues[int] = TaskQueues((SLO_S,) * 3, (1000,) * 3)
    for task, times in arrivals.items():
        for t in times:
            queues.push(int(task[1]), t, 0)
    return queues


def test_a_newcomer_waits_for_every_request_of_the_other_tasks_due_before_it() -> None:
    # Tasks 1 and 2 hold 25 requests each, all older than the newcomer of task 0: EDF serves
    # every one of them first, in batches of 8, not just one batch of each (the rule until
    # 2026-12-03, which admitted it here and let it miss).
    older = [0.001 * i for i in range(25)]
    queues = _queues(t1=older, t2=older)
    finish = earliest_finish_s(0.05, 0.0, 0, queues, SLO_S, FIXED, PER, BATCH)
    others = 2 * (25 * 0.005 + math.ceil(25 / 8) * 0.001)
    assert finish == pytest.approx(0.05 + others + 0.005 + 0.001)
    assert finish > 0.05 + SLO_S  # past its deadline: refused
    one_batch_each = 0.05 + 2 * (8 * 0.005 + 0.001) + 0.005 + 0.001
    assert one_batch_each <= 0.05 + SLO_S  # what the old rule saw


def test_requests_due_after_the_newcomers_batch_head_do_not_count() -> None:
    # Task 0 holds 10 requests, so the newcomer rides in its second batch, whose head (position
    # 8) arrived at 0.08. Task 1's requests all arrived later: they are served after it.
    queues = _queues(t0=[0.01 * i for i in range(10)], t1=[0.085, 0.2, 0.3])
    finish = earliest_finish_s(0.3, 0.0, 0, queues, SLO_S, FIXED, PER, BATCH)
    assert finish == pytest.approx(0.3 + 11 * 0.005 + 2 * 0.001)
    queues = _queues(t0=[0.01 * i for i in range(10)], t1=[0.05, 0.2, 0.3])
    finish_with_one = earliest_finish_s(0.3, 0.0, 0, queues, SLO_S, FIXED, PER, BATCH)
    assert finish_with_one == pytest.approx(finish + 0.005 + 0.001)  # 0.05 is due first


PROFILE = DeviceProfile(
    name="one-task", inference=InferenceCost(0.002, 0.004), max_batch=8, training=TrainingCost(0.02, 0.02, 16)
)


def _device(deadline_admission: bool = True) -> DeviceExecutor[str]:
    config = ExecutorConfig(0.25, deadline_admission=deadline_admission)
    return DeviceExecutor(
        [TaskSpec("a", 0.1)], make_policy("inference-only"), PROFILE, RoundClock(10.0, 0), config
    )


def test_a_queued_request_that_can_no_longer_make_it_expires_as_a_miss() -> None:
    device = _device()
    assert device.admit(0.0, 0, "old") == "queued"
    assert device.admit(0.05, 0, "young") == "queued"
    device.busy_until_s = 0.095  # the lane was busy with something else until now
    work = device.next_work(0.095)
    # "old" is due at 0.1 and a batch of one takes 6 ms: it cannot make it and expires.
    assert [r for _, r, _, _ in device.take_expired()] == ["old"]
    assert work is not None and work.requests == ["young"]
    assert device.counts.misses == [1] and device.expired_total == 1
    assert device.take_expired() == []  # handed over once


def test_without_deadline_admission_nothing_expires() -> None:
    device = _device(deadline_admission=False)
    device.admit(0.0, 0, "old")
    work = device.next_work(0.2)
    assert device.take_expired() == [] and work is not None and work.requests == ["old"]


def test_a_batch_refuses_the_head_it_would_answer_late_and_takes_a_request_that_can_make_it() -> None:
    # Ten requests of a 100-ms SLO, due at 0.100-0.109; each could make it alone (6 ms).
    device = _device()
    for i in range(10):
        assert device.admit(0.001 * i, 0, f"r{i}") == "queued"
    work = device.next_work(0.0695)
    # A batch of 8 started at 0.0695 ends at 0.1035: r0-r3 (due 0.100-0.103) would be late in it.
    assert [r for _, r, _, _ in device.take_expired()] == ["r0", "r1", "r2", "r3"]
    assert work is not None and work.requests == [f"r{i}" for i in range(4, 10)]
    # The six left end at 0.0695 + 0.002 + 6 x 0.004 = 0.0955, before r4's deadline (0.104).
    assert device.busy_until_s == pytest.approx(0.0955)
    assert all(device.busy_until_s <= a + 0.1 for a in work.arrivals_s)
    assert device.counts.misses == [4] and device.expired_total == 4


def test_under_overload_exact_costs_answer_nothing_late_and_more_in_time() -> None:
    # Poisson arrivals at twice the capacity of full batches, on a device whose costs the
    # executor knows exactly: each admitted request is answered in time or refused. Until
    # 2026-12-06 a full batch took heads it would answer late: a quarter of the answers were.
    rng = np.random.default_rng(1)
    capacity = PROFILE.max_batch / (0.002 + 0.004 * PROFILE.max_batch)
    times = np.cumsum(rng.exponential(1.0 / (2.0 * capacity), 4000))
    arrivals = Arrivals(times, np.zeros(times.size, dtype=np.int64), ("a",), float(times[-1]))
    record = simulate(arrivals, PROFILE, [TaskSpec("a", 0.1)], make_policy("inference-only"), SimConfig())
    answered = np.isfinite(record.finish_s) & ~record.rejected
    late = answered & (record.finish_s - record.arrival_s > 0.1 + 1e-9)
    assert answered.sum() > 0.45 * times.size and late.sum() == 0
