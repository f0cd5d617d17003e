"""Where a device's time went over a window: serving, training (per task) and idle.

A device reports cumulative seconds since it started (docs/protocol.md, the time-use fields),
as node_exporter reports CPU seconds per mode; the share of a window is the difference between
two snapshots divided by the uptime between them. A counter that went back means the agent
restarted in between: that window is unknown, not negative. Pure: no Streamlit, no pandas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dartfl.protocol import Telemetry
from dartfl.store import TelemetryPoint
from dashboard.telemetry import number

__all__ = ["ACTIVITIES", "TILE_WINDOW_S", "TimeCounters", "TimeUse", "time_use"]

# The activities a window splits into, bottom to top of the stacked chart.
ACTIVITIES = ("serving", "training", "idle")
# The fleet tiles' window: the minute the agent's latency and SLO figures cover too.
TILE_WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class TimeCounters:
    """A device's time-use counters at one moment: seconds since its agent started."""

    uptime_s: float
    serving_s: float
    training_s: float
    training_per_task_s: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of_snapshot(cls, snapshot: Telemetry) -> TimeCounters | None:
        """The counters of a snapshot; None from a device that does not report them."""
        return cls._of(
            snapshot.uptime_s,
            snapshot.inference_busy_s,
            snapshot.training_busy_s,
            snapshot.training_busy_s_per_task,
        )

    @classmethod
    def of_point(cls, point: TelemetryPoint) -> TimeCounters | None:
        """The counters at the end of a stored bucket (RunStore.telemetry_series)."""
        return cls._of(
            point.uptime_s, point.inference_busy_s, point.training_busy_s, point.training_busy_s_per_task
        )

    @classmethod
    def of_payload(cls, payload: Mapping[str, Any] | None) -> TimeCounters | None:
        """The counters of a stored snapshot's payload (a TelemetryRow's), read tolerantly."""
        if payload is None:
            return None
        per_task = payload.get("training_busy_s_per_task")
        return cls._of(
            number(payload.get("uptime_s")),
            number(payload.get("inference_busy_s")),
            number(payload.get("training_busy_s")),
            per_task if isinstance(per_task, Mapping) else {},
        )

    @classmethod
    def _of(
        cls,
        uptime: float | None,
        serving: float | None,
        training: float | None,
        per_task: Mapping[str, object],
    ) -> TimeCounters | None:
        if uptime is None or serving is None or training is None:
            return None
        tasks = {str(k): v for k, value in per_task.items() if (v := number(value)) is not None}
        return cls(uptime, serving, training, tasks)


@dataclass(frozen=True, slots=True)
class TimeUse:
    """Shares of a window's wall time (each in [0, 1], serving + training + idle = 1), and the
    training share split by task (empty when the device does not say)."""

    window_s: float
    serving: float
    training: float
    idle: float
    training_per_task: Mapping[str, float] = field(default_factory=dict)

    def share(self, activity: str) -> float:
        return {"serving": self.serving, "training": self.training, "idle": self.idle}[activity]


def time_use(earlier: TimeCounters, later: TimeCounters) -> TimeUse | None:
    """The time use between two snapshots of one device; None for an empty window or one
    across a restart (a counter went back)."""
    window = later.uptime_s - earlier.uptime_s
    serving = later.serving_s - earlier.serving_s
    training = later.training_s - earlier.training_s
    if window <= 0 or serving < 0 or training < 0:
        return None
    # Measured busy time can exceed the uptime by a rounding hair; shares stay in [0, 1].
    serving_share = min(1.0, serving / window)
    training_share = min(1.0 - serving_share, training / window)
    per_task = {
        task: later.training_per_task_s[task] - earlier.training_per_task_s.get(task, 0.0)
        for task in later.training_per_task_s
    }
    total = sum(per_task.values())
    if total > 0 and all(v >= 0 for v in per_task.values()):
        # Each task's part of the training share (the round-end flush is in the total only).
        split = {task: training_share * v / total for task, v in sorted(per_task.items())}
    else:
        split = {}
    idle = max(0.0, 1.0 - serving_share - training_share)
    return TimeUse(window, serving_share, training_share, idle, split)
