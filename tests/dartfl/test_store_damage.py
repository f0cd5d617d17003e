"""A damaged run store is said in one line (what, where, how to recover) by every reader and
writer, and a reader still reads what is not damaged. Each case breaks a copy of one healthy
store (tests/store_fixtures.py) the way a disk, a hand edit or another program would."""

from __future__ import annotations

import hashlib
import logging
import math
import sqlite3
from dataclasses import astuple
from pathlib import Path

import pytest

from dartfl.errors import ConfigError, InputError
from dartfl.store import (
    SCHEMA_VERSION,
    RunStore,
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    StoreTooNewError,
    StoreWriteError,
)
from dartfl.store import connection as store_connection
from tests.store_fixtures import damaged_copy, healthy_store, locked_copy


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return healthy_store(tmp_path_factory.mktemp("template") / "runs.sqlite")


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("read_only", [True, False])
def test_a_truncated_store_is_named_damaged_with_how_to_keep_what_reads(
    template: Path, tmp_path: Path, read_only: bool
) -> None:
    # A writer opening it raised sqlite3.DatabaseError "database disk image is malformed".
    path = damaged_copy(template, tmp_path, "truncated")
    with pytest.raises(StoreDamagedError) as caught:
        RunStore(path, read_only=read_only).close()
    line = _one_line(caught.value)
    assert line.startswith(f"{path} is damaged (database disk image is malformed)")
    assert f"sqlite3 {path} .dump" in line and "restore a backup" in line
    assert isinstance(caught.value, InputError)  # the CLI exits 2: the file passed is unusable


@pytest.mark.parametrize("read_only", [True, False])
def test_a_file_that_is_not_sqlite_is_named_and_left_alone(
    template: Path, tmp_path: Path, read_only: bool
) -> None:
    path = damaged_copy(template, tmp_path, "not-sqlite")
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="is not an SQLite database, so not a run store; pass --store"):
        RunStore(path, read_only=read_only)
    assert path.read_bytes() == before


def test_a_reader_names_a_missing_table_and_still_reads_the_others(template: Path, tmp_path: Path) -> None:
    path = damaged_copy(template, tmp_path, "missing-table")
    with RunStore(path, read_only=True) as store:
        assert len(store.list_runs()) == 4
        with pytest.raises(StoreDamagedError) as caught:
            store.telemetry_latest()
    assert _one_line(caught.value) == (
        f"{path}: table telemetry is missing (schema version {SCHEMA_VERSION} has it): a dartfl command "
        "that records into this store (e.g. `dartfl record`) recreates it empty, or restore a backup"
    )


