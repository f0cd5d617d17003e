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
the same object the real agent drives; this module is its event loop in virtual time (the
lanes' timing is dartfl/sim/lanes.py's). Time comes from the event sequence only, never from
the wall clock (SimPy's rule), so a replay is deterministic for a seed. The wall clock is
read only to time the policy's decisions, which is a measurement, not part of the
simulation. A one-core device runs exactly the one-lane loop it always ran.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.executor import (
    ROUND_TOLERANCE_S,
    DeviceExecutor,
    ExecutorConfig,
    InferenceBatch,
    RoundClock,
    TrainingStep,
)
from dartfl.executor.batch_hold import batch_hold_s
from dartfl.fluid import fluid_terms
from dartfl.metrics import RunRecord
from dartfl.policies.base import FutureAwarePolicy, FutureView, Policy
from dartfl.sim.lanes import SimLanes, Work
from dartfl.types import DeviceProfile, TaskSpec

__all__ = ["SimConfig", "network_thread_delivery", "simulate"]

FloatArray = npt.NDArray[np.float64]


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
    # Hold a few waiting requests back under dense traffic, as the agent does, so they share a
    # batch (dartfl/executor/batch_hold.py): for predicting a real agent's latency.
    batch_hold: bool = False
    # Receive and admit requests on a network thread of their own ahead of the executor, as
    # the agent does on a core its compute leaves free (`network_thread_delivery`): for
    # predicting a real agent's latency and training.
    network_thread: bool = False

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ConfigError(f"control period must be > 0 s, got {self.period_s}")
        if not self.round_s > 0:
            raise ConfigError(f"round length must be > 0 s, got {self.round_s}")
        if self.round_target_samples < 0:
            raise ConfigError(f"round target must be >= 0 samples, got {self.round_target_samples}")


# Control periods and FL rounds are simulated one by one: more than this many is a mistyped
# trace time, rate or period (29 days at the default 0.25-s period), not a study.
MAX_PERIODS = 10_000_000


def check_span(horizon_s: float, config: SimConfig) -> None:
    """Refuse a run of more than MAX_PERIODS control periods or FL rounds."""
    for what, flag, every_s in (
        ("control periods", "--period-s", config.period_s),
        ("rounds", "--round-s", config.round_s),
    ):
        if horizon_s / every_s > MAX_PERIODS:
            raise ConfigError(
                f"a {horizon_s:.4g}-s run is {horizon_s / every_s:.3g} {what} of {every_s:g} s, more than "
                f"the {MAX_PERIODS:,} the simulator runs; check the trace's times, --rate and "
                f"--target-load, or shorten --duration-s or lengthen {flag}"
            )


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
    check_span(arrivals.duration_s, cfg)
    rng = rng or np.random.default_rng(0)
    if not keep_policy_state:
        policy.reset()
    device = _device(arrivals.duration_s, profile, tasks, policy, cfg, timer)
    planner = (
        _FuturePlanner(policy, arrivals, tasks, device) if isinstance(policy, FutureAwarePolicy) else None
    )
    device.step_planner = planner
    outcomes = _Outcomes(len(arrivals.times_s))
    delivered, work_profile = arrivals.times_s, profile
    if cfg.network_thread:
        path = profile.request_path
        delivered = network_thread_delivery(arrivals.times_s, path.receive_s + path.ingress_s)
        # The executor still prices a request by all it costs (as the agent's does); its
        # items take only what the executor thread spends on them, and so does the fluid
        # limit: the network thread's work is on a core of its own, not the device's.
        work_profile = replace(profile, request_path=replace(path, receive_s=0.0, ingress_s=0.0))
    lanes = SimLanes(device, work_profile, rng, exponential_service=cfg.exponential_service)
    _run_events(arrivals, delivered, device, lanes, planner, outcomes, cfg.period_s, on_step)
    return _record(arrivals, work_profile, policy, device, lanes, outcomes, cfg)


def network_thread_delivery(arrival_s: FloatArray, per_request_s: float) -> FloatArray:
    """When each request reaches the executor through one FIFO network thread that spends
    `per_request_s` on it (receiving, decoding, admitting): Lindley's recursion
    d_i = max(t_i, d_{i-1}) + r, in closed form d_i = (i + 1) r + max_{j <= i} (t_j - j r)."""
    steps = per_request_s * np.arange(arrival_s.size, dtype=np.float64)
    return np.maximum.accumulate(arrival_s - steps) + steps + per_request_s


def _device(
    horizon: float,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    policy: Policy,
    cfg: SimConfig,
    timer: Callable[[], int],
) -> DeviceExecutor[int]:
    """The executor of a simulated device: two lanes, rounds and training up to the horizon."""
    hold_s = 0.0
    if cfg.batch_hold:  # the agent's rule: its one SLO and its dearest model
        model_s = max(profile.model_inference_for(t.name).per_request_s for t in tasks)
        hold_s = batch_hold_s(min(t.slo_s for t in tasks), model_s, cfg.period_s)
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
            # A GPU device has one GPU, which the training lane keeps when split: a serving-lane
            # step beside its steps would run on the same GPU at once, counted twice (a Jetson
            # trained 56 s in a 30-s run, harvest 1.76).
            concurrent_steps=not profile.cores.has_gpu,
            batch_hold_s=hold_s,
        ),
        timer=timer,
    )
    device.train_until_s = horizon
    return device


