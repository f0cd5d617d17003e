"""The fleet overview's data: one tile per device, from the live feed where it has the device,
else from the newest recorded snapshot; and the per-device frame of the fleet's p99 chart."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dartfl.protocol import Telemetry
from dartfl.store import TelemetryRow
from dashboard.feed import FeedState
from dashboard.telemetry import DeviceStatus, Liveness, number, row_from_snapshot
from dashboard.timeuse import TILE_WINDOW_S, TimeCounters, TimeUse, time_use

__all__ = ["TILE_WINDOW_S", "Baselines", "DeviceTile", "fleet_frame", "fleet_tiles"]

# For each device, its snapshot at or before a time (RunStore.telemetry_before).
Baselines = Callable[[Mapping[str, float]], Mapping[str, TelemetryRow]]


@dataclass(frozen=True, slots=True)
class DeviceTile:
    """What the fleet overview shows for one device.

    `age_s` is how long ago it was last heard from; `source` where the tile's figures come
    from ("broker": the live feed, "run store": the recorder's newest snapshot); `offline` that
    its retained status says it stopped. `time_use` is where its time went over the last
    `TILE_WINDOW_S` (None from a device that does not report it, `reports_time_use` false,
    or before its second snapshot); `inference_share` is the policy's priority share, not
    the time it served."""

    device: str
    status: DeviceStatus
    age_s: float
    source: str
    offline: bool
    backlog: int | None
    inference_share: float | None
    slo_attainment: float | None
    p99_ms: float | None
    slo_ms: float | None
    train_samples: int | None
    round_trained: int | None
    round_target: int | None
    rounds_done: int | None
    misses_slo: bool
    time_use: TimeUse | None = None
    reports_time_use: bool = False  # its snapshots carry the counters (time_use needs two)

    @property
    def round_progress(self) -> float | None:
        if self.round_trained is None or not self.round_target:
            return None
        return min(1.0, self.round_trained / self.round_target)


def _tile(
    row: TelemetryRow,
    last_seen_s: float,
    source: str,
    now_s: float,
    liveness: Liveness,
    use: TimeUse | None,
    **kw: Any,
) -> DeviceTile:
    offline = bool(kw.get("offline", False))
    status = liveness.status(last_seen_s, now_s, offline=offline)
    payload = row.payload or {}
    rnd = payload.get("round")
    rnd = rnd if isinstance(rnd, Mapping) else {}
    slo_target: float = kw["slo_target"]
    misses = status != "gone" and (
        (row.slo_attainment is not None and row.slo_attainment < slo_target)
        or (row.p99_ms is not None and row.slo_ms is not None and row.p99_ms > row.slo_ms)
    )

    def count(name: str) -> int | None:
        value = number(rnd.get(name))
        return None if value is None else int(value)

    return DeviceTile(
        device=row.device,
        status=status,
        age_s=max(0.0, now_s - last_seen_s),
        source=source,
        offline=offline,
        backlog=row.backlog,
        inference_share=row.inference_share,
        slo_attainment=row.slo_attainment,
        p99_ms=row.p99_ms,
        slo_ms=row.slo_ms,
        train_samples=row.train_samples,
        round_trained=count("trained"),
        round_target=count("target"),
        rounds_done=count("done"),
        misses_slo=misses,
        time_use=use,
        reports_time_use=TimeCounters.of_payload(payload) is not None,
    )


def _live_use(newest: Telemetry, baseline: Telemetry | None) -> TimeUse | None:
    if baseline is None:
        return None
    earlier, later = TimeCounters.of_snapshot(baseline), TimeCounters.of_snapshot(newest)
    return None if earlier is None or later is None else time_use(earlier, later)


def _recorded_use(rows: Sequence[TelemetryRow], baselines: Baselines | None) -> dict[str, TimeUse]:
    """Each recorded device's time use over the window that ends at its newest snapshot."""
    if baselines is None or not rows:
        return {}
    starts = baselines({row.device: row.t_s - TILE_WINDOW_S for row in rows})
    uses = {}
    for row in rows:
        start = starts.get(row.device)
        earlier = TimeCounters.of_payload(start.payload) if start is not None else None
        later = TimeCounters.of_payload(row.payload)
        if earlier is not None and later is not None and (use := time_use(earlier, later)) is not None:
            uses[row.device] = use
    return uses


_ORDER = {"alive": 0, "stale": 1, "gone": 2}


def fleet_tiles(
    history: Sequence[TelemetryRow],
    live: FeedState | None,
    now_s: float,
    liveness: Liveness,
    slo_target: float = 0.95,
    baselines: Baselines | None = None,
) -> list[DeviceTile]:
    """One tile per device, from the live feed where it has the device, else from the newest
    recorded row (whose time use `baselines` gives the start of). Devices missing their SLO
    come first, then by liveness and name."""
    recorded_t = {row.device: row.t_s for row in history}
    live_devices = live.devices if live is not None else {}
    # Which is newer is decided on the device's own clock, the one both carry (the decoder
    # guarantees `t`): its skew against this host's clock must not let an old recorded row
    # hide the live state.
    fresh = {
        name: snap
        for name, snap in live_devices.items()
        if recorded_t.get(name, -math.inf) <= snap.snapshot.t
    }
    from_store = [row for row in history if row.device not in fresh]
    uses = _recorded_use(from_store, baselines)
    tiles = {
        row.device: _tile(
            row, row.t_s, "run store", now_s, liveness, uses.get(row.device), slo_target=slo_target
        )
        for row in from_store
    }
    for name, snap in fresh.items():
        tiles[name] = _tile(
            row_from_snapshot(snap.snapshot),
            snap.received_s,
            "broker",
            now_s,
            liveness,
            _live_use(snap.snapshot, snap.baseline),
            slo_target=slo_target,
            offline=snap.offline,
        )
    return sorted(tiles.values(), key=lambda t: (not t.misses_slo, _ORDER[t.status], t.device))


def fleet_frame(tiles: Sequence[DeviceTile]) -> pd.DataFrame:
    """Per device: p99 relative to its SLO and window SLO attainment, for the fleet chart."""
    rows = [
        {
            "device": t.device,
            "status": t.status,
            "p99_over_slo": (t.p99_ms / t.slo_ms) if t.p99_ms is not None and t.slo_ms else None,
            "slo_attainment": t.slo_attainment,
            "backlog": t.backlog,
            "misses_slo": t.misses_slo,
        }
        for t in tiles
    ]
    return pd.DataFrame(
        rows, columns=["device", "status", "p99_over_slo", "slo_attainment", "backlog", "misses_slo"]
    )
