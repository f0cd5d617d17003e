"""The device simulator: a discrete-event replay of one device in virtual time.

Non-preemptible work items run on the device's lanes: inference batches of one task,
t_k(b) = a_k + c_k b, and training microbatches, s(m) = a_T + c_T m, priced on the cores the
lane holds (`DeviceProfile.lane_inference`, `lane_training`). Requests wait in bounded
per-task queues (a full queue rejects). Every control period the policy observes and
allocates; between decisions the executor enforces the allocation work-conservingly:
- on the serving lane, when requests wait and training may run, inference gets its share x
  of the busy time: each training step earns inference x / (1 - x) of its length (x = 1 is
  strict priority), and the most urgent task (earliest deadline) goes first;
- idle inference time goes to training, and no training work means inference gets all;
- a device whose cores the allocation splits also runs a training lane on the other cores,
  concurrently. While both lanes compute, each item runs (1 + its interference) times slower
  (its remaining work is rescaled whenever the other lane starts or stops), and a lane whose
  cores change first waits the profile's switch time.
The accounting and the choice of the next work item are `dartfl.executor.DeviceExecutor`'s,
the same object the real agent drives; this module is its event loop in virtual time. Time
comes from the event sequence only, never from the wall clock (SimPy's rule), so a replay is
deterministic for a seed. The wall clock is read only to time the policy's decisions, which
is a measurement, not part of the simulation. A one-core device runs exactly the one-lane
loop it always ran.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.executor import (
    LANES,
    ROUND_TOLERANCE_S,
    CoreSwitch,
    DeviceExecutor,
    ExecutorConfig,
    InferenceBatch,
    RoundClock,
    TrainingStep,
)
from dartfl.fluid import fluid_terms
from dartfl.metrics import RunRecord
from dartfl.policies.base import FutureAwarePolicy, FutureView, Policy
from dartfl.types import DeviceProfile, TaskSpec

__all__ = ["SimConfig", "simulate"]

Work = InferenceBatch[int] | TrainingStep | CoreSwitch


@dataclass(frozen=True)
class SimConfig:
    """How the simulated device runs. Rounds: every `round_s` a new FL round starts that
    owes `round_target_samples` by its end (0: no target, so no training deficit)."""

    period_s: float = 0.25
    round_s: float = 60.0
    round_target_samples: int = 0
    rate_time_constant_s: float = 2.0
    exponential_service: bool = False  # M/M/1-style checks: exponential inference service
    record_periods: bool = True
    deadline_admission: bool = True  # refuse what cannot make its SLO, as the agent does

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ConfigError(f"control period must be > 0 s, got {self.period_s}")
        if not self.round_s > 0:
            raise ConfigError(f"round length must be > 0 s, got {self.round_s}")
        if self.round_target_samples < 0:
            raise ConfigError(f"round target must be >= 0 samples, got {self.round_target_samples}")


def simulate(
    arrivals: Arrivals,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    policy: Policy,
    config: SimConfig | None = None,
    rng: np.random.Generator | None = None,
    timer: Callable[[], int] = time.perf_counter_ns,
    on_step: Callable[[int, tuple[float, ...], tuple[float, ...]], None] | None = None,
    keep_policy_state: bool = False,
) -> RunRecord:
    """Replay `arrivals` through one device run by `policy`; drain the queues at the end.

    `on_step(samples, task_shares, loss_weights)` is called for every training microbatch the
    device completes (in virtual-time order), so a caller can execute it for real: the
    federated ClientApp trains its model there while the timing stays modelled.
    The policy starts from a reset unless `keep_policy_state`: a caller that simulates one
    long-lived device in slices (an FL round at a time) carries what it learnt over.
    """
    cfg = config or SimConfig()
    names = arrivals.task_names
    if tuple(t.name for t in tasks) != names:
        raise ConfigError(
            f"task specs {[t.name for t in tasks]} must match the workload's tasks {list(names)}"
        )
    rng = rng or np.random.default_rng(0)
    if not keep_policy_state:
        policy.reset()
    horizon = arrivals.duration_s
    device: DeviceExecutor[int] = DeviceExecutor(
        tasks,
        policy,
        profile,
        RoundClock(cfg.round_s, cfg.round_target_samples, horizon_s=horizon),
        ExecutorConfig(
            cfg.period_s,
            cfg.rate_time_constant_s,
            record_periods=cfg.record_periods,
            deadline_admission=cfg.deadline_admission,
            lanes=2,
        ),
        timer=timer,
    )
    device.train_until_s = horizon
    times = arrivals.times_s.tolist()
    task_of = arrivals.tasks.tolist()
    n = len(times)
    planner = (
        _FuturePlanner(policy, arrivals, tasks, device) if isinstance(policy, FutureAwarePolicy) else None
    )
    device.step_planner = planner
    finish = np.full(n, np.nan)
    rejected = np.zeros(n, dtype=bool)
    lanes = _Lanes(device, profile, cfg, rng)
    delay = np.zeros(n)  # the training delay of each request's busy period (dartfl.attribution)
    delay_cause = np.full(n, np.nan)  # when the latest step in that delay started

    i = 0  # next arrival
    ticks = 1  # ticks are at j * period_s: a running sum would drift and add or drop the last one
    next_tick = cfg.period_s
    ends = lanes.end_s
    while True:
        t_arr = times[i] if i < n else math.inf
        t_tick = next_tick if next_tick < horizon - ROUND_TOLERANCE_S else math.inf
        now = min(ends[0], ends[1], t_arr, t_tick, device.rounds.next_end_s)
        if now == math.inf:
            break

        # 1. A running work item ends: answer its requests or bank its samples.
        for lane in (0, 1):
            if ends[lane] == now:
                work = lanes.finish(lane, now)
                if isinstance(work, InferenceBatch):
                    for r in work.requests:
                        finish[r] = now
                    if work.training_delay_s > 0.0:
                        delay[work.requests] = work.training_delay_s
                        delay_cause[work.requests] = work.delay_cause_s
                elif on_step is not None and isinstance(work, TrainingStep):
                    on_step(work.samples, device.alloc.task_shares, device.alloc.loss_weights)

        # Every FL round that has ended closes, with the steps done by its end (the last round
        # too: it ends at the horizon, where no control tick falls).
        if now >= device.rounds.next_end_s - ROUND_TOLERANCE_S:
            device.close_due_rounds(now)

        # 2. Arrivals up to now join their queue, or are rejected when it is full.
        while i < n and times[i] <= now:
            if device.admit(times[i], task_of[i], i) != "queued":
                rejected[i] = True
                if device.refusal_training_delay_s > 0.0:
                    delay[i] = device.refusal_training_delay_s
                    delay_cause[i] = device.refusal_delay_cause_s
            i += 1
        if planner is not None:
            planner.next_arrival = i

        # 3. Control period boundary: observe, update, decide.
        if t_tick == now:
            device.tick(now)
            ticks += 1
            next_tick = ticks * cfg.period_s

        # 4. A free lane asks the executor for its next work item; time runs it.
        if ends[0] == math.inf:
            lanes.start(0, now)
        if ends[1] == math.inf and lanes.training_lane_wanted():
            lanes.start(1, now)

    counts = arrivals.counts_per_task().tolist()
    fluid = fluid_terms(profile, names, counts)
    # The queue drains after the horizon and the step in flight finishes: the run lasts until then.
    last_answer = float(np.nanmax(finish)) if np.isfinite(finish).any() else 0.0
    periods = {key: np.asarray(v, dtype=np.float64) for key, v in device.periods.items()}
    periods["task_shares"] = np.asarray(device.period_shares, dtype=np.float64).reshape(-1, len(names))
    return RunRecord(
        policy=policy.name,
        task_names=names,
        slo_s=device.slo_s,
        horizon_s=horizon,
        arrival_s=arrivals.times_s,
        finish_s=finish,
        tasks=arrivals.tasks,
        rejected=rejected,
        trained_per_task=tuple(device.trained_per_task),
        training_busy_s=device.training_busy_s,
        inference_busy_s=device.inference_busy_s,
        inference_min_s=fluid.inference_min_s,
        cheapest_sample_s=fluid.cheapest_sample_s,
        max_backlog=device.max_backlog,
        decision_us=device.decision_us(),
        periods=periods,
        training_delay_s=delay,
        delay_cause_s=delay_cause,
        round_samples=tuple(device.rounds.closed),
        round_target_samples=cfg.round_target_samples,
        end_s=max(horizon, last_answer, device.last_step_end_s, lanes.last_step_end_s),
        fluid_units=fluid.units,
        offload_per_s=fluid.offload_per_s,
        offload_saves_s=fluid.offload_saves_s,
        cores=profile.cores.count,
        core_switches=device.switches,
    )


class _Lanes:
    """The device's lanes in virtual time: the item each runs, when it ends, and its
    interference with the other lane (docs/profiles.md, "Cores")."""

    def __init__(
        self, device: DeviceExecutor[int], profile: DeviceProfile, cfg: SimConfig, rng: np.random.Generator
    ) -> None:
        self.device = device
        self.cfg = cfg
        self.rng = rng
        self.split = device.lanes is not None
        model = profile.cores
        self.switch_s = model.switch_s
        self.slowdown = (1.0 + model.inference_interference, 1.0 + model.training_interference)
        # Prices by the cores a lane holds (index: cores; 0 unused), per task for inference.
        names = device.task_names
        per_cores = range(model.count + 1)
        self.inference = [[profile.lane_inference(t, max(1, c)) for t in names] for c in per_cores]
        self.training = [profile.lane_training(max(1, c)) for c in per_cores]
        self.end_s = [math.inf, math.inf]
        self.work: list[Work | None] = [None, None]
        self.duration_s = [0.0, 0.0]  # the item's solo time, or its elapsed time once stretched
        self.start_s = [0.0, 0.0]
        self.left_s = [0.0, 0.0]  # solo seconds of work left at `since_s`
        self.since_s = [0.0, 0.0]
        self.rate = [1.0, 1.0]  # solo seconds done per second: 1, or 1 / slowdown
        self.stretched = [False, False]
        self.computing = [False, False]
        self.last_step_end_s = -math.inf  # of the training lane

    def training_lane_wanted(self) -> bool:
        """The training lane holds cores, or the split asks it to (else it has nothing to do)."""
        split = self.device.lanes
        return split is not None and (split.held[1] > 0 or split.target < split.total)

    def start(self, lane: int, now: float) -> None:
        """Hand the free `lane` its next item (a zero-time switch is done at once)."""
        device = self.device
        work = device.next_work(now, LANES[lane])
        while isinstance(work, CoreSwitch) and self.switch_s == 0.0:
            device.switch_done(work, now, 0.0)
            work = device.next_work(now, LANES[lane])
        if work is None:
            return
        if isinstance(work, InferenceBatch):
            cost = self.inference[work.cores][work.task]
            duration = cost.batch_fixed_s + cost.per_request_s * len(work.requests)
            if self.cfg.exponential_service:
                duration = float(self.rng.exponential(duration))
        elif isinstance(work, TrainingStep):
            train = self.training[work.cores]
            duration = train.microbatch_fixed_s + train.per_sample_s * work.samples
        else:
            duration = self.switch_s
        self.work[lane] = work
        self.duration_s[lane] = duration
        self.start_s[lane] = now
        self.stretched[lane] = False
        computing = not isinstance(work, CoreSwitch)
        self.computing[lane] = computing
        if not (self.split and computing and self.computing[1 - lane]):
            self.rate[lane] = 1.0
            self.end_s[lane] = now + duration
            return
        # Both lanes compute now: this item runs slowed, and so does the other from now on.
        self.rate[lane] = 1.0 / self.slowdown[lane]
        self.left_s[lane], self.since_s[lane] = duration, now
        self.end_s[lane] = now + duration * self.slowdown[lane]
        self._rescale(1 - lane, now, 1.0 / self.slowdown[1 - lane])

    def finish(self, lane: int, now: float) -> Work | None:
        """The item on `lane` ends now: hand it back to the executor."""
        work, device = self.work[lane], self.device
        duration = (
            now - self.start_s[lane]
            if self.stretched[lane] or self.rate[lane] != 1.0
            else self.duration_s[lane]
        )
        if isinstance(work, InferenceBatch):
            device.batch_done(work, now, duration)
        elif isinstance(work, TrainingStep):
            device.step_done(work, now, duration)
            if lane == 1:
                self.last_step_end_s = now
        elif isinstance(work, CoreSwitch):
            device.switch_done(work, now, duration)
        was_computing = self.computing[lane]
        self.work[lane], self.end_s[lane], self.computing[lane] = None, math.inf, False
        if was_computing and self.computing[1 - lane]:
            self._rescale(1 - lane, now, 1.0)  # the other lane runs alone again
        return work

    def _rescale(self, lane: int, now: float, rate: float) -> None:
        """`lane`'s running item goes on at `rate` solo seconds per second from `now`."""
        if self.rate[lane] == rate:
            return
        if self.rate[lane] == 1.0 and not self.stretched[lane]:
            self.left_s[lane] = self.duration_s[lane] - (now - self.start_s[lane])
        else:
            self.left_s[lane] -= (now - self.since_s[lane]) * self.rate[lane]
        self.since_s[lane], self.rate[lane], self.stretched[lane] = now, rate, True
        left = self.left_s[lane]
        self.end_s[lane] = now + left / rate if left > 1e-12 else now


class _FuturePlanner:
    """Hands a future-aware reference the arrivals still to come (only a simulator knows them)."""

    def __init__(
        self,
        policy: FutureAwarePolicy,
        arrivals: Arrivals,
        tasks: Sequence[TaskSpec],
        device: DeviceExecutor[int],
    ) -> None:
        self.policy = policy
        self.times_s = arrivals.times_s
        self.slo_s = min(t.slo_s for t in tasks)
        self.batch_fixed_s = max(device.costs.batch_fixed_s)
        self.per_request_s = max(device.costs.per_request_s)
        self.training = device.profile.training
        self.next_arrival = 0  # the simulator keeps it at its next arrival

    def __call__(self, now_s: float) -> int:
        train = self.training
        view = FutureView(
            now_s,
            self.times_s[self.next_arrival :],
            self.slo_s,
            self.batch_fixed_s,
            self.per_request_s,
            train.microbatch_fixed_s,
            train.per_sample_s,
            train.max_microbatch,
        )
        return self.policy.choose_microbatch(view)
