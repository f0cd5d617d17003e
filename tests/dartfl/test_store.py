from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.paths import default_store_path
from dartfl.store import (
    SCHEMA_VERSION,
    DecisionRow,
    RunStore,
    StoreBusyError,
    StoreTooNewError,
    TelemetryRow,
)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        self.now_s += 1.0
        return self.now_s


def _rows(n: int, period_s: float = 0.25, burst_at: int | None = None) -> list[DecisionRow]:
    return [
        DecisionRow(
            t_s=i * period_s,
            backlog=1000 if i == burst_at else i % 7,
            inference_share=(i % 4) / 4,
            microbatch=8,
            max_batch=32,
            task_shares=(0.25, 0.75),
            trained_samples=2,
            latency_p99_s=None if i % 2 else 0.01 * (i % 5),
        )
        for i in range(n)
    ]


def test_run_round_trip_with_injected_clock(tmp_path: Path) -> None:
    with RunStore(tmp_path / "s.sqlite", clock=FakeClock()) as store:
        run_id = store.start_run("sim", "demo", {"rate": 50.0, "policies": ["dart", "static:0.5"]})
        run = store.get_run(run_id)
        assert run is not None
        assert (run.kind, run.label, run.status, run.created_s, run.finished_s) == (
            "sim",
            "demo",
            "running",
            1001.0,
            None,
        )
        assert run.config == {"rate": 50.0, "policies": ["dart", "static:0.5"]}
        store.finish_run(run_id, "failed")
        done = store.get_run(run_id)
        assert done is not None
        assert (done.status, done.finished_s, done.duration_s) == ("failed", 1002.0, 1.0)
        assert store.get_run(run_id + 1) is None


