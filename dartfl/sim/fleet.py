"""The fleet simulator: many devices at once, one vectorised step per control period.

The exact event simulator (`dartfl.sim.device`) replays every request; a device-hour is
~100k+ events, far too many for a thousand devices. This model advances every device by one
control period at a time with numpy over the device axis. Per period and device it takes the
arrival counts per task, the policy's allocation (decided for all devices at once by a
vectorised port, `dartfl.sim.fleet_policies`), and runs a fluid model of the executor's
period (`dartfl.sim.fleet_period`): carried non-preemptible steps, backlog drains, then
step/drain cycles. docs/fleet.md states the approximations and the validation numbers.

Counts come in from outside (the CLI bins each device's workload), so this module stays
free of the `workloads` package. `run_fleet` splits the device axis into chunks, optionally
across worker processes; each chunk builds its own counts through a picklable callable.

The value types (config, arrival counts, results) live in `dartfl.sim.fleet_types`; this
module re-exports them, so `dartfl.sim.fleet` stays the one import path.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

import numpy as np

from dartfl.errors import ConfigError
from dartfl.executor.rounds import next_round_end, rounds_ended_by
from dartfl.fluid import fluid_prices
from dartfl.metrics import fluid_trainable_samples
from dartfl.sim.fleet_period import run_period
from dartfl.sim.fleet_policies import FleetAllocation, FleetObservation, FleetPolicy, make_fleet_policy
from dartfl.sim.fleet_state import DeviceArrays, FleetState
from dartfl.sim.fleet_types import FleetArrivals, FleetConfig, FleetResult, FloatArray, bin_arrivals
from dartfl.types import DeviceProfile, TaskSpec

__all__ = [
    "FleetArrivals",
    "FleetConfig",
    "FleetResult",
    "bin_arrivals",
    "run_fleet",
    "simulate_fleet",
]

CountSource = Callable[[int, int], "FleetArrivals"]


def _device_arrays(
    devices: Sequence[DeviceProfile], tasks: Sequence[TaskSpec], deadline_admission: bool = True
) -> DeviceArrays:
    """Every device time-shared on all its cores (the fleet model has one lane), its harvest
    priced by the same fluid limit as the exact simulator's (dartfl.fluid)."""
    names = [t.name for t in tasks]
    n = len(devices)
    profiles = [p.time_shared() for p in devices]
    costs = [[p.inference_for(name) for p in profiles] for name in names]
    prices = [fluid_prices(p, names) for p in devices]
    # The fluid limit's price of a request (core-seconds), and the whole device's cheapest
    # time per request, which bounds what a queue may hold and still make its SLO.
    cheapest = [[f.request_s[k] for f in prices] for k in range(len(names))]
    fastest = [
        [c.cheapest_per_request_s(p.max_batch) for c, p in zip(row, profiles, strict=True)] for row in costs
    ]
    capacity = np.repeat(np.array([[float(t.queue_capacity)] for t in tasks]), n, axis=1)
    if deadline_admission:
        in_time = np.array([[t.slo_s] for t in tasks]) / np.asarray(fastest, dtype=np.float64)
        capacity = np.minimum(capacity, np.maximum(1.0, np.floor(in_time)))
    return DeviceArrays(
        fixed=np.array([[c.batch_fixed_s for c in row] for row in costs], dtype=np.float64),
        per=np.array([[c.per_request_s for c in row] for row in costs], dtype=np.float64),
        cheapest=np.array(cheapest, dtype=np.float64),
        slo=np.repeat(np.array([[t.slo_s] for t in tasks], dtype=np.float64), n, axis=1),
        capacity=capacity,
        max_batch=np.array([p.max_batch for p in profiles], dtype=np.int64),
        a_t=np.array([p.training.microbatch_fixed_s for p in profiles], dtype=np.float64),
        c_t=np.array([p.training.per_sample_s for p in profiles], dtype=np.float64),
        max_microbatch=np.array([p.training.max_microbatch for p in profiles], dtype=np.int64),
        cheapest_sample=np.array([f.sample_s for f in prices], dtype=np.float64),
        fluid_units=np.array([f.units for f in prices], dtype=np.float64),
        offload_s_per_s=np.array([f.offload_per_s * f.offload_saves_s for f in prices], dtype=np.float64),
    )


