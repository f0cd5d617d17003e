"""The one device executor: what it counts, what it observes, and which work it hands out."""

from __future__ import annotations

import math

import pytest

from dartfl.executor import DeviceExecutor, ExecutorConfig, InferenceBatch, RoundClock, TrainingStep
from dartfl.executor.costs import ProfiledCosts
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.types import TaskSpec

TASKS = [TaskSpec("a", 0.1, queue_capacity=2), TaskSpec("b", 0.5, queue_capacity=2)]


def _device(spec: str = "inference-first:4", rounds: RoundClock | None = None) -> DeviceExecutor[str]:
    return DeviceExecutor(
        TASKS, make_policy(spec), get_profile("pi4"), rounds or RoundClock(10.0, 0), ExecutorConfig(0.25)
    )


def test_a_full_queue_or_a_closed_device_refuses_and_the_refusal_is_a_miss_of_the_period() -> None:
    device = _device()
    assert [device.admit(0.0, 0, f"r{i}") for i in range(3)] == ["queued", "queued", "queue-full"]
    device.close()
    assert device.admit(0.0, 1, "late") == "shutting-down"
    obs = device.observation(0.1)
    assert obs.backlog == (2, 0) and obs.arrivals_since_last == (3, 1)
    assert obs.slo_misses_since_last == (1, 1) and device.queues.peak == 2
    device.tick(0.25)
    assert device.observation(0.3).arrivals_since_last == (0, 0)  # a tick starts a new period
    assert device.drain() == [(0, "r0"), (0, "r1")] and device.backlog() == (0, 0)


def test_the_most_urgent_head_is_served_first_and_late_answers_are_misses() -> None:
    device = _device()
    device.admit(0.00, 1, "slack")  # deadline 0.50
    device.admit(0.05, 0, "tight")  # deadline 0.15
    batch = device.next_work(0.05)
    assert isinstance(batch, InferenceBatch) and batch.requests == ["tight"]
    device.batch_done(batch, 0.30, 0.25)  # 0.25 s after it arrived: past its 0.1 s SLO
    assert device.observation(0.3).slo_misses_since_last == (1, 0)
    assert device.inference_busy_s == 0.25


def test_a_late_answer_is_training_caused_only_if_its_busy_period_training_explains_it() -> None:
    device = _device(spec="inference-first:16")
    device.config = ExecutorConfig(0.25, deadline_admission=False)
    device.tick(0.25)  # the warm-up period ends: inference-first may train now
    step = device.next_work(0.25)
    assert isinstance(step, TrainingStep) and step.samples == 16
    device.admit(0.30, 0, "behind")  # waits 0.2 s behind the step
    device.admit(0.31, 0, "anyway")
    device.step_done(step, 0.50, 0.25)
    first = device.take_batch(0.50, 1)
    assert first is not None and first.training_delay_s == pytest.approx(0.2)
    device.batch_done(first, 0.55, 0.05)  # 0.25 s: late, but 0.05 s without the step
    second = device.take_batch(0.55, 1)
    assert second is not None
    device.batch_done(second, 0.90, 0.35)  # 0.59 s: late by more than the step explains
    obs = device.observation(0.9)
    assert obs.slo_misses_since_last == (2, 0) and obs.training_misses_since_last == (1, 0)
    assert sum(device.trained_per_task) == 16 and device.rounds.trained == 16


def test_a_deadline_refusal_behind_a_step_is_training_caused_and_a_full_queue_is_not() -> None:
    device = _device(spec="inference-first:16")
    device.tick(0.25)
    step = device.next_work(0.25)
    assert isinstance(step, TrainingStep) and device.busy_until_s - 0.25 > 0.1
    # Task a's 0.1 s SLO cannot be met behind the step, but could without it.
    assert device.admit(0.26, 0, "behind") == "queue-full"
    assert device.refusal_training_delay_s == pytest.approx(device.busy_until_s - 0.26)
    assert device.refusal_delay_cause_s == 0.25
    assert [device.admit(0.26, 1, f"b{i}") for i in range(3)] == ["queued", "queued", "queue-full"]
    assert device.refusal_training_delay_s == 0.0  # the queue was full: training did not cause it
    obs = device.observation(0.3)
    assert obs.slo_misses_since_last == (1, 1) and obs.training_misses_since_last == (1, 0)


def test_a_refusal_that_waited_on_its_way_while_training_ran_is_training_caused() -> None:
    device = _device(spec="inference-first:16")
    device.tick(0.25)
    step = device.next_work(0.25)
    assert isinstance(step, TrainingStep)
    device.step_done(step, 0.50, 0.25)
    # Sent at 0.32 (deadline 0.42), read at 0.52: 0.18 s of its 0.2 s transit had a step
    # running, and without that it would have been served in time.
    assert device.admit(0.52, 0, "starved", waited_s=0.20) == "queue-full"
    assert device.refusal_training_delay_s == pytest.approx(0.18)
    # Sent at 0.30, read at 0.80: late by more than the 0.2 s of training in its transit.
    assert device.admit(0.80, 0, "late anyway", waited_s=0.50) == "queue-full"
    assert device.refusal_training_delay_s == 0.0
    obs = device.observation(0.9)
    assert obs.slo_misses_since_last == (2, 0) and obs.training_misses_since_last == (1, 0)