def test_store_persists_across_reopen_and_keeps_one_schema_row(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with RunStore(path) as store:
        run_id = store.start_run("fl", None, {})
        store.add_result(run_id, "dart", {"slo_attainment": 0.99})
    with RunStore(path) as store:
        assert store.results(run_id) == {"dart": {"slo_attainment": 0.99}}
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


def test_list_runs_newest_first_filtered_and_limited(tmp_store: RunStore) -> None:
    ids = [tmp_store.start_run(kind, f"run{i}", {}) for i, kind in enumerate(["sim", "dc", "sim", "sim"])]
    assert [r.run_id for r in tmp_store.list_runs()] == ids[::-1]
    assert [r.run_id for r in tmp_store.list_runs(kind="sim", limit=2)] == [ids[3], ids[2]]
    assert [r.run_id for r in tmp_store.list_runs(kind="dc")] == [ids[1]]


def test_results_round_trip_replace_and_policy_list(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("sim", None, {})
    tmp_store.add_result(run_id, "static:0.5", {"p99_s": 0.3, "per_task": {"fashion": {"p99_s": 0.2}}})
    tmp_store.add_result(run_id, "dart", {"p99_s": 0.5})
    tmp_store.add_result(run_id, "dart", {"p99_s": 0.1})  # replaces
    assert tmp_store.results(run_id) == {
        "dart": {"p99_s": 0.1},
        "static:0.5": {"p99_s": 0.3, "per_task": {"fashion": {"p99_s": 0.2}}},
    }
    run = tmp_store.get_run(run_id)
    assert run is not None
    assert run.policies == ("dart", "static:0.5")


def test_numpy_values_and_non_finite_floats_become_plain_json(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("sim", None, {"seed": np.int64(3), "mix": np.array([0.5, 0.5])})
    tmp_store.add_result(
        run_id, "dart", {"p99_s": np.float64(0.25), "recovery_s": math.inf, "n": np.int32(7), "x": math.nan}
    )
    run = tmp_store.get_run(run_id)
    assert run is not None
    assert run.config == {"seed": 3, "mix": [0.5, 0.5]}
    assert tmp_store.results(run_id)["dart"] == {"p99_s": 0.25, "recovery_s": None, "n": 7, "x": None}


def test_unstorable_config_value_is_a_config_error(tmp_store: RunStore) -> None:
    with pytest.raises(ConfigError, match="cannot store a value of type object"):
        tmp_store.start_run("sim", None, {"bad": object()})


def test_decisions_round_trip_exactly_when_below_max_points(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("sim", None, {})
    rows = _rows(10)
    assert tmp_store.add_decisions(run_id, "dart", reversed(rows)) == 10
    points = tmp_store.decisions(run_id, "dart")
    assert [p.t_s for p in points] == [r.t_s for r in rows]
    assert [p.backlog_max for p in points] == [r.backlog for r in rows]
    assert [p.inference_share for p in points] == [r.inference_share for r in rows]
    assert [p.latency_p99_s for p in points] == [r.latency_p99_s for r in rows]
    assert all(p.count == 1 and p.task_shares == (0.25, 0.75) for p in points)
    assert tmp_store.decisions(run_id, "other") == []


def test_downsampling_bounds_points_and_preserves_max_backlog_and_totals(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("sim", None, {})
    rows = _rows(2401, burst_at=1234)
    tmp_store.add_decisions(run_id, "dart", rows)
    points = tmp_store.decisions(run_id, "dart", max_points=100)
    assert 0 < len(points) <= 100
    assert max(p.backlog_max for p in points) == 1000
    assert sum(p.count for p in points) == len(rows)
    assert sum(p.trained_samples for p in points) == sum(r.trained_samples for r in rows)
    assert [p.t_s for p in points] == sorted(p.t_s for p in points)
    assert points[0].t_s == 0.0
    for p in points:
        assert p.task_shares == pytest.approx((0.25, 0.75))
        assert 0.0 <= p.inference_share <= 1.0
    assert max(p.latency_p99_s or 0.0 for p in points) == pytest.approx(0.04)


def test_downsampling_when_all_decisions_share_one_time(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("sim", None, {})
    tmp_store.add_decisions(run_id, "dart", _rows(50, period_s=0.0))
    (point,) = tmp_store.decisions(run_id, "dart", max_points=10)
    assert point.count == 50


def test_store_runs_in_wal_mode_with_foreign_keys(tmp_store: RunStore) -> None:
    with sqlite3.connect(tmp_store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with pytest.raises(ConfigError, match="no run 42"):
        tmp_store.add_decisions(42, "dart", _rows(1))
    with pytest.raises(ConfigError, match="no run 42"):
        tmp_store.add_result(42, "dart", {})
    with pytest.raises(ConfigError, match="no run 42"):
        tmp_store.finish_run(42)


def test_reader_sees_consistent_data_while_another_store_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    writer = RunStore(path)
    run_id = writer.start_run("sim", None, {})
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for batch in range(40):
                writer.add_decisions(run_id, "dart", _rows(50)[: batch % 50 + 1])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    with RunStore(path) as reader:
        thread.start()
        reads = 0
        while not done.is_set() or reads == 0:
            points = reader.decisions(run_id, "dart", max_points=20)
            assert len(points) <= 20
            reads += 1
        thread.join()
        expected = sum(b % 50 + 1 for b in range(40))
        assert sum(p.count for p in reader.decisions(run_id, "dart", max_points=20)) == expected
    writer.close()
    assert errors == []


def test_store_directory_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"cannot create the run store directory .*file.*DARTFL_STORE"):
        RunStore(blocker / "sub" / "runs.sqlite")


def test_store_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        RunStore(tmp_path)


def test_file_that_is_not_a_database_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not an sqlite database at all" * 100)
    with pytest.raises(ConfigError, match=r"junk\.sqlite is not an SQLite database, so not a run store"):
        RunStore(path)


def test_other_sqlite_database_is_not_taken_for_a_store(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    with pytest.raises(ConfigError, match="tables: users"):
        RunStore(path)


def test_store_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    RunStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreTooNewError, match="newer than this dartfl's 2: writing refused"):
        RunStore(path)


def test_bad_kind_status_and_max_points_name_the_valid_values(tmp_store: RunStore) -> None:
    with pytest.raises(ConfigError, match="sim, replay, fl, dc, fleet"):
        tmp_store.start_run("bogus", None, {})
    run_id = tmp_store.start_run("sim", None, {})
    with pytest.raises(ConfigError, match="'ok' or 'failed'"):
        tmp_store.finish_run(run_id, "running")
    with pytest.raises(ConfigError, match="max_points"):
        tmp_store.decisions(run_id, "dart", max_points=0)


def test_default_store_path_prefers_env_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DARTFL_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("DARTFL_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "dartfl" / "runs.sqlite"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "dartfl" / "runs.sqlite"


def test_suite_never_uses_the_users_data_dir() -> None:
    assert "dartfl-store" in str(default_store_path())


def test_processes_creating_one_new_store_at_once_agree_on_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "new" / "runs.sqlite"
    script = "import sys; from dartfl.store import RunStore; RunStore(sys.argv[1]).close()"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path)]) for _ in range(6)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


# -- telemetry (schema version 2) ------------------------------------------------------------


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


def test_a_commit_that_fails_rolls_back_and_the_next_write_succeeds(tmp_path: Path) -> None:
    # Outside WAL mode (a file system without shared memory) a reader's shared lock makes
    # COMMIT fail with SQLITE_BUSY. The failed transaction must be rolled back, or the store
    # keeps its write lock and every later write fails.
    path = tmp_path / "s.sqlite"
    store = RunStore(path)
    run = store.start_run("fl", "x", {})
    store._conn.execute("PRAGMA busy_timeout=50")
    assert store._conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM runs").fetchall()
    with pytest.raises(StoreBusyError, match="is locked by another process"):
        store.add_result(run, "dart", {"a": 1})
    assert not store._conn.in_transaction
    reader.execute("COMMIT")
    reader.close()
    store.add_result(run, "dart", {"a": 2})
    assert store.results(run)["dart"]["a"] == 2
    store.close()
