"""What a replay measured, in the same metrics as a simulation, and what only a real run has.

The requester's side gives latency (send to receipt, broker round trips included), replies,
rejections, errors, late and lost requests, accuracy and how far the sender fell behind its
plan. The device's side comes from its telemetry over the replay's window: samples trained,
busy times, CPU. Counters are summed snapshot to snapshot, so an agent that restarts during the
replay (its counters start again from 0) is counted across the restart, not as negative work.

Harvest is measured against the real device's fluid limit over the window (dartfl/fluid.py):
its N cores' core-seconds less the least that serving every request needed (at the profile's
end-to-end cost, never more than the device really spent on inference), trained at the cheaper
of the profile's and the achieved per-sample cost. Every work item holds at least one core for
its duration, so the busy times the agent reports are lower bounds on the core-seconds spent:
the limit is an upper bound on what any policy could train, and a run that answers every
request cannot exceed 1.0, split lanes that train and serve at once included. On a profile of
N cores that is the whole device's limit, whatever threads the agent was given: an agent that
time-shares on one thread of a 2-core device leaves half of it idle, and its harvest says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from dartfl.arrivals import Arrivals
from dartfl.fluid import fluid_terms
from dartfl.metrics import RunRecord, summarize
from dartfl.protocol import Telemetry
from dartfl.types import DeviceProfile

__all__ = ["HEADLINE_KEYS", "ReplayReport", "SendLag", "device_window", "replay_report"]

# The replay's headline figures, in the order people read them (the human table's columns).
HEADLINE_KEYS = (
    "requests",
    "replies",
    "rejected",
    "errors",
    "lost",
    "slo_attainment",
    "p50_latency_s",
    "p99_latency_s",
    "train_samples",
    "harvest_efficiency",
    "accuracy",
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SendLag:
    """How far behind its plan the sender published, over every request (seconds)."""

    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float

    @classmethod
    def of(cls, lag_s: FloatArray) -> SendLag:
        if lag_s.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0)
        p50, p95, p99 = (float(v) for v in np.percentile(lag_s, [50, 95, 99]))
        return cls(p50, p95, p99, float(lag_s.max()))


@dataclass(frozen=True)
class DeviceWindow:
    """The device's own counters over the replay's window, summed across restarts."""

    window_s: float
    trained_per_task: tuple[int, ...]
    training_busy_s: float
    inference_busy_s: float
    process_cpu_s: float
    compute_cpu_s: float
    restarts: int
    decision_us_p50: float | None
    # A split agent's lanes: the changes of split and reclaims in the window, and the serving
    # lane's cores at each snapshot (empty for an agent on one lane).
    core_switches: int = 0
    core_reclaims: int = 0
    inference_cores: tuple[int, ...] = ()


def _delta(snapshots: Sequence[Telemetry], read: Any) -> float:
    """Sum of a counter's increases; after a restart (uptime or counter went back) the new
    value counts from 0."""
    total = 0.0
    for before, after in itertools.pairwise(snapshots):
        a, b = float(read(before) or 0.0), float(read(after) or 0.0)
        restarted = (after.uptime_s or 0.0) < (before.uptime_s or 0.0) or b < a
        total += b if restarted else b - a
    return total


def device_window(snapshots: Sequence[Telemetry], task_names: Sequence[str]) -> DeviceWindow | None:
    """The device's counters from its first to its last snapshot of the replay (None: fewer than 2)."""
    if len(snapshots) < 2:
        return None
    restarts = sum((b.uptime_s or 0.0) < (a.uptime_s or 0.0) for a, b in itertools.pairwise(snapshots))
    trained = tuple(
        round(_delta(snapshots, lambda s, t=t: s.train_samples_per_task.get(t, 0))) for t in task_names
    )
    return DeviceWindow(
        window_s=snapshots[-1].t - snapshots[0].t,
        trained_per_task=trained,
        training_busy_s=_delta(snapshots, lambda s: s.training_busy_s),
        inference_busy_s=_delta(snapshots, lambda s: s.inference_busy_s),
        process_cpu_s=_delta(snapshots, lambda s: s.process_cpu_s),
        compute_cpu_s=_delta(snapshots, lambda s: s.compute_cpu_s),
        restarts=int(restarts),
        decision_us_p50=snapshots[-1].decision_us_p50,
        core_switches=round(_delta(snapshots, lambda s: s.core_switches)),
        core_reclaims=round(_delta(snapshots, lambda s: s.core_reclaims)),
        inference_cores=tuple(s.inference_cores for s in snapshots if s.inference_cores is not None),
    )


