"""The device simulator: a discrete-event replay of one device in virtual time.

One compute resource runs non-preemptible work items: inference batches of one task,
t_k(b) = a_k + c_k b, and training microbatches, s(m) = a_T + c_T m. Requests wait in bounded
per-task queues (a full queue rejects). Every control period the policy observes and
allocates; between decisions the executor enforces the allocation work-conservingly:
- when requests wait and training may run, inference gets its share x of the busy time: each
  training step earns inference x / (1 - x) of its length (x = 1 is strict priority), and
  the most urgent task (earliest deadline) goes first;
- idle inference time goes to training, and no training work means inference gets all.
The choice of the next work item is `dartfl.executor`'s, shared with the real agent.
Time comes from the event sequence only, never from the wall clock (SimPy's rule), so a
replay is deterministic for a seed. The wall clock is read only to time the policy's
decisions, which is a measurement, not part of the simulation.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.arrivals import Arrivals
from dartfl.attribution import BusyPeriodDelay, is_training_miss
from dartfl.errors import ConfigError
from dartfl.estimators import EwmaRates
from dartfl.executor import ShareGate, most_urgent
from dartfl.metrics import RunRecord
from dartfl.policies.base import Policy
from dartfl.sim.rounds import ROUND_TOLERANCE_S, next_round_end, rounds_ended_by
from dartfl.sim.split import SampleSplitter
from dartfl.types import Allocation, DeviceProfile, Observation, TaskSpec

__all__ = ["SimConfig", "simulate"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ConfigError(f"control period must be > 0 s, got {self.period_s}")
        if not self.round_s > 0:
            raise ConfigError(f"round length must be > 0 s, got {self.round_s}")
        if self.round_target_samples < 0:
            raise ConfigError(f"round target must be >= 0 samples, got {self.round_target_samples}")


def _task_costs(profile: DeviceProfile, names: Sequence[str]) -> tuple[list[float], list[float]]:
    costs = [profile.inference_for(n) for n in names]
    return [c.batch_fixed_s for c in costs], [c.per_request_s for c in costs]


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
    k_tasks = len(names)
    fixed, per = _task_costs(profile, names)
    slo = tuple(t.slo_s for t in tasks)
    capacity = [t.queue_capacity for t in tasks]
    b_profile = profile.max_batch
    train = profile.training
    a_t, c_t = train.microbatch_fixed_s, train.per_sample_s
    clairvoyant = bool(getattr(policy, "needs_future", False))

    times = arrivals.times_s.tolist()
    task_of = arrivals.tasks.tolist()
    n = len(times)
    finish = np.full(n, np.nan)
    rejected = np.zeros(n, dtype=bool)
    delay = [0.0] * n  # training delay of each request's busy period at its service start
    delay_cause = [math.nan] * n  # start of the latest step in that delay
    horizon = arrivals.duration_s
    queues: list[deque[int]] = [deque() for _ in range(k_tasks)]
    rates = EwmaRates(k_tasks, cfg.rate_time_constant_s)
    splitter = SampleSplitter(k_tasks)
    trained = [0] * k_tasks
    arrivals_since = [0] * k_tasks
    misses_since = [0] * k_tasks
    training_misses_since = [0] * k_tasks
    last_step_end = -math.inf  # when the latest training step ended (or will end)
    step_start = 0.0
    training_delay = BusyPeriodDelay()
    decision_ns: list[int] = []
    rec_shares: list[tuple[float, ...]] = []
    rec: dict[str, list[float]] = {
        k: [] for k in ("t_s", "backlog", "inference_share", "microbatch", "max_batch", "trained")
    }

    # The first period is a warm-up: with no arrival history yet, serve and do not train.
    alloc = Allocation(1.0, (1.0 / k_tasks,) * k_tasks, (1.0,) * k_tasks, 0, b_profile)
    now = 0.0
    i = 0  # next arrival
    ticks = 1  # ticks are at j * period_s: a running sum would drift and add or drop the last one
    next_tick = cfg.period_s
    busy_until = math.inf  # end of the running work item (inf: idle)
    running_batch: list[int] = []  # request ids of the running inference batch
    running_m = 0  # samples of the running training microbatch
    gate = ShareGate()
    training_busy = inference_busy = 0.0
    backlog_total = max_backlog = 0
    round_samples: list[int] = []  # samples trained in each finished round
    round_trained = 0
    t_round = next_round_end(0, cfg.round_s, horizon)

    while True:
        t_arr = times[i] if i < n else math.inf
        t_tick = next_tick if next_tick < horizon - ROUND_TOLERANCE_S else math.inf
        now = min(busy_until, t_arr, t_tick, t_round)
        if now == math.inf:
            break

        # 1. The running work item ends: answer its requests or bank its samples.
        if busy_until == now:
            if running_batch:
                for r in running_batch:
                    finish[r] = now
                    k = task_of[r]
                    if now - times[r] > slo[k]:
                        misses_since[k] += 1
                        if is_training_miss(now - times[r], slo[k], delay[r]):
                            training_misses_since[k] += 1
                running_batch = []
            elif running_m:
                training_delay.step_ended(now, step_start)
                for k, got in enumerate(splitter.split(running_m, alloc.task_shares)):
                    trained[k] += got
                round_trained += running_m
                if on_step is not None:
                    on_step(running_m, alloc.task_shares, alloc.loss_weights)
                running_m = 0
            busy_until = math.inf

        # Every FL round that has ended closes, with the steps done by its end (the last round
        # too: it ends at the horizon, where no control tick falls).
        if now >= t_round - ROUND_TOLERANCE_S:
            while len(round_samples) < rounds_ended_by(now, cfg.round_s, horizon):
                round_samples.append(round_trained)
                round_trained = 0
            t_round = next_round_end(len(round_samples), cfg.round_s, horizon)

        # 2. Arrivals up to now join their queue, or are rejected when it is full.
        while i < n and times[i] <= now:
            k = task_of[i]
            arrivals_since[k] += 1
            if len(queues[k]) >= capacity[k]:
                rejected[i] = True
                misses_since[k] += 1
            else:
                queues[k].append(i)
                training_delay.request_queued(now)
                backlog_total += 1
                if backlog_total > max_backlog:
                    max_backlog = backlog_total
            i += 1

        # 3. Control period boundary: observe, update, decide.
        if t_tick == now:
            round_start = len(round_samples) * cfg.round_s
            rates.update(arrivals_since, cfg.period_s)
            obs = Observation(
                now_s=now,
                period_s=cfg.period_s,
                backlog=tuple(len(q) for q in queues),
                oldest_age_s=tuple(now - times[q[0]] if q else 0.0 for q in queues),
                arrivals_since_last=tuple(arrivals_since),
                slo_misses_since_last=tuple(misses_since),
                training_misses_since_last=tuple(training_misses_since),
                arrival_rate_per_s=rates.rates_per_s,
                slo_s=slo,
                batch_fixed_s=tuple(fixed),
                per_request_s=tuple(per),
                max_batch=b_profile,
                microbatch_fixed_s=a_t,
                per_sample_s=c_t,
                max_microbatch=train.max_microbatch,
                round_start_s=round_start,
                round_deadline_s=round_start + cfg.round_s,
                round_target_samples=cfg.round_target_samples,
                round_trained_samples=round_trained,
            )
            started = timer()
            policy.update(obs)
            alloc = policy.decide(obs)
            decision_ns.append(timer() - started)
            arrivals_since = [0] * k_tasks
            misses_since = [0] * k_tasks
            training_misses_since = [0] * k_tasks
            ticks += 1
            next_tick = ticks * cfg.period_s
            if cfg.record_periods:
                rec["t_s"].append(now)
                rec["backlog"].append(backlog_total)
                rec["inference_share"].append(alloc.inference_share)
                rec["microbatch"].append(alloc.microbatch)
                rec["max_batch"].append(alloc.max_batch)
                rec["trained"].append(sum(trained))
                rec_shares.append(alloc.task_shares)

        if busy_until != math.inf:
            continue

        # 4. The device is free: choose the next work item (dartfl.executor, as the agent does).
        training_open = now < horizon and alloc.microbatch > 0
        share = alloc.inference_share
        if backlog_total == 0:
            training_delay.device_free_and_empty()
        if gate.should_serve(backlog_total, share, training_open):
            k = most_urgent([times[q[0]] + slo[j] if q else math.inf for j, q in enumerate(queues)])
            q = queues[k]
            size = min(len(q), alloc.max_batch)
            running_batch = [q.popleft() for _ in range(size)]
            if training_delay.delay_s > 0.0:
                for r in running_batch:
                    delay[r] = training_delay.delay_s
                    delay_cause[r] = training_delay.cause_s
            backlog_total -= size
            duration = fixed[k] + per[k] * size
            if cfg.exponential_service:
                duration = float(rng.exponential(duration))
            gate.served(duration)
            inference_busy += duration
            busy_until = now + duration
        elif training_open:
            m = alloc.microbatch
            if clairvoyant and backlog_total == 0:
                m = policy.choose_microbatch(  # type: ignore[attr-defined]
                    now, arrivals.times_s[i:], min(slo), max(fixed), max(per), a_t, c_t, train.max_microbatch
                )
            if m > 0:
                duration = a_t + c_t * m
                running_m = m
                step_start = now
                gate.trained(duration, share)
                training_busy += duration
                busy_until = last_step_end = now + duration

    inference_min = float(
        sum(
            count * profile.inference_for(name).cheapest_per_request_s(b_profile)
            for name, count in zip(names, arrivals.counts_per_task().tolist(), strict=True)
        )
    )
    # The queue drains after the horizon and the step in flight finishes: the run lasts until then.
    last_answer = float(np.nanmax(finish)) if np.isfinite(finish).any() else 0.0
    periods = {key: np.asarray(v, dtype=np.float64) for key, v in rec.items()}
    periods["task_shares"] = np.asarray(rec_shares, dtype=np.float64).reshape(-1, k_tasks)
    return RunRecord(
        policy=policy.name,
        task_names=names,
        slo_s=slo,
        horizon_s=horizon,
        arrival_s=arrivals.times_s,
        finish_s=finish,
        tasks=arrivals.tasks,
        rejected=rejected,
        trained_per_task=tuple(trained),
        training_busy_s=training_busy,
        inference_busy_s=inference_busy,
        inference_min_s=inference_min,
        cheapest_sample_s=train.cheapest_per_sample_s(),
        max_backlog=max_backlog,
        decision_us=np.asarray(decision_ns, dtype=np.float64) / 1e3,
        periods=periods,
        training_delay_s=np.asarray(delay, dtype=np.float64),
        delay_cause_s=np.asarray(delay_cause, dtype=np.float64),
        round_samples=tuple(round_samples),
        round_target_samples=cfg.round_target_samples,
        end_s=max(horizon, last_answer, last_step_end),
    )
