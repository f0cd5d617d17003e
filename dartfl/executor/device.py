"""`DeviceExecutor`: one device's queues, period accounting, rounds and choice of work.

The simulator and the real agent both drive this object, so what a device counts, what its
policy observes and which work item runs next cannot differ between them:

- `admit` queues a request, or refuses it when its queue is full or the device is closing
  (a refusal counts as a miss of the period);
- `tick`, once per control period, folds the period's arrivals into the rate estimates,
  builds the Observation, lets the policy update and decide, and starts a new period;
- `next_work(now, lane)`, whenever a lane falls free, applies the Allocation: on the serving
  lane `ShareGate` picks inference or training, inference serves the most urgent task first,
  and a training step takes the allocated microbatch; the training lane of a split device
  only trains; a lane whose cores the allocation moves first gets a `CoreSwitch`.
  `batch_done`, `step_done` and `switch_done` take the finished item back with its duration,
  which is also what the cost model learns from.

Lanes (dartfl.executor.lanes): a device of N cores splits into a serving lane of k cores and
a training lane of N - k, running concurrently; k = N is time sharing, today's rule on one
lane. A driver says how many lanes it runs (`ExecutorConfig.lanes`): with one, the device is
never split, whatever the policy asks. Time is passed in on every call (virtual in the
simulator, monotonic on the agent). The executor takes no locks: a driver with several
threads (the agent; one thread per lane) serialises its calls.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from dartfl.errors import ConfigError, PolicyError
from dartfl.estimators import EwmaRates
from dartfl.executor.admission import DeadlineAdmission
from dartfl.executor.batch_hold import BatchHold
from dartfl.executor.config import ExecutorConfig
from dartfl.executor.costs import CostModel, StaticCosts
from dartfl.executor.gate import ShareGate, most_urgent
from dartfl.executor.lane_control import LaneControl
from dartfl.executor.lanes import CoreLanes, ServingLanePrices
from dartfl.executor.misses import MissCauses
from dartfl.executor.observation import Observer
from dartfl.executor.periods import PeriodCounts, PeriodSeries
from dartfl.executor.queues import TaskQueues
from dartfl.executor.rounds import RoundClock
from dartfl.executor.split import SampleSplitter
from dartfl.executor.work import INFERENCE_LANE, TRAINING_LANE, CoreSwitch, InferenceBatch, Lane, TrainingStep
from dartfl.policies.base import Policy
from dartfl.types import Allocation, DeviceProfile, Observation, TaskSpec

__all__ = ["Admission", "DeviceExecutor", "ExecutorConfig"]

R = TypeVar("R")
Admission = Literal["queued", "queue-full", "shutting-down"]
Work = InferenceBatch[R] | TrainingStep | CoreSwitch
# Plans a training step on an empty queue from what only a simulator knows (the future).
StepPlanner = Callable[[float], int]


class DeviceExecutor(Generic[R]):
    """The accounting and the work choice of one device; `R` is the driver's request handle."""

    def __init__(
        self,
        tasks: Sequence[TaskSpec],
        policy: Policy,
        profile: DeviceProfile,
        rounds: RoundClock,
        config: ExecutorConfig | None = None,
        costs: CostModel | None = None,
        timer: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        cfg = config or ExecutorConfig()
        k = len(tasks)
        if k == 0:
            raise ConfigError("a device needs at least one task")
        self.config = cfg
        self.task_names = tuple(t.name for t in tasks)
        self.slo_s = tuple(t.slo_s for t in tasks)
        self.policy = policy
        # What a driver that must not stop does when the policy fails (PolicyError): given the
        # error, the policy to decide with from then on. None: the error propagates.
        self.on_policy_failure: Callable[[PolicyError], Policy] | None = None
        self.profile = profile
        self.cores = profile.cores.count
        self.costs: CostModel = costs if costs is not None else StaticCosts(profile, self.task_names)
        self.rounds = rounds
        self.timer = timer
        self.queues: TaskQueues[R] = TaskQueues(self.slo_s, [t.queue_capacity for t in tasks])
        self.counts = PeriodCounts(k)
        self.rates = EwmaRates(k, cfg.rate_time_constant_s)
        self.gate = ShareGate()
        self.hold = BatchHold(cfg.batch_hold_s)
        self.splitter = SampleSplitter(k)
        self.prices = ServingLanePrices(  # slowed while the other lane computes (interference)
            (1.0 + profile.cores.inference_interference, 1.0 + profile.cores.training_interference)
        )
        # Split only where both the device and the driver can: a one-lane driver time-shares.
        splits = cfg.lanes == 2 and profile.cores.can_split
        self.lanes = CoreLanes(self.cores) if splits else None
        # What training and the split held back, and which misses they caused.
        self.causes = MissCauses(self.slo_s, self.counts, self.lanes)
        self.lane_control = (
            LaneControl(
                self.lanes, self.prices, self.queues, self.rates, profile.training.max_microbatch, self.causes
            )
            if self.lanes is not None
            else None
        )
        self.observer = Observer(self.queues, self.counts, self.rates, rounds, profile, self.lanes)
        target = cfg.admission_miss_target if cfg.deadline_admission else None
        self.deadlines = DeadlineAdmission(self.queues, self.prices, profile.max_batch, target, self.causes)
        # Tallies of the finished work.
        self.trained_per_task = [0] * k
        self.inference_busy_s = 0.0
        self.training_busy_s = 0.0
        self.switches = 0
        self.switch_busy_s = 0.0
        # Each step's duration split by its samples per task: where the training time went.
        self.training_busy_s_per_task = [0.0] * k
        self.last_step_end_s = -math.inf  # when the latest step on the serving lane ended
        self.busy_until_s = -math.inf  # when the work item running now is expected to end
        # The last refusal's training delay (0: training did not cause it) and its step's start.
        self.refusal_training_delay_s = 0.0
        self.refusal_delay_cause_s = math.nan
        self.expired_total = 0  # queued requests refused once they could no longer make it
        self.expired: list[tuple[int, R, float, float]] = []  # for the driver to answer
        self.decision_ns: deque[int] = deque(maxlen=cfg.max_decisions)
        self.series = PeriodSeries()
        self.training_enabled = True  # False: serve only (a federated agent between rounds)
        self.train_until_s = math.inf  # no training step starts at or after it (a run's horizon)
        self.closed = False  # shutting down: every new request is refused
        self.step_planner: StepPlanner | None = None
        # The first period is a warm-up: with no arrival history yet, serve and do not train.
        self.alloc = Allocation(1.0, (1.0 / k,) * k, (1.0,) * k, 0, profile.max_batch)

    # -- requests ---------------------------------------------------------------------------------

    def admit(self, now_s: float, task: int, request: R, waited_s: float = 0.0) -> Admission:
        """Queue `request` of `task`, or refuse it (the caller answers the refusal).

        `waited_s`: how long it had already waited on its way here (edge_client/transit.py);
        its SLO runs from then, so its latency and its deadline count that wait."""
        counts = self.counts
        counts.arrivals[task] += 1
        self.refusal_training_delay_s, self.refusal_delay_cause_s = 0.0, math.nan
        if self.closed:
            counts.misses[task] += 1
            return "shutting-down"
        arrival_s = now_s - waited_s
        if self.queues.full(task) or not self._in_time(now_s, arrival_s, task, waited_s):
            counts.misses[task] += 1  # a rejection counts as a miss
            return "queue-full"
        self.queues.push(task, arrival_s, request)
        self.causes.delay.request_queued(now_s)  # training can hold it back from now on
        return "queued"

    def request_path_up(self, now_s: float) -> None:
        """The requests' way in (an agent's broker link) is up, again, from `now_s`: a transit
        wait is blamed on training that ran from then on only (dartfl/attribution.py)."""
        self.causes.request_path_up_since_s = now_s

    def _in_time(self, now_s: float, arrival_s: float, task: int, waited_s: float = 0.0) -> bool:
        if not self.config.deadline_admission:
            return True
        refusal = self.deadlines.refusal(now_s, task, arrival_s, waited_s, self.busy_until_s, self.costs)
        if refusal is None:
            return True
        self.refusal_training_delay_s, self.refusal_delay_cause_s = refusal
        return False

    def backlog(self) -> tuple[int, ...]:
        """Requests queued now, per task."""
        return self.queues.lengths()

    def close(self) -> None:
        """Refuse every request from now on; what is queued stays to be served or drained."""
        self.closed = True

    def drain(self) -> list[tuple[int, R]]:
        """Remove everything still queued, as (task, request), to refuse it."""
        return self.queues.drain()

    # -- the control period -----------------------------------------------------------------------

    @property
    def period_arrivals(self) -> tuple[int, ...]:
        """Arrivals per task since the last tick (rejected ones included)."""
        return tuple(self.counts.arrivals)

    def observation(self, now_s: float) -> Observation:
        """What the policy sees now (`Observer`)."""
        return self.observer.observe(now_s, self.config.period_s, self.costs)

    def tick(self, now_s: float, elapsed_s: float | None = None) -> Allocation:
        """End the control period at `now_s` (it lasted `elapsed_s`, the nominal period if
        None) and decide the next one's allocation."""
        self.rates.update(self.counts.arrivals, self.config.period_s if elapsed_s is None else elapsed_s)
        obs = self.observation(now_s)
        started = self.timer()
        try:
            alloc = _decision(self.policy, obs)
        except PolicyError as exc:
            if self.on_policy_failure is None:
                raise
            self.policy = self.on_policy_failure(exc)
            alloc = _decision(self.policy, obs)
        self.decision_ns.append(self.timer() - started)
        self.alloc = alloc
        if self.lane_control is not None:
            self.lane_control.decided(alloc, self.costs)
        self.counts.reset()
        if self.config.record_periods:
            cores = self.lanes.target if self.lanes is not None else self.cores
            self.series.record(now_s, self.queues.total, alloc, sum(self.trained_per_task), cores)
        return alloc

    def close_due_rounds(self, now_s: float) -> None:
        """Close the periodic FL rounds that have ended by `now_s`."""
        self.rounds.close_due(now_s)

    # -- work -------------------------------------------------------------------------------------

    def training_open(self, now_s: float) -> bool:
        return self.training_enabled and now_s < self.train_until_s and self.alloc.microbatch > 0

    @property
    def reclaims(self) -> int:
        """How often the serving lane fell behind and took every core back until the tick."""
        return 0 if self.lane_control is None else self.lane_control.reclaims

    def hold_left_s(self, now_s: float) -> float:
        """How much longer the serving lane should wait before `next_work` so that the few
        requests waiting now share a batch with the next ones (0: take work now)."""
        if self.hold.hold_s == 0.0:
            return 0.0
        queues = self.queues
        return self.hold.wait_for_s(
            queues.total, queues.oldest_arrival_s(), now_s, sum(self.rates.fast_rates_per_s)
        )

    def next_work(self, now_s: float, lane: Lane = INFERENCE_LANE) -> Work[R] | None:
        """The work item `lane` runs now that it is free (None: it stays idle)."""
        control = self.lane_control
        if control is None:
            return self._serving_work(now_s, self.cores)
        may_train = self.training_enabled and now_s < self.train_until_s
        switch = control.boundary(lane, now_s, self.alloc, may_train, self.costs)
        if switch is not None:
            return switch
        i = 0 if lane == INFERENCE_LANE else 1
        held = control.lanes.held[i]
        if held == 0:
            return None
        work = self._serving_work(now_s, held) if i == 0 else self._training_lane_work(now_s, held)
        if work is not None:
            control.lanes.started(i, now_s)
        return work

    def _serving_work(self, now_s: float, cores: int) -> InferenceBatch[R] | TrainingStep | None:
        """The serving lane's choice: `ShareGate` between inference and steps of `microbatch`."""
        alloc = self.alloc
        training_open = self.training_open(now_s)
        self.expire_hopeless(now_s)
        backlog = self.queues.total
        if backlog == 0:
            self.causes.delay.device_free_and_empty()
        if self.gate.should_serve(backlog, alloc.inference_share, training_open):
            return self.take_batch(now_s, alloc.max_batch)
        if not training_open:
            return None
        m = alloc.microbatch
        if self.step_planner is not None and backlog == 0:
            m = self.step_planner(now_s)
        if m <= 0:
            return None
        lanes = self.lanes
        if not self.config.concurrent_steps and lanes is not None and lanes.busy_since_s[1] >= 0.0:
            return None  # one model trains one step at a time: the training lane has it
        a_t, c_t = self.prices.step(self.costs)
        self.busy_until_s = now_s + a_t + c_t * m
        self.causes.serving_step = (now_s, self.busy_until_s)
        return TrainingStep(
            m, alloc.task_shares, alloc.loss_weights, alloc.inference_share, now_s, INFERENCE_LANE, cores
        )

    def _training_lane_work(self, now_s: float, cores: int) -> TrainingStep | None:
        """The training lane of a split device trains only, in steps of `split_microbatch`."""
        alloc = self.alloc
        if not (self.training_enabled and now_s < self.train_until_s):
            return None
        if not self.config.concurrent_steps and self.causes.serving_step is not None:
            return None  # the serving lane's step has the model
        m = alloc.split_microbatch
        if m is None:
            m = self.profile.training.max_microbatch
        if m <= 0:
            return None
        return TrainingStep(m, alloc.task_shares, alloc.loss_weights, 1.0, now_s, TRAINING_LANE, cores)

    def expire_hopeless(self, now_s: float) -> None:
        """Refuse the queued requests that can no longer be answered in time, even alone and
        starting now: serving them would only take the device from requests that still can
        (docs/allocator.md, "Queues"). The driver answers them (`take_expired`)."""
        if not self.config.deadline_admission:
            return
        self._refused(self.deadlines.expire(now_s, self.costs))

    def _refused(self, expired: list[tuple[int, R, float, float]]) -> None:
        """Queued requests refused because they could no longer make it: the driver answers them."""
        self.expired_total += len(expired)
        self.expired += expired

    def take_expired(self) -> list[tuple[int, R, float, float]]:
        """The requests refused since the last call because they could no longer make their
        deadline, as (task, request, training delay that caused it or 0, its cause)."""
        expired, self.expired = self.expired, []
        return expired

    def take_batch(self, now_s: float, max_batch: int) -> InferenceBatch[R] | None:
        """A batch of at most `max_batch` from the most urgent task's queue (None if all empty)."""
        queues = self.queues
        self.expire_hopeless(now_s)
        task = most_urgent(queues.head_deadlines_s())
        while task >= 0 and self.config.deadline_admission:
            late = self.deadlines.expire_late_in_batch(now_s, task, max_batch, self.costs)
            if not late:
                break
            self._refused(late)
            task = most_urgent(queues.head_deadlines_s())
        if task < 0:
            return None
        size = min(len(queues.times[task]), max_batch)
        cores = self.lanes.held[0] if self.lanes is not None else self.cores
        fixed, per = self.prices.inference(self.costs)
        run_s = fixed[task] + per[task] * size
        delay = self.causes.delay
        if self.prices.split is not None:  # split: what the whole device would have saved is delay
            costs = self.costs
            delay.lane_slowed(now_s, run_s - costs.batch_fixed_s[task] - costs.per_request_s[task] * size)
        requests, arrivals = queues.pop(task, size)
        batch = InferenceBatch(
            task, requests, arrivals, now_s, cores, delay.delay_s, delay.cause_s, delay.split_s
        )
        self.busy_until_s = now_s + run_s
        return batch

    def batch_done(self, batch: InferenceBatch[R], now_s: float, duration_s: float) -> tuple[int, ...]:
        """The batch was answered at `now_s` after running `duration_s`. Returns the positions
        in the batch of the requests training made miss (usually none)."""
        k = batch.task
        late, caused = self.causes.answered(batch, now_s, self.costs)
        self.counts.misses[k] += late
        self.deadlines.answered(late, len(batch.arrivals_s) - late)
        self.gate.served(duration_s)
        self.inference_busy_s += duration_s
        solo_s, cores = self._solo(0, now_s, duration_s, batch.cores)
        self.costs.observe_batch(k, len(batch.arrivals_s), solo_s, cores)
        return caused

    def step_done(
        self,
        step: TrainingStep,
        now_s: float,
        duration_s: float,
        samples_per_task: Sequence[int] | None = None,
    ) -> Sequence[int]:
        """The step ended at `now_s` after `duration_s`; returns its samples per task.

        A driver that trained real samples passes their split; otherwise the executor splits
        the step by the task shares in force now, with carry-over (`SampleSplitter`)."""
        if samples_per_task is None:
            samples_per_task = self.splitter.split(step.samples, self.alloc.task_shares)
        total = sum(samples_per_task)
        for k, got in enumerate(samples_per_task):
            self.trained_per_task[k] += got
            if total > 0:
                self.training_busy_s_per_task[k] += duration_s * got / total
        self.rounds.trained += step.samples
        self.training_busy_s += duration_s
        self.causes.timeline.step_ended(now_s, duration_s)
        if step.lane == INFERENCE_LANE:  # only a step on the serving lane holds requests back
            self.gate.trained(duration_s, step.inference_share)
            self.last_step_end_s = now_s
            self.causes.delay.step_ended(now_s, step.started_s)
            self.causes.serving_step = None
        lane = 0 if step.lane == INFERENCE_LANE else 1
        solo_s, cores = self._solo(lane, now_s, duration_s, step.cores)
        self.costs.observe_step(step.samples, solo_s, cores)
        return samples_per_task

    def _solo(self, lane: int, now_s: float, duration_s: float, cores: int) -> tuple[float, int | None]:
        """What the cost model learns from a finished item (`LaneControl.solo`); time-shared:
        its duration as it ran, on the whole device (None)."""
        if self.lane_control is None:
            return duration_s, None
        return self.lane_control.solo(lane, now_s, duration_s, cores)

    def switch_done(self, switch: CoreSwitch, now_s: float, duration_s: float) -> None:
        """`switch`'s lane now runs on its new cores; resizing it took `duration_s`."""
        self.switches += 1
        self.switch_busy_s += duration_s

    # -- reports ----------------------------------------------------------------------------------

    def decision_us(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.decision_ns, dtype=np.float64) / 1e3


def _decision(policy: Policy, obs: Observation) -> Allocation:
    """The policy's `update` then `decide`; a PolicyError that names the policy, the time and
    the line at fault if either raises or the decision does not fit the device (a plugin's
    bug: the built-in policies do neither)."""
    try:
        policy.update(obs)
        alloc = policy.decide(obs)
    except Exception as exc:  # someone else's code: say whose, and where
        where = _culprit(traceback.extract_tb(exc.__traceback__), policy)
        raise PolicyError(
            f"policy {policy.name!r} failed at t = {obs.now_s:.3f} s: {type(exc).__name__}: {exc}{where}"
        ) from exc
    problem = _misfit(alloc, obs)
    if problem:
        raise PolicyError(f"policy {policy.name!r} decided at t = {obs.now_s:.3f} s {problem}")
    return alloc


def _misfit(alloc: object, obs: Observation) -> str:
    """What makes a decision unusable on this device ("" if nothing): an Allocation checks its
    own values, not the device's task count and limits."""
    if not isinstance(alloc, Allocation):
        return f"a {type(alloc).__name__}; decide must return a dartfl.types.Allocation"
    if len(alloc.task_shares) != obs.num_tasks:
        return f"{len(alloc.task_shares)} task shares for {obs.num_tasks} tasks: give one per task"
    for name, value, limit in (
        ("microbatch", alloc.microbatch, "max_microbatch"),
        ("split_microbatch", alloc.split_microbatch, "max_microbatch"),
        ("max_batch", alloc.max_batch, "max_batch"),
    ):
        most = getattr(obs, limit)
        if value is not None and value > most:
            return f"{name} {value}, above the device's {most} (obs.{limit})"
    return ""


_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the dartfl package


def _culprit(frames: traceback.StackSummary, policy: Policy) -> str:
    """` (file:line)` of the line at fault: the deepest frame in the policy's own module, else
    the deepest in a real file outside dartfl (not the check in dartfl that refused a value,
    nor a dataclass's generated `__init__`, "<string>"), else the deepest."""
    if not frames:
        return ""
    module = sys.modules.get(type(policy).__module__)
    own = getattr(module, "__file__", None)
    theirs = (f for f in reversed(frames) if not f.filename.startswith((_OURS + os.sep, "<")))
    frame = next((f for f in reversed(frames) if f.filename == own), None) or next(theirs, frames[-1])
    return f" ({frame.filename}:{frame.lineno})"
