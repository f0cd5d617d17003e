"""Run metrics (latency, SLO attainment, harvest), computed the same way for simulated and real runs.

Latency is wait + service, from arrival to answer. A request counts towards SLO attainment
only if it was answered within its task's SLO; rejected requests count as misses.

Harvest efficiency is samples trained over the fluid limit: the samples the device could have
trained in the time it ran, had it spent on inference only what serving every request at its
cheapest per-request cost needs and trained the rest at the cheapest per-sample cost. The time
it ran is the horizon, or longer when work went on after it (`RunRecord.end_s`): a simulated
device drains its queue after the horizon and finishes the step in flight, and both the
inference served late and the step's samples count. So no run that serves every request can
exceed 1.0 (a rejected request costs nothing, so a run that rejects can). With a fluid limit of
0 (the requests alone need the whole run) harvest is undefined: NaN, null in JSON.
On a device of N cores the device time is N core-seconds per second and the prices are the
cheapest core-seconds of a request and of a sample (`dartfl.fluid`, docs/allocator.md "The
fluid limit"); one core is the definition above, to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dartfl.fluid import FluidTerms

__all__ = [
    "MissBudgetBound",
    "RunRecord",
    "burst_recovery_s",
    "fluid_trainable_samples",
    "harvest_efficiency",
    "miss_budget_bound",
    "run_trainable_samples",
    "summarize",
    "training_caused_misses",
]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class RunRecord:
    """The raw facts of one run, whatever produced it (simulator, real agent, replayer)."""

    policy: str
    task_names: tuple[str, ...]
    slo_s: tuple[float, ...]
    horizon_s: float
    arrival_s: FloatArray
    finish_s: FloatArray  # NaN: rejected or never answered
    tasks: npt.NDArray[np.int64]
    rejected: npt.NDArray[np.bool_]
    trained_per_task: tuple[int, ...]
    training_busy_s: float
    fluid: FluidTerms  # the fluid limit's terms on N cores (dartfl.fluid)
    max_backlog: int
    decision_us: FloatArray
    inference_busy_s: float = 0.0
    periods: dict[str, FloatArray] = field(default_factory=dict)  # per control period series
    round_samples: tuple[int, ...] = ()  # samples trained in each finished FL round
    round_target_samples: int = 0
    end_s: float | None = None  # when the device's last work ended, if after the horizon
    cores: int = 1
    core_switches: int = 0
    core_reclaims: int = 0  # splits the executor ended early: the serving lane fell behind
    # Per request, where the executor tracks it (dartfl.attribution): the training time of its
    # busy period before its service started, and when the latest of those steps started.
    training_delay_s: FloatArray | None = None
    delay_cause_s: FloatArray | None = None

    @property
    def run_s(self) -> float:
        """The device time the fluid limit counts: the horizon, or up to the last work's end."""
        return max(self.horizon_s, self.end_s or 0.0)


def fluid_trainable_samples(
    run_s: float, inference_min_s: float, cheapest_sample_s: float, units: float = 1.0, offload_s: float = 0.0
) -> float:
    """Samples a device trains in `run_s` if inference takes only `inference_min_s` of its
    `units` per second (less `offload_s`, what a GPU device's cores take off its GPU)."""
    return max(0.0, units * run_s - (inference_min_s - offload_s)) / cheapest_sample_s


def run_trainable_samples(run: RunRecord) -> float:
    """The fluid limit of one run."""
    run_s, f = run.run_s, run.fluid
    offload = min(f.inference_min_s, f.offload_per_s * run_s * f.offload_saves_s)
    return fluid_trainable_samples(run_s, f.inference_min_s, f.cheapest_sample_s, f.units, offload)


def harvest_efficiency(trained: float, trainable: float) -> float:
    """Samples trained over the fluid limit; NaN (null in JSON) when the limit is 0."""
    return trained / trainable if trainable > 0 else float("nan")


