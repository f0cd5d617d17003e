"""The run store's device telemetry (schema version 2): the migration from version 1,
duplicates stored once, per-device and fleet series downsampled in SQL with their peaks and
counters, the time-use counters, lookups a window earlier, pruning, and bad rows refused."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.store import SCHEMA_VERSION, RunStore, TelemetryRow


def _snap(device: str, t_s: float, backlog: int, **extra: object) -> TelemetryRow:
    payload = {
        "device": device,
        "t": t_s,
        "task_shares": {"a": 0.25, "b": 0.75},
        "train_samples_per_task": {"a": int(t_s), "b": 2 * int(t_s)},
    }
    return TelemetryRow(
        device, t_s, backlog, 0.5, 1.0, 2.0, 3.0 + backlog, 100.0, 0.9, 3 * int(t_s), {**payload, **extra}
    )


def _v1_store(path: Path) -> None:
    """A store as schema version 1 wrote it (no telemetry table)."""
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version VALUES (1);
            CREATE TABLE runs (run_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, label TEXT,
                created_s REAL NOT NULL, finished_s REAL, status TEXT NOT NULL, config TEXT NOT NULL);
            CREATE TABLE results (run_id INTEGER NOT NULL, policy TEXT NOT NULL, metrics TEXT NOT NULL,
                PRIMARY KEY (run_id, policy));
            CREATE TABLE decisions (run_id INTEGER NOT NULL, policy TEXT NOT NULL, t_s REAL NOT NULL,
                backlog INTEGER NOT NULL, inference_share REAL NOT NULL, microbatch INTEGER NOT NULL,
                max_batch INTEGER NOT NULL, task_shares TEXT NOT NULL, trained_samples INTEGER NOT NULL,
                latency_p99_s REAL);
            INSERT INTO runs VALUES (1, 'sim', 'old', 1.0, 2.0, 'ok', '{"rate": 5}');
            INSERT INTO results VALUES (1, 'dart', '{"slo_attainment": 0.9}');
            """
        )
    conn.close()


