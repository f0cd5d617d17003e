"""A device page's data: its snapshots over one time window as the frames its charts draw,
where its time went above all (serving, training per task, idle), from the time-use counters."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd

from dartfl.errors import ConfigError
from dartfl.protocol import Telemetry
from dartfl.store import TelemetryPoint
from dashboard.telemetry import row_from_snapshot
from dashboard.timeuse import TimeCounters, time_use

__all__ = ["TimeWindow", "device_frames", "points_from_snapshots", "time_use_frame", "timestamps"]


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """The one time span every chart of a page shows, in Unix seconds."""

    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not self.end_s > self.start_s:
            raise ConfigError(f"a time window must end after it starts, got [{self.start_s}, {self.end_s}]")

    @property
    def domain(self) -> tuple[str, str]:
        """The window as a Vega-Lite temporal domain: ISO 8601 times in UTC. (A domain of
        epoch milliseconds, which Vega-Lite documents, drew every mark at the axis's left
        edge and no tick labels in Streamlit's frontend: seen in Chromium.)"""
        return _iso(self.start_s), _iso(self.end_s)


def _iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).isoformat(timespec="milliseconds")


def timestamps(seconds: Iterable[float]) -> pd.Series:
    return pd.to_datetime(pd.Series(list(seconds), dtype="float64"), unit="s", utc=True)


def points_from_snapshots(snapshots: Sequence[Telemetry]) -> list[TelemetryPoint]:
    """Live snapshots (kept in memory, at most a few hundred) as one-snapshot points."""
    points = []
    for snap in snapshots:
        row = row_from_snapshot(snap)
        points.append(
            TelemetryPoint(
                t_s=row.t_s,
                count=1,
                backlog_max=row.backlog,
                backlog_mean=None if row.backlog is None else float(row.backlog),
                inference_share=row.inference_share,
                p50_ms=row.p50_ms,
                p95_ms=row.p95_ms,
                p99_ms=row.p99_ms,
                slo_ms=row.slo_ms,
                slo_attainment=row.slo_attainment,
                slo_attainment_min=row.slo_attainment,
                train_samples=row.train_samples,
                task_shares=dict(snap.task_shares),
                train_samples_per_task=dict(snap.train_samples_per_task),
                uptime_s=snap.uptime_s,
                inference_busy_s=snap.inference_busy_s,
                training_busy_s=snap.training_busy_s,
                idle_s=snap.idle_s,
                training_busy_s_per_task=dict(snap.training_busy_s_per_task),
            )
        )
    return points


def time_use_frame(points: Sequence[TelemetryPoint]) -> pd.DataFrame:
    """Where the device's time went between consecutive points, long format (t, activity,
    share): `serving`, `training <task>` (or `training` when the device does not split it),
    `idle`; the shares of each interval add up to 1. A row at t stands for the interval that
    ends at t (draw it step-before). Intervals across a restart are left out."""
    rows = []
    counters = [TimeCounters.of_point(p) for p in points]
    times = timestamps(p.t_s for p in points)
    for j in range(1, len(points)):
        earlier, later = counters[j - 1], counters[j]
        use = time_use(earlier, later) if earlier is not None and later is not None else None
        if use is None:
            continue
        when = times.iloc[j]
        rows.append({"t": when, "activity": "serving", "share": use.serving})
        split = use.training_per_task or {"": use.training}
        for task, share in split.items():
            rows.append({"t": when, "activity": f"training {task}".strip(), "share": share})
        rows.append({"t": when, "activity": "idle", "share": use.idle})
    return pd.DataFrame(rows, columns=["t", "activity", "share"])


def device_frames(points: Sequence[TelemetryPoint]) -> dict[str, pd.DataFrame]:
    """The device page's charts' data: `series` (wide, one row per point), and long frames
    `time_use` (see time_use_frame), `allocation` (the policy's inference share and its
    per-task training shares, for devices that report no time use), `latency` (percentiles)
    and `trained` (cumulative samples per task)."""
    t = timestamps(p.t_s for p in points)
    series = pd.DataFrame(
        {
            "t": t,
            "backlog_max": [p.backlog_max for p in points],
            "backlog_mean": [p.backlog_mean for p in points],
            "inference_share": [p.inference_share for p in points],
            "slo_attainment": [p.slo_attainment for p in points],
            "slo_ms": [p.slo_ms for p in points],
        }
    )
    allocation, latency, trained = [], [], []
    for when, p in zip(t, points, strict=True):
        x = p.inference_share
        if x is not None:
            allocation.append({"t": when, "activity": "serving", "share": x})
            total = sum(p.task_shares.values())
            for task, y in sorted(p.task_shares.items()):
                share = (1.0 - x) * y / total if total > 0 else 0.0
                allocation.append({"t": when, "activity": f"training {task}", "share": share})
        for name in ("p50_ms", "p95_ms", "p99_ms"):
            value = getattr(p, name)
            if value is not None:
                latency.append({"t": when, "percentile": name.removesuffix("_ms"), "ms": value})
        for task, n in sorted(p.train_samples_per_task.items()):
            trained.append({"t": when, "task": task, "samples": n})
    return {
        "series": series,
        "time_use": time_use_frame(points),
        "allocation": pd.DataFrame(allocation, columns=["t", "activity", "share"]),
        "latency": pd.DataFrame(latency, columns=["t", "percentile", "ms"]),
        "trained": pd.DataFrame(trained, columns=["t", "task", "samples"]),
    }