def _pct(values: FloatArray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def burst_recovery_s(t_s: FloatArray, backlog: FloatArray, threshold: float) -> tuple[float, float]:
    """Mean and max time the backlog stays above `threshold` once it crosses it (0 if never)."""
    above = backlog > threshold
    if not above.any():
        return 0.0, 0.0
    edges = np.diff(above.astype(np.int8), prepend=0, append=0)
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    t_end = np.append(t_s, t_s[-1] if t_s.size else 0.0)
    durations = t_end[ends] - t_s[starts]
    return float(durations.mean()), float(durations.max())


def training_caused_misses(run: RunRecord) -> npt.NDArray[np.bool_] | None:
    """Per request: late, but within its SLO once its busy period's training delay is taken
    away, or refused at its deadline because of that delay (dartfl.attribution); None if the
    executor did not track the delay. A refused request carries a delay only when training
    made the difference: a full queue, or a deadline missed anyway, says nothing about it."""
    if run.training_delay_s is None:
        return None
    latency = run.finish_s - run.arrival_s
    slo = np.asarray(run.slo_s)[run.tasks] if run.tasks.size else np.zeros(0)
    delay = run.training_delay_s
    with np.errstate(invalid="ignore"):  # NaN latencies (rejected, unanswered) compare False
        late: npt.NDArray[np.bool_] = (latency > slo) & (delay > 0.0) & (latency - delay <= slo)
    caused: npt.NDArray[np.bool_] = late | (run.rejected & (delay > 0.0))
    return caused


@dataclass(frozen=True)
class MissBudgetBound:
    """The promise checked on one run (docs/allocator.md, "The promise"): the training-caused
    misses are at most budget x arrivals + debt_limit + overshoot."""

    arrivals: int  # requests the policy was told about (arrived by the last control tick)
    training_misses: int
    budget: float  # delta
    debt_limit: float  # the largest H_max of the run
    overshoot: int  # E: the most training-caused misses still to be counted at one tick

    @property
    def measured(self) -> float:
        return self.training_misses / self.arrivals if self.arrivals else 0.0

    @property
    def slack(self) -> float:
        """(H_max + E) / A: what the bound adds to the budget."""
        return (self.debt_limit + self.overshoot) / self.arrivals if self.arrivals else math.inf

    @property
    def holds(self) -> bool:
        return self.training_misses <= self.budget * self.arrivals + self.debt_limit + self.overshoot


def miss_budget_bound(run: RunRecord, budget: float, debt_limit: float) -> MissBudgetBound:
    """The bound's terms for a run, from its per-request training delays and control ticks.

    E = max over ticks j of the training-caused misses whose latest delaying step was allowed
    by a decision at or before tick j and that are counted after it: the misses H can still
    receive once it has crossed its limit. A miss finishing at f is counted at the first tick
    at or after f (never, if after the last one); a step starting at c was allowed by the last
    tick at or before c.
    """
    caused = training_caused_misses(run)
    ticks = run.periods.get("t_s")
    if caused is None or ticks is None:
        raise ValueError("the run records no training delays or control ticks")
    last_tick = float(ticks[-1]) if ticks.size else 0.0
    arrivals = int(np.searchsorted(run.arrival_s, last_tick, side="right"))
    finish = np.where(run.rejected, run.arrival_s, run.finish_s)[caused]  # a refusal counts at once
    cause = run.delay_cause_s[caused] if run.delay_cause_s is not None else np.zeros(finish.size)
    counted_at = np.searchsorted(ticks, finish, side="left")  # len(ticks): never counted
    allowed_by = np.searchsorted(ticks, cause, side="right") - 1
    coverage = np.zeros(ticks.size + 1, dtype=np.int64)  # difference array over ticks
    np.add.at(coverage, np.maximum(allowed_by, 0), 1)
    np.add.at(coverage, counted_at, -1)
    overshoot = int(np.cumsum(coverage).max()) if finish.size else 0
    return MissBudgetBound(arrivals, int(caused.sum()), budget, debt_limit, overshoot)


def _latency_block(lat: FloatArray, answered_in_slo: int, total: int, rejected: int) -> dict[str, Any]:
    return {
        "requests": total,
        "completed": int(lat.size),
        "rejected": rejected,
        "slo_attainment": answered_in_slo / total if total else 1.0,
        "p50_latency_s": _pct(lat, 50),
        "p95_latency_s": _pct(lat, 95),
        "p99_latency_s": _pct(lat, 99),
    }


def summarize(run: RunRecord, burst_threshold: float | None = None) -> dict[str, Any]:
    """One flat JSON-ready dict of the run's metrics, with a per-task breakdown."""
    done = ~np.isnan(run.finish_s)
    latency = run.finish_s - run.arrival_s
    slo_per_request = np.asarray(run.slo_s)[run.tasks] if run.tasks.size else np.zeros(0)
    in_slo = done & (latency <= slo_per_request)
    per_task: dict[str, Any] = {}
    for k, name in enumerate(run.task_names):
        mine = run.tasks == k
        block = _latency_block(
            latency[mine & done],
            int((in_slo & mine).sum()),
            int(mine.sum()),
            int((run.rejected & mine).sum()),
        )
        block["train_samples"] = run.trained_per_task[k]
        per_task[name] = block
    total_trained = int(sum(run.trained_per_task))
    trainable = run_trainable_samples(run)
    result: dict[str, Any] = {"policy": run.policy}
    result.update(
        _latency_block(latency[done], int(in_slo.sum()), int(run.arrival_s.size), int(run.rejected.sum()))
    )
    result.update(
        {
            "lost": int((~done & ~run.rejected).sum()),
            "train_samples": total_trained,
            "train_samples_per_task": dict(zip(run.task_names, run.trained_per_task, strict=True)),
            "training_compute_s": run.training_busy_s,
            "fluid_trainable_samples": trainable,
            "harvest_efficiency": harvest_efficiency(total_trained, trainable),
            "max_backlog": run.max_backlog,
            "decision_us_p50": _pct(run.decision_us, 50),
            "decision_us_p99": _pct(run.decision_us, 99),
            "horizon_s": run.horizon_s,
            "cores": run.cores,
        }
    )
    if run.cores > 1:
        result["core_switches"] = run.core_switches
        result["core_reclaims"] = run.core_reclaims
        cores = run.periods.get("inference_cores")
        if cores is not None and cores.size:
            result["mean_inference_cores"] = float(cores.mean())
    caused = training_caused_misses(run)
    if caused is not None:
        result["training_miss_fraction"] = float(caused.mean()) if caused.size else 0.0
    backlog = run.periods.get("backlog")
    if backlog is not None and backlog.size:
        result["mean_backlog"] = float(backlog.mean())
        threshold = burst_threshold if burst_threshold is not None else 0.0
        mean_rec, max_rec = burst_recovery_s(run.periods["t_s"], backlog, threshold)
        result["burst_recovery_s_mean"] = mean_rec
        result["burst_recovery_s_max"] = max_rec
    if run.round_target_samples > 0:
        result["rounds"] = len(run.round_samples)
        result["rounds_met"] = sum(n >= run.round_target_samples for n in run.round_samples)
    result["per_task"] = per_task
    return result


def combine_slo(results: Sequence[dict[str, Any]]) -> float:
    """Overall SLO attainment of several runs (weighted by their request counts)."""
    total = sum(r["requests"] for r in results)
    return sum(r["slo_attainment"] * r["requests"] for r in results) / total if total else 1.0