def test_a_transit_wait_with_no_training_in_it_is_not_training_caused() -> None:
    device = _device(spec="inference-only")
    device.tick(0.25)
    assert device.admit(0.52, 0, "slow broker", waited_s=0.20) == "queue-full"
    assert device.refusal_training_delay_s == 0.0
    assert device.observation(0.6).training_misses_since_last == (0, 0)


def test_periodic_rounds_close_at_their_ends_with_what_they_trained() -> None:
    rounds = RoundClock(1.0, 100, horizon_s=2.5)
    rounds.trained = 30
    rounds.close_due(0.999)
    assert rounds.closed == []
    rounds.close_due(2.2)  # two rounds ended at 1.0 and 2.0
    assert rounds.closed == [30, 0] and rounds.start_s == 2.0 and rounds.deadline_s == 3.0
    assert rounds.next_end_s == math.inf  # the third would end after the horizon


def test_external_rounds_owe_their_target_only_while_open() -> None:
    rounds = RoundClock(60.0, 500, periodic=False)
    assert rounds.target == 0 and rounds.next_end_s == math.inf
    rounds.begin(5.0, 8.0, 64)
    rounds.trained = 40
    assert (rounds.start_s, rounds.deadline_s, rounds.target) == (5.0, 13.0, 64)
    assert rounds.end() == 40 and rounds.target == 0 and rounds.closed == [40]


def test_a_device_that_may_not_train_only_serves() -> None:
    device = _device()
    device.tick(0.25)
    device.training_enabled = False
    assert device.next_work(0.3) is None
    device.training_enabled = True
    device.train_until_s = 0.3  # past the run's horizon: drain only
    assert device.next_work(0.3) is None


def test_a_step_of_real_samples_is_counted_as_trained() -> None:
    device = _device()
    step = TrainingStep(4, (0.5, 0.5), (1.0, 1.0), 1.0, 0.0)
    assert list(device.step_done(step, 0.1, 0.1, [3, 1])) == [3, 1]
    assert device.trained_per_task == [3, 1] and device.last_step_end_s == pytest.approx(0.1)


def test_a_steps_training_time_is_booked_to_its_tasks_by_their_samples() -> None:
    device = _device()
    device.step_done(TrainingStep(4, (0.5, 0.5), (1.0, 1.0), 1.0, 0.0), 0.2, 0.2, [3, 1])
    device.step_done(TrainingStep(2, (0.5, 0.5), (1.0, 1.0), 1.0, 0.2), 0.3, 0.1, [0, 2])
    assert device.training_busy_s_per_task == pytest.approx([0.15, 0.15])
    assert sum(device.training_busy_s_per_task) == pytest.approx(device.training_busy_s)