def test_version_1_store_is_migrated_forward_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _v1_store(path)
    with RunStore(path) as store:
        assert store.results(1) == {"dart": {"slo_attainment": 0.9}}
        assert store.add_telemetry([_snap("pi-1", 10.0, 3)]) == 1
        assert [d.device for d in store.telemetry_devices()] == ["pi-1"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert SCHEMA_VERSION == 2
    assert {"telemetry_by_device", "telemetry_by_time"} <= indexes


def test_telemetry_duplicates_are_stored_once_and_latest_is_per_device(tmp_store: RunStore) -> None:
    rows = [_snap("pi-1", float(t), t) for t in range(5)] + [_snap("pi-2", 2.0, 9)]
    assert tmp_store.add_telemetry(rows) == 6
    assert tmp_store.add_telemetry(rows[:2]) == 0  # a QoS 1 redelivery
    devices = tmp_store.telemetry_devices()
    assert [(d.device, d.first_t_s, d.last_t_s, d.rows) for d in devices] == [
        ("pi-1", 0.0, 4.0, 5),
        ("pi-2", 2.0, 2.0, 1),
    ]
    assert tmp_store.telemetry_device("pi-1") == devices[0]  # one device, by its index range
    assert tmp_store.telemetry_device("nobody") is None
    latest = tmp_store.telemetry_latest()
    assert [(r.device, r.t_s, r.backlog) for r in latest] == [("pi-1", 4.0, 4), ("pi-2", 2.0, 9)]
    assert latest[0].payload is not None and latest[0].payload["task_shares"] == {"a": 0.25, "b": 0.75}
    assert [r.device for r in tmp_store.telemetry_latest(since_s=3.0)] == ["pi-1"]


def test_telemetry_series_is_exact_below_max_points_and_windowed(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([_snap("pi-1", float(t), t % 4) for t in range(10)])
    tmp_store.add_telemetry([_snap("pi-2", float(t), 50) for t in range(10)])
    points = tmp_store.telemetry_series("pi-1", 2.0, 5.0, max_points=100)
    assert [p.t_s for p in points] == [2.0, 3.0, 4.0, 5.0]
    assert [p.backlog_max for p in points] == [2, 3, 0, 1]
    assert all(p.count == 1 for p in points)
    assert points[0].task_shares == {"a": 0.25, "b": 0.75}
    assert points[-1].train_samples_per_task == {"a": 5, "b": 10}
    assert tmp_store.telemetry_series("nobody") == []


def test_telemetry_series_downsamples_in_sql_keeping_peaks_and_counters(tmp_store: RunStore) -> None:
    rows = [_snap("pi-1", float(t), 1000 if t == 777 else 1) for t in range(3600)]
    tmp_store.add_telemetry(rows)
    points = tmp_store.telemetry_series("pi-1", 0.0, 3600.0, max_points=60)
    assert len(points) == 60
    assert sum(p.count for p in points) == 3600
    assert max(p.backlog_max or 0 for p in points) == 1000  # the burst survives
    assert points[-1].train_samples == 3 * 3599  # lifetime counter: the bucket's largest
    assert points[-1].train_samples_per_task == {"a": 3599, "b": 7198}
    assert points[0].task_shares == pytest.approx({"a": 0.25, "b": 0.75})
    with pytest.raises(ConfigError, match="max_points"):
        tmp_store.telemetry_series("pi-1", max_points=0)


def _busy(t_s: float) -> dict[str, object]:
    """Time-use counters of a device that serves a quarter of its time and trains half."""
    return {
        "uptime_s": t_s,
        "inference_busy_s": 0.25 * t_s,
        "training_busy_s": 0.5 * t_s,
        "training_busy_s_per_task": {"a": 0.125 * t_s, "b": 0.375 * t_s},
        "idle_s": 0.25 * t_s,
    }


def test_telemetry_series_carries_the_time_use_counters_at_each_buckets_end(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([_snap("pi-1", float(t), 1, **_busy(float(t))) for t in range(600)])
    tmp_store.add_telemetry([_snap("pi-1", 600.0, 1, uptime_s="not a number")])  # ignored, not failed
    points = tmp_store.telemetry_series("pi-1", 0.0, 600.0, max_points=10)
    assert len(points) == 10
    first, last = points[0], points[-1]
    assert (first.uptime_s, first.inference_busy_s, first.idle_s) == (59.0, 14.75, 14.75)
    assert last.uptime_s == 599.0 and last.training_busy_s == 299.5
    assert last.training_busy_s_per_task == {"a": 0.125 * 599, "b": 0.375 * 599}
    plain = tmp_store.telemetry_series("pi-1", 0.0, 0.5)  # exact points, one snapshot each
    assert plain[0].uptime_s == 0.0 and plain[0].training_busy_s_per_task == {"a": 0.0, "b": 0.0}


def test_telemetry_before_finds_each_devices_snapshot_a_window_earlier(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([_snap("pi-1", float(t), t) for t in range(0, 100, 10)])
    tmp_store.add_telemetry([_snap("pi-2", 95.0, 1)])
    found = tmp_store.telemetry_before({"pi-1": 45.0, "pi-2": 50.0, "nobody": 10.0})
    assert {d: r.t_s for d, r in found.items()} == {"pi-1": 40.0, "pi-2": 95.0}  # pi-2: its oldest


def test_fleet_series_counts_devices_and_worst_p99_over_slo(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([_snap(f"pi-{d}", float(t), d) for d in range(3) for t in range(100)])
    points = tmp_store.telemetry_fleet_series(0.0, 100.0, max_points=10)
    assert len(points) == 10
    assert all(p.devices == 3 for p in points)
    assert points[0].p99_over_slo_max == pytest.approx((3.0 + 2) / 100.0)
    assert points[0].backlog_max == 2
    with pytest.raises(ConfigError, match="until_s > since_s"):
        tmp_store.telemetry_fleet_series(5.0, 5.0)


def test_prune_telemetry_deletes_only_older_rows(tmp_store: RunStore) -> None:
    tmp_store.add_telemetry([_snap("pi-1", float(t), 0) for t in range(10)])
    assert tmp_store.prune_telemetry(before_s=7.0) == 7
    assert [d.rows for d in tmp_store.telemetry_devices()] == [3]


def test_telemetry_row_rejects_a_missing_device_or_bad_time() -> None:
    with pytest.raises(ConfigError, match="device"):
        TelemetryRow("", 1.0)
    with pytest.raises(ConfigError, match="finite"):
        TelemetryRow("pi-1", math.nan)