class _Outcomes:
    """What became of each request, by arrival index."""

    def __init__(self, n: int) -> None:
        self.finish_s = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)
        self.delay_s = np.zeros(n)  # the training delay of each request's busy period (dartfl.attribution)
        self.delay_cause_s = np.full(n, np.nan)  # when the latest step in that delay started


def _run_events(
    arrivals: Arrivals,
    delivered_s: FloatArray,
    device: DeviceExecutor[int],
    lanes: SimLanes,
    planner: _FuturePlanner | None,
    out: _Outcomes,
    period_s: float,
    on_step: Callable[[int, tuple[float, ...], tuple[float, ...]], None] | None,
) -> None:
    """The event loop: advance virtual time to the next item end, arrival, tick or round end."""
    horizon = arrivals.duration_s
    times = delivered_s.tolist()  # when each request reaches the executor
    waited = (delivered_s - arrivals.times_s).tolist()  # on its way there; its SLO ran meanwhile
    task_of = arrivals.tasks.tolist()
    n = len(times)
    i = 0  # next arrival
    ticks = 1  # ticks are at j * period_s: a running sum would drift and add or drop the last one
    next_tick = period_s
    ends = lanes.end_s
    held_until = math.inf  # the serving lane waits out a batch hold until then
    while True:
        t_arr = times[i] if i < n else math.inf
        t_tick = next_tick if next_tick < horizon - ROUND_TOLERANCE_S else math.inf
        now = min(ends[0], ends[1], t_arr, t_tick, device.rounds.next_end_s, held_until)
        if now == math.inf:
            break

        # 1. A running work item ends: answer its requests or bank its samples.
        for lane in (0, 1):
            if ends[lane] == now:
                _finished(*lanes.finish(lane, now), now, device, out, on_step)

        # Every FL round that has ended closes, with the steps done by its end (the last round
        # too: it ends at the horizon, where no control tick falls).
        if now >= device.rounds.next_end_s - ROUND_TOLERANCE_S:
            device.close_due_rounds(now)

        # 2. Arrivals up to now join their queue, or are rejected when it is full.
        while i < n and times[i] <= now:
            _admit(device, times[i], task_of[i], i, out, waited[i])
            i += 1
        if planner is not None:
            planner.next_arrival = i

        # 3. Control period boundary: observe, update, decide.
        if t_tick == now:
            device.tick(now)
            ticks += 1
            next_tick = ticks * period_s

        # 4. A free lane asks the executor for its next work item, unless the serving lane
        #    holds a few requests back for company; time runs it. Requests that can no longer
        #    make their deadline are refused on the way.
        if ends[0] == math.inf:
            held_until = _hold_end(device, now)
            if held_until == math.inf:
                lanes.start(0, now)
        if ends[1] == math.inf and lanes.training_lane_wanted():
            lanes.start(1, now)
        if device.expired:
            _expired(device, now, out)