def test_a_writer_recreates_a_missing_table_empty_and_warns(
    template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `dartfl record` on such a store failed at its first flush: OperationalError no such table.
    path = damaged_copy(template, tmp_path, "missing-table")
    with caplog.at_level(logging.WARNING, "dartfl.store.connection"), RunStore(path) as store:
        assert store.telemetry_devices() == []
        assert len(store.list_runs()) == 4
    assert "table telemetry was missing; recreated it empty" in caplog.text


def test_a_newer_schema_reads_what_this_version_knows_and_refuses_writing(
    template: Path, tmp_path: Path
) -> None:
    path = damaged_copy(template, tmp_path, "newer-schema")
    newer = SCHEMA_VERSION + 1
    with RunStore(path, read_only=True) as store:
        assert store.notice is not None
        assert f"schema version {newer}, newer than this dartfl's {SCHEMA_VERSION}" in store.notice
        assert f"install a dartfl that knows schema version {newer}" in store.notice
        assert [r.label for r in store.list_runs(kind="sim")] == ["steady on pi5", "bursty on pi4"]
        assert store.results(1)["dart"]["slo_attainment"] == 0.99
        assert len(store.telemetry_latest()) == 3
        with pytest.raises(StoreTooNewError, match="writing refused"):
            store.start_run("sim", None, {})
    before = _digest(path)
    with pytest.raises(StoreTooNewError) as caught:
        RunStore(path)
    assert f"install a dartfl that knows schema version {newer}" in _one_line(caught.value)
    assert _digest(path) == before


def test_a_run_whose_config_is_not_json_still_lists_and_says_how_to_recover(
    template: Path, tmp_path: Path
) -> None:
    # `runs list` died with JSONDecodeError on the first such run.
    path = damaged_copy(template, tmp_path, "malformed-json")
    with RunStore(path, read_only=True) as store:
        runs = {r.run_id: r for r in store.list_runs()}
        got = store.get_run(1)
    assert set(runs) == {1, 2, 3, 4}
    assert runs[1].config == {} and runs[2].config == {"profile_name": "pi4"}
    assert got is not None and got.damage == runs[1].damage
    (line,) = runs[1].damage
    assert line == (
        f"{path}: run 1's config is not JSON (Expecting property name enclosed in double quotes at "
        f"character 23): delete the run with `dartfl runs delete 1 --store {path}` or restore a backup"
    )
    assert runs[2].damage == ()


def test_a_result_that_is_not_json_names_run_and_policy(template: Path, tmp_path: Path) -> None:
    path = damaged_copy(template, tmp_path, "malformed-json")
    with RunStore(path, read_only=True) as store:
        assert store.results(1)["dart"]["slo_attainment"] == 0.99  # its config is damaged, not these
        with pytest.raises(StoreDamagedError) as caught:
            store.results(2)
    line = _one_line(caught.value)
    assert line.startswith(f"{path}: run 2's result for policy 'dart' is not JSON (")
    assert line.endswith(f"delete the run with `dartfl runs delete 2 --store {path}` or restore a backup")


def test_a_snapshot_that_is_not_json_is_named_and_series_skip_damaged_rows(
    template: Path, tmp_path: Path
) -> None:
    # json_each on a malformed payload or task_shares failed the whole query ("malformed JSON").
    path = damaged_copy(template, tmp_path, "malformed-json")
    with RunStore(path, read_only=True) as store:
        with pytest.raises(
            StoreDamagedError, match=r"the telemetry snapshot of 'dev-001' at t_s=.* is not JSON"
        ):
            store.telemetry_latest()
        damage: list[str] = []
        latest = {row.device: row.t_s for row in store.telemetry_latest(damage=damage)}
        devices = {d.device: d.last_t_s for d in store.telemetry_devices()}
        points = store.telemetry_series("dev-001")
        decisions = store.decisions(1, "dart")
    # The fleet still reads: dev-001 by its newest snapshot that reads, the damage named.
    assert latest == {**devices, "dev-001": devices["dev-001"] - 1.0}
    (line,) = damage
    assert line.startswith(f"{path}: the telemetry snapshot of 'dev-001' at t_s={devices['dev-001']!r}")
    assert f"""`sqlite3 {path} "DELETE FROM telemetry WHERE device = 'dev-001' AND t_s = """ in line
    assert len(points) == 120 and points[-1].task_shares == {}  # the damaged one adds no shares
    assert points[0].task_shares  # the others still do
    assert len(decisions) == 200
    assert sum(1 for d in decisions if d.task_shares == ()) == pytest.approx(200 / 3, abs=2)


def test_text_in_a_numeric_column_reads_as_missing_and_a_text_time_is_named(
    template: Path, tmp_path: Path
) -> None:
    # SQLite's AVG read 'most' as 0 (a bucket's attainment halved), MAX returned 'lots' to the
    # charts, and a t_s of 'late' sorted above every time: the device's newest "snapshot",
    # which failed the Fleet page with a TypeError.
    path = damaged_copy(template, tmp_path, "text-in-numbers")
    with RunStore(template, read_only=True) as store:
        want_devices = {d.device: d for d in store.telemetry_devices()}
        want_points = store.telemetry_series("dev-001", max_points=40)
        end = want_devices["dev-001"].last_t_s
        want_fleet = store.telemetry_fleet_series(end - 120, end, max_points=40)
    with RunStore(path, read_only=True) as store:
        devices = {d.device: d for d in store.telemetry_devices()}
        damage: list[str] = []
        latest = {row.device: row.t_s for row in store.telemetry_latest(damage=damage)}
        points = store.telemetry_series("dev-001", max_points=40)
        fleet = store.telemetry_fleet_series(end - 120, end, max_points=40)
        before = store.telemetry_before({"dev-002": math.inf})
    dev2 = want_devices["dev-002"]
    assert devices["dev-002"].last_t_s < dev2.last_t_s and devices["dev-002"].rows == dev2.rows - 1
    assert latest["dev-002"] == devices["dev-002"].last_t_s == before["dev-002"].t_s
    (line,) = damage
    assert line.startswith(f"{path}: 1 telemetry snapshot(s) of 'dev-002' hold a t_s that is not a time")
    assert "typeof(t_s) NOT IN ('integer', 'real')" in line
    # The damaged bucket's statistics come from its other snapshots; no text reaches a chart.
    changed = [(w, p) for w, p in zip(want_points, points, strict=True) if w != p]
    ((bucket_was, bucket),) = changed
    assert bucket.count == bucket_was.count
    for name in ("backlog_max", "p99_ms", "slo_attainment", "slo_attainment_min"):
        assert isinstance(getattr(bucket, name), (int, float)), name
    assert bucket.slo_attainment == pytest.approx(bucket_was.slo_attainment, abs=0.2)
    for point in fleet:
        assert all(isinstance(v, (int, float)) or v is None for v in astuple(point))
    assert len(fleet) == len(want_fleet)


@pytest.mark.parametrize("read_only", [True, False])
def test_a_locked_store_says_so_instead_of_hanging_or_a_traceback(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    monkeypatch.setattr(store_connection, "READ_BUSY_TIMEOUT_S", 0.1)
    monkeypatch.setattr(store_connection, "BUSY_TIMEOUT_S", 0.1)
    with locked_copy(template, tmp_path) as path, pytest.raises(StoreBusyError) as caught:
        RunStore(path, read_only=read_only)
    assert _one_line(caught.value) == (
        f"{path} is locked by another process (waited 0.1 s): retry once it is done; "
        f"`fuser -v {path}` shows which process holds it"
    )
    with RunStore(path, read_only=read_only) as store:  # the lock gone, it reads again
        assert len(store.list_runs()) == 4


def test_reading_never_writes_not_even_to_migrate(template: Path, tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    path.write_bytes(template.read_bytes())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 1")
    conn.execute("DROP TABLE telemetry")
    conn.commit()
    conn.close()
    before = _digest(path)
    with RunStore(path, read_only=True) as store:
        assert len(store.list_runs()) == 4
        with pytest.raises(StoreDamagedError, match="has schema version 1, which has no telemetry table yet"):
            store.telemetry_devices()
        with pytest.raises(StoreWriteError, match="opened for reading only"):
            store.delete_run(1)
    assert _digest(path) == before
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_a_reader_never_creates_a_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        RunStore(tmp_path / "none.sqlite", read_only=True)
    assert not (tmp_path / "none.sqlite").exists()


def test_delete_run_removes_a_damaged_run_with_its_rows(template: Path, tmp_path: Path) -> None:
    path = damaged_copy(template, tmp_path, "malformed-json")
    with RunStore(path) as store:
        assert store.delete_run(1) == (2, 400)
        assert [r.run_id for r in store.list_runs()] == [4, 3, 2]
        assert all(not r.damage for r in store.list_runs())
        assert store.decisions(1, "dart") == []
        with pytest.raises(ConfigError, match="no run 1 in run store"):
            store.delete_run(1)


def test_every_store_error_is_a_dartfl_error_with_its_exit_code() -> None:
    # main() maps InputError to exit code 2 and other DartflErrors to 1.
    assert issubclass(StoreDamagedError, InputError) and issubclass(StoreTooNewError, InputError)
    assert not issubclass(StoreBusyError, InputError) and not issubclass(StoreWriteError, InputError)
    assert all(issubclass(e, StoreError) for e in (StoreDamagedError, StoreBusyError, StoreWriteError))