class _FleetRounds:
    """Every device's FL round progress; rounds end at multiples of round_s, as in the event
    simulator, and every round that ends by the horizon closes (the last one included).

    A round that ends inside a control period takes the part of the period's training that
    falls before its end, in proportion to time (the fluid model spreads a period's work evenly).
    """

    def __init__(self, round_s: float, horizon_s: float, devices: int) -> None:
        self.round_s = round_s
        self.horizon_s = horizon_s
        self.trained = np.zeros(devices)  # the current round's samples so far
        self.closed: list[FloatArray] = []  # samples of every closed round

    @property
    def start_s(self) -> float:
        return len(self.closed) * self.round_s

    def add_period(self, gained: FloatArray, start_s: float, period_s: float) -> None:
        """Book one period's training, closing the rounds that end inside it."""
        booked = 0.0  # fraction of the period already booked
        while len(self.closed) < rounds_ended_by(start_s + period_s, self.round_s, self.horizon_s):
            end_s = next_round_end(len(self.closed), self.round_s, self.horizon_s)
            upto = min(max((end_s - start_s) / period_s, booked), 1.0)
            self.trained += gained * (upto - booked)
            booked = upto
            self.closed.append(self.trained.copy())
            self.trained[:] = 0.0
        self.trained += gained * (1.0 - booked)


