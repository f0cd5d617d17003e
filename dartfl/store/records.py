"""The frozen records the run store takes and returns: decision rows and bucketed decision
points, telemetry snapshots, devices and buckets, fleet-wide buckets, and run summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dartfl.errors import ConfigError

__all__ = [
    "DecisionPoint",
    "DecisionRow",
    "FleetPoint",
    "RunInfo",
    "TelemetryDevice",
    "TelemetryPoint",
    "TelemetryRow",
]


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One control period of one policy, as the executor saw and decided it.

    `backlog` is the total queued requests at `t_s`; `trained_samples` counts the samples
    trained during the period that starts at `t_s` (so sums over periods are totals);
    `latency_p99_s` is the p99 latency of requests finished in the period (None if none).
    """

    t_s: float
    backlog: int
    inference_share: float
    microbatch: int
    max_batch: int
    task_shares: tuple[float, ...]
    trained_samples: int
    latency_p99_s: float | None = None

    def __post_init__(self) -> None:
        if self.backlog < 0 or self.trained_samples < 0:
            raise ConfigError(
                f"backlog and trained_samples must be >= 0, got {self.backlog}, {self.trained_samples}"
            )
        if not math.isfinite(self.t_s):
            raise ConfigError(f"decision time t_s must be finite, got {self.t_s}")


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    """A bucket of consecutive decisions (one decision when not downsampled).

    `t_s` is the first decision time in the bucket; `backlog_max` keeps bursts visible;
    shares, microbatch and backlog_mean are bucket means; `trained_samples` is the bucket sum;
    `latency_p99_s` the worst period p99 in the bucket.
    """

    t_s: float
    count: int
    backlog_max: int
    backlog_mean: float
    inference_share: float
    microbatch: float
    max_batch: int
    task_shares: tuple[float, ...]
    trained_samples: int
    latency_p99_s: float | None


@dataclass(frozen=True, slots=True)
class TelemetryRow:
    """One telemetry snapshot of one device, as published on MQTT (docs/protocol.md).

    `t_s` is the device's Unix time; the columns are the snapshot's headline numbers (None
    when the snapshot lacks them) and `payload` the whole snapshot, for per-task detail.
    `backlog` is the total over tasks; `train_samples` the device's lifetime counter.
    """

    device: str
    t_s: float
    backlog: int | None = None
    inference_share: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    slo_ms: float | None = None
    slo_attainment: float | None = None
    train_samples: int | None = None
    payload: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"telemetry device must be a non-empty string, got {self.device!r}")
        if not math.isfinite(self.t_s):
            raise ConfigError(f"telemetry time t_s must be finite, got {self.t_s}")


@dataclass(frozen=True, slots=True)
class TelemetryDevice:
    """A device with recorded telemetry: its time span and row count."""

    device: str
    first_t_s: float
    last_t_s: float
    rows: int


@dataclass(frozen=True, slots=True)
class TelemetryPoint:
    """A bucket of consecutive snapshots of one device (one snapshot when not downsampled).

    `t_s` is the first snapshot time in the bucket; `backlog_max` keeps bursts visible;
    shares, backlog_mean and slo_attainment are means, `slo_attainment_min` the worst window;
    latency percentiles are the bucket's worst; `train_samples` and `train_samples_per_task`
    (lifetime counters) the bucket's largest; `task_shares` per-task means, by task name.
    The time-use counters (seconds since the agent started: uptime, serving, training, per
    task, idle) are the bucket's largest too, so the difference between two points is the
    time spent in between (None or empty where the device does not report them).
    """

    t_s: float
    count: int
    backlog_max: int | None
    backlog_mean: float | None
    inference_share: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    slo_ms: float | None
    slo_attainment: float | None
    slo_attainment_min: float | None
    train_samples: int | None
    task_shares: Mapping[str, float]
    train_samples_per_task: Mapping[str, int]
    uptime_s: float | None = None
    inference_busy_s: float | None = None
    training_busy_s: float | None = None
    idle_s: float | None = None
    training_busy_s_per_task: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetPoint:
    """A time bucket over all devices: how many reported, their mean and worst SLO attainment,
    the worst p99 relative to its SLO (p99_ms / slo_ms), and the largest backlog."""

    t_s: float
    devices: int
    slo_attainment: float | None
    slo_attainment_min: float | None
    p99_over_slo_max: float | None
    backlog_max: int | None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of `runs`, plus the policies that have results.

    `damage` holds one line per part of the row that did not read (its config is then empty,
    a time NaN), so a listing shows the run and says what is wrong with it."""

    run_id: int
    kind: str
    label: str | None
    created_s: float
    finished_s: float | None
    status: str
    config: Mapping[str, Any]
    policies: tuple[str, ...]
    damage: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float | None:
        if self.finished_s is None or not math.isfinite(self.finished_s - self.created_s):
            return None
        return self.finished_s - self.created_s

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "created_s": self.created_s if math.isfinite(self.created_s) else None,
            "finished_s": self.finished_s
            if self.finished_s is not None and math.isfinite(self.finished_s)
            else None,
            "policies": list(self.policies),
            "config": dict(self.config),
            "damage": list(self.damage),
        }
