"""Telemetry snapshots (docs/protocol.md) as the run store's rows, and device liveness.

Pure functions, no Streamlit and no MQTT: the recorder, the live feed and the pages share
them, and tests call them directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dartfl.errors import ConfigError
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


def _count(value: object) -> int | None:
    """A plausible count: >= 0 and below 2**53 (exact in a float, fits SQLite's integers)."""
    as_float = number(value)
    return None if as_float is None or not 0 <= as_float < 2.0**53 else int(as_float)


def _total(value: object) -> int | None:
    """A per-task mapping of counts summed, or a plain count; as plausible as each count."""
    if isinstance(value, Mapping):
        known = [c for c in map(_count, value.values()) if c is not None]
        return _count(sum(known)) if known else None
    return _count(value)


def row_from_snapshot(snapshot: Mapping[str, Any]) -> TelemetryRow:
    """A decoded telemetry object (`edge_client.protocol.decode_telemetry`) as a store row.

    Tolerant of optional fields: whatever the snapshot lacks is None. `device` and `t` are
    required (the decoder already guarantees both)."""
    device, t = snapshot.get("device"), number(snapshot.get("t"))
    if not isinstance(device, str) or not device or t is None:
        raise ConfigError(f"a telemetry snapshot needs 'device' and a finite 't', got {device!r}, {t!r}")
    latency = snapshot.get("latency_ms")
    latency = latency if isinstance(latency, Mapping) else {}
    return TelemetryRow(
        device=device,
        t_s=t,
        backlog=_total(snapshot.get("backlog")),
        inference_share=number(snapshot.get("inference_share")),
        p50_ms=number(latency.get("p50_ms")),
        p95_ms=number(latency.get("p95_ms")),
        p99_ms=number(latency.get("p99_ms")),
        slo_ms=number(snapshot.get("slo_ms")),
        slo_attainment=number(snapshot.get("slo_attainment_window")),
        train_samples=_total(snapshot.get("train_samples")),
        payload=dict(snapshot),
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
