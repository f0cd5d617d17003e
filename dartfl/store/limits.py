"""How much telemetry a run store keeps, and which snapshots it refuses (docs/store.md).

The decoder (dartfl.protocol.decode_telemetry) already refuses what no device can say: values
out of range, a payload over 64 KiB, a time outside the Unix range. What it cannot judge is
what only the recorder knows: its own clock and what the store already holds. So:

- a snapshot dated more than `max_ahead_s` ahead of the recorder's clock is refused: a device
  whose clock is wrong would otherwise stay "newest" for good, and no retention would prune it;
- with a retention, a snapshot older than it is refused: it would be pruned at once;
- a device keeps at most `max_rows_per_device` snapshots (the oldest go first), so one device
  publishing too often evicts only its own history;
- at most `max_devices` devices are recorded, so a flood of invented device names cannot grow
  the store without bound.

Together with the 64 KiB bound on a payload, the telemetry table holds at most
`max_devices * max_rows_per_device` rows of bounded size. `TelemetryAdmission` decides
(`refusal`) apart from updating its counts (`admitted`, `written`, `trimmed`); time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from dartfl.errors import ConfigError

__all__ = ["REFUSALS", "TelemetryAdmission", "TelemetryLimits"]

# Why a snapshot was refused, as `dartfl record` words it.
REFUSALS: Final = {
    "ahead": "dated too far ahead of this host's clock",
    "behind": "older than the retention",
    "devices": "from a device past the device limit",
}

# A device's rows are trimmed back to the limit once they pass it by this fraction, so a trim
# (one indexed DELETE) happens every few thousand snapshots, not on every write.
TRIM_SLACK: Final = 0.05


@dataclass(frozen=True, slots=True)
class TelemetryLimits:
    """The bounds of the telemetry a recorder keeps.

    `max_ahead_s` 300 s: a device synced by NTP is off by milliseconds, one without a
    real-time clock or NTP drifts by seconds a day; five minutes is far past both, and bounds
    how long a refused clock could have hidden a device's true newest snapshot.
    `max_rows_per_device` 200,000: 55 h of the agent's default 1-s telemetry, so with the
    default 24-h retention only a device publishing faster than about 2.3 per second meets it.
    `max_devices` 1,000: at about 1.1 KB a row (a 3-task snapshot) that bounds the table at
    about 220 GB, 93 GB for a full fleet at 1 s and 24 h; a larger fleet raises it.
    """

    retention_s: float | None = 86400.0
    max_ahead_s: float = 300.0
    max_rows_per_device: int = 200_000
    max_devices: int = 1_000

    def __post_init__(self) -> None:
        if self.retention_s is not None and not (math.isfinite(self.retention_s) and self.retention_s > 0):
            raise ConfigError(f"retention must be > 0 s (or None to keep everything), got {self.retention_s}")
        if not (math.isfinite(self.max_ahead_s) and self.max_ahead_s >= 0):
            raise ConfigError(f"max_ahead_s must be a finite number of seconds >= 0, got {self.max_ahead_s}")
        for name in ("max_rows_per_device", "max_devices"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")

    def prune_window(self, now_s: float) -> tuple[float, float]:
        """(before_s, after_s): snapshots outside this window are pruned."""
        before = -math.inf if self.retention_s is None else now_s - self.retention_s
        return before, now_s + self.max_ahead_s


class TelemetryAdmission:
    """Which snapshots to store, and which devices have grown past their row limit.

    Counts are per device: rows in the store plus rows admitted since (an estimate that a
    redelivered duplicate inflates a little, which only brings a trim forward; a trim sets
    the exact count)."""

    def __init__(self, limits: TelemetryLimits, rows_per_device: Mapping[str, int]) -> None:
        self.limits = limits
        self._rows = dict(rows_per_device)

    def refusal(self, device: str, t_s: float, now_s: float) -> str | None:
        """Why a snapshot of `device` dated `t_s` is refused at `now_s` (a key of REFUSALS),
        or None to store it."""
        if t_s > now_s + self.limits.max_ahead_s:
            return "ahead"
        if self.limits.retention_s is not None and t_s < now_s - self.limits.retention_s:
            return "behind"
        if device not in self._rows and len(self._rows) >= self.limits.max_devices:
            return "devices"
        return None

    def admitted(self, device: str) -> None:
        """A snapshot of `device` was accepted (it counts from now, written or not)."""
        self._rows[device] = self._rows.get(device, 0) + 1

    def over_limit(self) -> list[str]:
        """Devices whose rows passed the limit by more than the slack: trim them."""
        cap = self.limits.max_rows_per_device
        bound = cap + max(1, int(cap * TRIM_SLACK))
        return sorted(device for device, rows in self._rows.items() if rows > bound)

    def trimmed(self, device: str, rows: int) -> None:
        self._rows[device] = rows

    def recount(self, rows_per_device: Mapping[str, int], pending: Iterable[str] = ()) -> None:
        """The store's exact counts (after a prune), plus devices with snapshots not yet
        written; devices with neither are forgotten, freeing their place."""
        fresh = dict(rows_per_device)
        for device in pending:
            fresh[device] = fresh.get(device, 0) + 1
        self._rows = fresh