@dataclass(frozen=True)
class ReplayReport:
    """One replay: the simulation's metrics (`metrics`, the same keys as `dartfl sim`'s) and
    what only a replay has. `to_json` flattens both into the `--json` contract."""

    metrics: dict[str, Any]
    replies: int
    errors: int
    unsent: int  # the replayer's client could not queue them (`lost` counts only sent ones)
    late_replies: int  # answered after the replay stopped waiting (counted as SLO misses)
    accuracy: float | None
    send_lag: SendLag
    payload: str
    agent_restarts: int
    agent_decision_us_p50: float | None
    agent_cpu_per_request_s: float | None
    agent_overhead_cpu_fraction: float | None
    window_s: float | None

    def to_json(self) -> dict[str, Any]:
        out = dict(self.metrics)
        out.update(
            replies=self.replies,
            errors=self.errors,
            unsent=self.unsent,
            lost=int(out["lost"]) - self.unsent,
            late_replies=self.late_replies,
            accuracy=self.accuracy,
            send_lag_s={
                "p50": self.send_lag.p50_s,
                "p95": self.send_lag.p95_s,
                "p99": self.send_lag.p99_s,
                "max": self.send_lag.max_s,
            },
            payload=self.payload,
            agent_restarts=self.agent_restarts,
            agent_decision_us_p50=self.agent_decision_us_p50,
            agent_cpu_per_request_s=self.agent_cpu_per_request_s,
            agent_overhead_cpu_fraction=self.agent_overhead_cpu_fraction,
            window_s=self.window_s,
            max_backlog=None,  # the requester cannot see the device's queue
        )
        return out


@dataclass(frozen=True)
class Replies:
    """What came back per request: status ('' never answered), receipt time, label."""

    status: npt.NDArray[np.str_]
    finish_s: FloatArray
    labels: npt.NDArray[np.int64]
    late: npt.NDArray[np.bool_]


def replay_report(
    arrivals: Arrivals,
    sent_s: FloatArray,
    lag_s: FloatArray,
    replies: Replies,
    truth: npt.NDArray[np.int64],
    profile: DeviceProfile,
    policy: str,
    slo_s: float,
    snapshots: Sequence[Telemetry],
    payload: str,
) -> tuple[ReplayReport, RunRecord]:
    """The report and the run record (for the run store) of one replay."""
    names = arrivals.task_names
    ok = replies.status == "ok"
    window = device_window(snapshots, names)
    counts = np.bincount(arrivals.tasks[replies.status != ""], minlength=len(names)).tolist()
    fluid = fluid_terms(profile, names, counts)  # core-seconds on the profile's N cores
    needed_s, cheapest = fluid.inference_min_s, fluid.cheapest_sample_s
    horizon = arrivals.duration_s
    trained: tuple[int, ...] = (0,) * len(names)
    training_busy = inference_busy = 0.0
    periods: dict[str, FloatArray] = {}
    if window is not None:
        horizon, trained = window.window_s, window.trained_per_task
        training_busy, inference_busy = window.training_busy_s, window.inference_busy_s
        needed_s = min(needed_s, inference_busy)
        if sum(trained) > 0 and training_busy > 0:
            cheapest = min(cheapest, training_busy / sum(trained))
        if window.inference_cores:
            periods["inference_cores"] = np.asarray(window.inference_cores, dtype=np.float64)
    record = RunRecord(
        policy=policy,
        task_names=names,
        slo_s=(slo_s,) * len(names),
        horizon_s=horizon,
        arrival_s=sent_s,
        finish_s=np.where(ok, replies.finish_s, np.nan),
        tasks=arrivals.tasks,
        rejected=replies.status == "rejected",
        trained_per_task=trained,
        training_busy_s=training_busy,
        inference_busy_s=inference_busy,
        fluid=replace(fluid, inference_min_s=needed_s, cheapest_sample_s=cheapest),
        max_backlog=0,
        decision_us=np.zeros(0),
        periods=periods,
        cores=profile.cores.count,
        core_switches=window.core_switches if window is not None else 0,
        core_reclaims=window.core_reclaims if window is not None else 0,
    )
    cpu_per_request = overhead = None
    if window is not None and arrivals.num_requests:
        cpu_per_request = window.process_cpu_s / arrivals.num_requests
        if window.process_cpu_s > 0:
            overhead = (window.process_cpu_s - window.compute_cpu_s) / window.process_cpu_s
    report = ReplayReport(
        metrics=summarize(record),
        replies=int((replies.status != "").sum()),
        errors=int((replies.status == "error").sum()),
        unsent=int(np.isnan(sent_s).sum()),
        late_replies=int(replies.late.sum()),
        accuracy=float((replies.labels[ok] == truth[ok]).mean()) if ok.any() else None,
        send_lag=SendLag.of(lag_s),
        payload=payload,
        agent_restarts=window.restarts if window is not None else 0,
        agent_decision_us_p50=window.decision_us_p50 if window is not None else None,
        agent_cpu_per_request_s=cpu_per_request,
        agent_overhead_cpu_fraction=overhead,
        window_s=window.window_s if window is not None else None,
    )
    return report, record