def simulate_fleet(
    arrivals: FleetArrivals,
    profile: DeviceProfile | Sequence[DeviceProfile],
    tasks: Sequence[TaskSpec],
    policy: FleetPolicy,
    config: FleetConfig | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> FleetResult:
    """Run every device of the fleet under `policy` for the arrivals' horizon.

    `on_progress(fraction)` is called with the fraction of periods done, about 50 times a run.
    """
    cfg = config or FleetConfig()
    if abs(arrivals.period_s - cfg.period_s) > 1e-12:
        raise ConfigError(
            f"counts are binned per {arrivals.period_s} s but the control period is {cfg.period_s} s"
        )
    if tuple(t.name for t in tasks) != arrivals.task_names:
        raise ConfigError(
            f"task specs {[t.name for t in tasks]} must match the workload's tasks "
            f"{list(arrivals.task_names)}"
        )
    n_dev = arrivals.num_devices
    profiles = [profile] * n_dev if isinstance(profile, DeviceProfile) else list(profile)
    if len(profiles) != n_dev:
        raise ConfigError(f"got {len(profiles)} device profiles for {n_dev} devices")
    spatial = [p for p in profiles if p.cores.can_split]
    if policy.splits_cores and spatial:
        device = spatial[0]
        raise ConfigError(
            f"policy {policy.name!r} splits the {device.cores.count} cores of profile {device.name!r} "
            "between serving and training, which the fleet simulator does not model: run it time-shared "
            f"on every core ({policy.name.partition(':')[0]}:split=off), on one core (--cores 1), or in "
            "the exact simulator (dartfl sim)"
        )
    dev = _device_arrays(profiles, tasks, cfg.deadline_admission)
    tau = cfg.period_s
    state = FleetState.start(dev, tau, arrivals.horizon_s)
    policy.reset()
    alpha_slow = -math.expm1(-tau / cfg.rate_time_constant_s)
    rates = np.zeros_like(dev.fixed)
    rounds = _FleetRounds(cfg.round_s, arrivals.horizon_s, n_dev)
    k_tasks = len(tasks)
    # The first period is a warm-up, as in the event simulator: serve, do not train.
    alloc = FleetAllocation(
        np.ones(n_dev),
        np.zeros(n_dev, dtype=np.int64),
        dev.max_batch.copy(),
        np.full((n_dev, k_tasks), 1 / k_tasks),
    )
    counts = arrivals.counts
    report_every = max(1, arrivals.num_periods // 50)
    for j in range(arrivals.num_periods):
        if on_progress is not None and j % report_every == 0:
            on_progress(j / arrivals.num_periods)
        arrived = counts[j].astype(np.float64)
        before = state.trained.copy()
        run_period(state, arrived, alloc)
        rounds.add_period(state.trained - before, j * tau, tau)
        now = (j + 1) * tau
        if j + 1 == arrivals.num_periods:
            break
        # Control period boundary: rate estimates, observe, update, decide.
        if j == 0:
            rates = arrived / tau
        else:
            rates += alpha_slow * (arrived / tau - rates)
            # Flush rates decayed to denormals after a long silence: demand shares divide by
            # their sum, and 1 / 1e-310 overflows (the scalar policy would return NaN shares).
            rates[rates < 1e-9] = 0.0
        obs = FleetObservation(
            now_s=now,
            period_s=tau,
            backlog=np.rint(state.queue).T,
            oldest_age_s=np.where(state.queue > 0.5, now - state.head_s, 0.0).T,
            arrivals_since_last=arrived.T,
            slo_misses_since_last=state.misses.T,
            training_misses_since_last=state.training_misses.T,
            arrival_rate_per_s=rates.T,
            slo_s=dev.slo.T,
            batch_fixed_s=dev.fixed.T,
            per_request_s=dev.per.T,
            max_batch=dev.max_batch,
            microbatch_fixed_s=dev.a_t,
            per_sample_s=dev.c_t,
            max_microbatch=dev.max_microbatch,
            round_start_s=rounds.start_s,
            round_deadline_s=rounds.start_s + cfg.round_s,
            round_target_samples=float(cfg.round_target_samples),
            round_trained_samples=rounds.trained,
        )
        policy.update(obs)
        alloc = policy.decide(obs)
    overrun = state.finish(alloc.max_batch)  # as in dartfl.sim.device: the last allocation's batches
    if on_progress is not None:
        on_progress(1.0)
    totals = arrivals.totals()
    inference_min = (totals * dev.cheapest).sum(axis=0)
    horizon = arrivals.horizon_s
    # The fluid limit counts the device's time up to its last work (dartfl.metrics).
    trainable = np.array(
        [
            fluid_trainable_samples(run, float(i), float(c), float(u), min(float(i), float(off) * run))
            for run, i, c, u, off in zip(
                (horizon + float(extra) for extra in overrun),
                inference_min,
                dev.cheapest_sample,
                dev.fluid_units,
                dev.offload_s_per_s,
                strict=False,
            )
        ]
    )
    requests = totals.sum(axis=0)
    rounds_met = np.zeros(0)
    if cfg.round_target_samples > 0 and rounds.closed:
        rounds_met = (np.array(rounds.closed) >= cfg.round_target_samples).mean(axis=0)
    return FleetResult(
        policy=policy.name,
        task_names=arrivals.task_names,
        horizon_s=horizon,
        requests=requests,
        rejected=state.rejected_total,
        completed=requests - state.rejected_total - state.queue.sum(axis=0),
        queued_end=state.queue.sum(axis=0),
        slo_met=state.slo_met,
        trained_samples=state.trained,
        trained_per_task=state.trained_per_task.T.copy(),
        training_busy_s=state.training_busy,
        inference_busy_s=state.inference_busy,
        fluid_trainable=trainable,
        max_backlog=state.max_backlog,
        mean_latency_s=np.where(
            state.accepted > 0, state.latency_sum / np.maximum(state.accepted, 1e-300), 0.0
        ),
        rounds_met=rounds_met,
        rounds=len(rounds.closed),
    )


# Worker processes add the device-runs they finish here (set by `_init_worker`).
_SHARED_DONE: Any = None

# How often a worker checks that the process that started it is still there.
PARENT_CHECK_S = 0.5


def _init_worker(done: Any, parent_pid: int) -> None:
    global _SHARED_DONE
    _SHARED_DONE = done
    # A fork keeps the parent's handlers, which raise in the parent's main thread to run its
    # cleanups; here a signal should just end the worker (SIGINT: the parent, in the same
    # process group, handles Ctrl-C and stops the workers itself).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A parent killed by SIGTERM or SIGKILL runs no pool shutdown: its workers would finish
    # their chunks for nobody and then wait on the pool's queue for ever.
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker once its parent is gone (it is then re-parented, so getppid changes)."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def _chunk_job(
    source: CountSource,
    lo: int,
    hi: int,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    specs: Sequence[str],
    config: FleetConfig,
    report: Callable[[float], None] | None = None,
) -> dict[str, FleetResult]:
    """Build devices lo..hi-1's counts, then run every policy on them.

    Progress is counted in device-runs: building the counts is one per device, each policy one.
    """
    size = hi - lo
    add = report or _add_shared
    counts = source(lo, hi)
    add(size)
    results: dict[str, FleetResult] = {}
    for spec in specs:
        last = [0.0]

        def step(fraction: float, last: list[float] = last) -> None:
            add(size * (fraction - last[0]))
            last[0] = fraction

        results[spec] = simulate_fleet(counts, profile, tasks, make_fleet_policy(spec), config, step)
    return results


def _add_shared(amount: float) -> None:
    if _SHARED_DONE is not None:
        with _SHARED_DONE.get_lock():
            _SHARED_DONE.value += amount


def run_fleet(
    source: CountSource,
    num_devices: int,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    specs: Sequence[str],
    config: FleetConfig | None = None,
    *,
    workers: int = 1,
    chunk_devices: int = 500,
    on_progress: Callable[[float], None] | None = None,
) -> dict[str, FleetResult]:
    """Simulate `num_devices` devices under every policy spec, in chunks of the device axis.

    `source(lo, hi)` returns the counts of devices lo..hi-1 (it must not depend on the chunking,
    so a run is the same for any `workers` and `chunk_devices`). With workers > 1 the chunks run
    in worker processes, so `source` must be picklable (a module-level function or a
    functools.partial of one). `on_progress(fraction)` is called in this process.
    """
    cfg = config or FleetConfig()
    if num_devices < 1:
        raise ConfigError(f"a fleet needs at least one device, got {num_devices}")
    if workers < 1 or chunk_devices < 1:
        raise ConfigError(f"workers and chunk size must be >= 1, got {workers} and {chunk_devices}")
    if not specs:
        raise ConfigError("give at least one policy to run")
    for spec in specs:
        make_fleet_policy(spec)  # fail fast on a bad name
    bounds = [(lo, min(num_devices, lo + chunk_devices)) for lo in range(0, num_devices, chunk_devices)]
    total = float(num_devices * (len(specs) + 1))
    parts: list[dict[str, FleetResult]] = []
    if workers == 1 or len(bounds) == 1:
        done = [0.0]

        def add(amount: float) -> None:
            done[0] += amount
            if on_progress is not None:
                on_progress(min(1.0, done[0] / total))

        for lo, hi in bounds:
            parts.append(_chunk_job(source, lo, hi, profile, tasks, specs, cfg, add))
    else:
        parts = _run_in_workers(source, bounds, profile, tasks, specs, cfg, workers, total, on_progress)
    return {spec: FleetResult.concat([p[spec] for p in parts]) for spec in specs}


def _run_in_workers(
    source: CountSource,
    bounds: list[tuple[int, int]],
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec],
    specs: Sequence[str],
    config: FleetConfig,
    workers: int,
    total: float,
    on_progress: Callable[[float], None] | None,
) -> list[dict[str, FleetResult]]:
    context = multiprocessing.get_context()
    done = context.Value("d", 0.0)
    pool = ProcessPoolExecutor(
        max_workers=min(workers, len(bounds)),
        mp_context=context,
        initializer=_init_worker,
        initargs=(done, os.getpid()),
    )
    try:
        futures = [
            pool.submit(_chunk_job, source, lo, hi, profile, tasks, specs, config) for lo, hi in bounds
        ]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            if on_progress is not None:
                on_progress(min(1.0, done.value / total))
        results = [f.result() for f in futures]
    except BaseException:
        # Ctrl-C or SIGTERM: stop the chunks under way rather than wait minutes for them (the
        # interpreter's exit joins the pool). No public way to before Python 3.14's
        # terminate_workers; a worker left over ends with its parent anyway (`_exit_with_parent`).
        processes = list((pool._processes or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise
    pool.shutdown()
    return results
