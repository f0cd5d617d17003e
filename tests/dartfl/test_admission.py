"""Deadline-aware admission counts what earliest-deadline-first serves first, and queued
requests that can no longer make their deadline expire (issue 12; docs/allocator.md, "Queues")."""

from __future__ import annotations

import math

import pytest

from dartfl.executor import DeviceExecutor, ExecutorConfig, RoundClock
from dartfl.executor.admission import earliest_finish_s
from dartfl.executor.queues import TaskQueues
from dartfl.policies import make_policy
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