def test_the_cost_model_prices_a_request_end_to_end_and_publishes_what_it_plans_with() -> None:
    from dataclasses import replace

    from dartfl.executor import ProfiledCosts
    from dartfl.types import RequestPathCost

    path = RequestPathCost(receive_s=6e-5, ingress_s=2e-5, egress_s=5e-5, per_batch_s=1e-5)
    profile = replace(get_profile("x86-1core"), request_path=path)
    names = ("a", "b")
    costs = ProfiledCosts(profile, names)
    end_to_end = profile.inference_for("a")
    assert costs.per_request_s[0] == pytest.approx(end_to_end.per_request_s)
    assert costs.batch_fixed_s[0] == pytest.approx(end_to_end.batch_fixed_s)
    # The network thread costs what the calibration said, then a burst makes it dearer:
    # receiving 3x, decoding 5x. Told in sums of 64 requests, the price follows the change.
    for _ in range(1000 // 64):
        costs.observe_request_path(64, 64 * 6e-5, 64 * 2e-5)
    assert costs.per_request_s[0] == pytest.approx(end_to_end.per_request_s)
    for _ in range(6000 // 64):
        costs.observe_request_path(64, 64 * 1.8e-4, 64 * 1e-4)
    assert costs.per_request_s[0] == pytest.approx(end_to_end.per_request_s + 2e-4, rel=1e-2)
    before = costs.per_request_s[0]
    costs.observe_request_path(0, 1.0, 1.0)  # nothing to learn from: no request, no change
    costs.observe_request_path(64, -1.0, 1e-3)  # a clock that went backwards: ignored
    assert costs.per_request_s[0] == before
    published = costs.profile(profile, names)
    assert published.inference_for("a").per_request_s == pytest.approx(costs.per_request_s[0])
    assert published.inference_for("b").batch_fixed_s == pytest.approx(costs.batch_fixed_s[1])


def _learning_costs() -> ProfiledCosts:
    return ProfiledCosts(get_profile("x86-1core"), ("a", "b"))


def test_a_timed_batch_reprices_its_task_for_admission_at_once() -> None:
    costs = _learning_costs()
    fixed, per = costs.batch_fixed_s, costs.per_request_s  # read as admission does: now cached
    outside = per[0] - costs.inference[0].per_item_s  # the network thread's share of a request
    # Batches of 1 and 4 requests on a line twice the prior's: the fit is that line.
    a, c = 2 * fixed[0], 2 * costs.inference[0].per_item_s
    for size in (1, 4, 1, 4):
        costs.observe_batch(0, size, a + c * size)
    assert costs.batch_fixed_s[0] > fixed[0]
    assert costs.batch_fixed_s[0] == pytest.approx(a)
    assert costs.per_request_s[0] > per[0]
    assert costs.per_request_s[0] == pytest.approx(c + outside)
    assert (costs.batch_fixed_s[1], costs.per_request_s[1]) == (fixed[1], per[1])  # task b: not timed


def test_a_dearer_request_path_reprices_every_task_for_admission_at_once() -> None:
    costs = _learning_costs()
    fixed, per = costs.batch_fixed_s, costs.per_request_s
    executor = [p.per_item_s for p in costs.inference]
    # The first sum told replaces the profile's path costs: 3e-4 s receiving, 1e-4 s admitting.
    costs.observe_request_path(10, 10 * 3e-4, 10 * 1e-4)
    assert all(now > then for now, then in zip(costs.per_request_s, per, strict=True))
    assert costs.per_request_s == pytest.approx([e + 4e-4 for e in executor])
    assert costs.batch_fixed_s == fixed  # a request's path has no per-batch share


def test_the_prices_are_cached_until_an_inference_cost_is_told() -> None:
    costs = _learning_costs()
    fixed, per = costs.batch_fixed_s, costs.per_request_s
    assert costs.batch_fixed_s is fixed and costs.per_request_s is per
    costs.observe_step(8, 0.5)  # training: no inference price changes
    costs.observe_request_path(0, 1.0, 1.0)  # no request: nothing to learn
    assert costs.batch_fixed_s is fixed and costs.per_request_s is per


@pytest.mark.parametrize("workload", ["mmpp", "flash-crowd", "gamma"])
def test_deadline_admission_refuses_only_what_could_not_have_made_its_slo(workload: str) -> None:
    # The first refusal happens on the same history in both runs, so the run without
    # admission shows what became of that request: it missed its SLO. And refusing what would
    # miss anyway frees the device for the rest: attainment does not fall.
    import numpy as np

    import workloads
    from dartfl.sim import SimConfig, simulate
    from dartfl.sim.compare import task_specs

    profile = get_profile("pi4")
    names = ("a", "b")
    rate = 1.6 * profile.capacity_per_s(names, (1.0, 1.0)) / 2
    arrivals = workloads.generate(
        workload, duration_s=60.0, rate_per_s=rate, task_names=names, rng=np.random.default_rng(5)
    )
    tasks = task_specs(arrivals, 0.25, queue_capacity=4096)
    runs = {
        admit: simulate(
            arrivals, profile, tasks, make_policy("inference-only"), SimConfig(deadline_admission=admit)
        )
        for admit in (True, False)
    }
    refused = np.flatnonzero(runs[True].rejected)
    assert refused.size > 0
    first = refused[0]
    without = runs[False]
    assert without.finish_s[first] - without.arrival_s[first] > 0.25
    met = {a: float(np.mean(r.finish_s - r.arrival_s <= 0.25)) for a, r in runs.items()}
    assert met[True] >= met[False]


def test_a_transit_wait_while_the_request_path_was_down_is_not_training_caused() -> None:
    # A broker restart: requests wait for the broker, not for the CPU, while the idle device
    # trains. Blamed on that training, a 10-s outage's refusals pushed the miss debt past its
    # limit and stopped training for good.
    device = _device(spec="inference-first:16")
    device.tick(0.25)
    step = device.next_work(0.25)
    assert isinstance(step, TrainingStep)
    device.step_done(step, 0.50, 0.25)
    device.request_path_up(0.51)  # the broker link is back
    # Sent at 0.32, read at 0.52: of its 0.2 s transit, only 0.01 s came after the link was up,
    # and no step ran then: late because of the outage, not of the step.
    assert device.admit(0.52, 0, "stuck in the broker", waited_s=0.20) == "queue-full"
    assert device.refusal_training_delay_s == 0.0
    assert device.observation(0.6).training_misses_since_last == (0, 0)
