"""Telemetry snapshots (docs/protocol.md) as the run store's rows, and device liveness.

Pure functions, no Streamlit and no MQTT: the recorder, the live feed and the pages share
them, and tests call them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dartfl.errors import ConfigError
from dartfl.protocol import Telemetry
from dartfl.protocol.device import MAX_COUNT
from dartfl.store import TelemetryRow

__all__ = [
    "DeviceStatus",
    "Liveness",
    "number",
    "row_from_snapshot",
]

DeviceStatus = Literal["alive", "stale", "gone"]


def number(value: object) -> float | None:
    """`value` as a finite float, or None for anything else (missing, null, text, NaN, bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    as_float = float(value)
    return as_float if math.isfinite(as_float) else None


def row_from_snapshot(snapshot: Telemetry) -> TelemetryRow:
    """A decoded telemetry snapshot (`dartfl.protocol.decode_telemetry`) as a store row;
    whatever the snapshot does not report is None."""
    latency = snapshot.latency_ms
    backlog = sum(snapshot.backlog.values()) if snapshot.backlog else None
    return TelemetryRow(
        device=snapshot.device,
        t_s=snapshot.t,
        # Each task's count is bounded, their sum may not be: past what SQLite holds it is unknown.
        backlog=backlog if backlog is not None and backlog < MAX_COUNT else None,
        inference_share=snapshot.inference_share,
        p50_ms=latency.p50_ms,
        p95_ms=latency.p95_ms,
        p99_ms=latency.p99_ms,
        slo_ms=snapshot.slo_ms,
        slo_attainment=snapshot.slo_attainment_window,
        train_samples=snapshot.train_samples,
        payload=snapshot.to_json(),
    )


@dataclass(frozen=True, slots=True)
class Liveness:
    """When a device counts as alive, stale or gone, from the age of its last snapshot.

    Alive: heard from within `stale_after_s`; stale: within `gone_after_s`; gone: older, or
    its retained status says offline (a clean shutdown or its last will)."""

    stale_after_s: float = 10.0
    gone_after_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.stale_after_s < self.gone_after_s:
            raise ConfigError(
                f"need 0 < stale_after_s < gone_after_s, got {self.stale_after_s}, {self.gone_after_s}"
            )

    def status(self, last_seen_s: float, now_s: float, *, offline: bool = False) -> DeviceStatus:
        age = now_s - last_seen_s
        if offline or age > self.gone_after_s:
            return "gone"
        return "alive" if age <= self.stale_after_s else "stale"
