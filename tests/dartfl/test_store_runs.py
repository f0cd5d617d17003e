"""The run store's runs: round trips with an injected clock, listing, results with numpy and
non-finite values, decisions and their downsampling, WAL mode with foreign keys, a reader
beside a writer, and bad arguments that name the valid values."""

from __future__ import annotations

import math
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.store import SCHEMA_VERSION, DecisionRow, RunStore


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


def test_bad_kind_status_and_max_points_name_the_valid_values(tmp_store: RunStore) -> None:
    with pytest.raises(ConfigError, match="sim, replay, fl, dc, fleet"):
        tmp_store.start_run("bogus", None, {})
    run_id = tmp_store.start_run("sim", None, {})
    with pytest.raises(ConfigError, match="'ok' or 'failed'"):
        tmp_store.finish_run(run_id, "running")
    with pytest.raises(ConfigError, match="max_points"):
        tmp_store.decisions(run_id, "dart", max_points=0)