def _hold_end(device: DeviceExecutor[int], now: float) -> float:
    """When the serving lane's batch hold ends (inf: it does not hold, take work now)."""
    left = device.hold_left_s(now)
    return math.inf if left == 0.0 else now + left


def _finished(
    work: Work | None,
    caused: tuple[int, ...],
    now: float,
    device: DeviceExecutor[int],
    out: _Outcomes,
    on_step: Callable[[int, tuple[float, ...], tuple[float, ...]], None] | None,
) -> None:
    """Step 1: a batch's requests are answered now; a step's samples go to `on_step`."""
    if isinstance(work, InferenceBatch):
        for r in work.requests:
            out.finish_s[r] = now
        for i in caused:  # a miss carries the delay that caused it (dartfl.metrics)
            out.delay_s[work.requests[i]] = work.training_delay_s
            out.delay_cause_s[work.requests[i]] = work.delay_cause_s
    elif on_step is not None and isinstance(work, TrainingStep):
        on_step(work.samples, device.alloc.task_shares, device.alloc.loss_weights)


def _expired(device: DeviceExecutor[int], now: float, out: _Outcomes) -> None:
    """Step 4's refusals: queued requests that could no longer make their deadline."""
    for _task, i, delay_s, cause_s in device.take_expired():
        out.rejected[i] = True
        if delay_s > 0.0:
            out.delay_s[i] = delay_s
            out.delay_cause_s[i] = cause_s


def _admit(
    device: DeviceExecutor[int], time_s: float, task: int, i: int, out: _Outcomes, waited_s: float
) -> None:
    """Step 2: arrival `i` joins its queue, or is refused (with the training delay behind it)."""
    if device.admit(time_s, task, i, waited_s) != "queued":
        out.rejected[i] = True
        if device.refusal_training_delay_s > 0.0:
            out.delay_s[i] = device.refusal_training_delay_s
            out.delay_cause_s[i] = device.refusal_delay_cause_s


def _record(
    arrivals: Arrivals,
    profile: DeviceProfile,
    policy: Policy,
    device: DeviceExecutor[int],
    lanes: SimLanes,
    out: _Outcomes,
    cfg: SimConfig,
) -> RunRecord:
    """The run's record, once the queues have drained."""
    names = arrivals.task_names
    horizon = arrivals.duration_s
    finish = out.finish_s
    counts = arrivals.counts_per_task().tolist()
    fluid = fluid_terms(profile, names, counts)
    # The queue drains after the horizon and the step in flight finishes: the run lasts until then.
    last_answer = float(np.nanmax(finish)) if np.isfinite(finish).any() else 0.0
    periods = {key: np.asarray(v, dtype=np.float64) for key, v in device.series.values.items()}
    periods["task_shares"] = np.asarray(device.series.shares, dtype=np.float64).reshape(-1, len(names))
    return RunRecord(
        policy=policy.name,
        task_names=names,
        slo_s=device.slo_s,
        horizon_s=horizon,
        arrival_s=arrivals.times_s,
        finish_s=finish,
        tasks=arrivals.tasks,
        rejected=out.rejected,
        trained_per_task=tuple(device.trained_per_task),
        training_busy_s=device.training_busy_s,
        inference_busy_s=device.inference_busy_s,
        fluid=fluid,
        max_backlog=device.queues.peak,
        decision_us=device.decision_us(),
        periods=periods,
        training_delay_s=out.delay_s,
        delay_cause_s=out.delay_cause_s,
        round_samples=tuple(device.rounds.closed),
        round_target_samples=cfg.round_target_samples,
        end_s=max(horizon, last_answer, device.last_step_end_s, lanes.last_step_end_s),
        cores=profile.cores.count,
        core_switches=device.switches,
        core_reclaims=device.reclaims,
    )


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
