"""Run stores damaged in each way a real one gets damaged, for the store, CLI and dashboard tests.

`healthy_store` writes a store with runs of every kind and device telemetry; each `DAMAGE`
function then breaks a copy of it the way a disk, a hand edit or another program would. The
file is closed (its WAL checkpointed into it) before it is damaged.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dartfl.store import SCHEMA_VERSION, DecisionRow, RunStore
from dashboard import synthetic

SIM_LABELS = ("bursty on pi4", "steady on pi5")  # run ids 1 and 2


def healthy_store(path: Path, *, telemetry_end_s: float | None = None) -> Path:
    """Two sim runs of two policies with decisions (ids 1, 2), an FL run (3), a datacenter run
    (4), and 120 s of telemetry of three devices ending at `telemetry_end_s` (default now)."""
    with RunStore(path) as store:
        for label in SIM_LABELS:
            run_id = store.start_run("sim", label, {"profile_name": "pi4"})
            for policy, slo in (("dart", 0.99), ("inference-first:4", 0.97)):
                store.add_result(run_id, policy, {"slo_attainment": slo, "p99_latency_s": 0.2})
                rows = [DecisionRow(t * 0.25, t % 9, 0.6, 8, 32, (0.5, 0.5), 4) for t in range(200)]
                store.add_decisions(run_id, policy, rows)
            store.finish_run(run_id)
        synthetic.record_fl_run(store)
        synthetic.record_dc_run(store, seconds=120)
        end = time.time() if telemetry_end_s is None else telemetry_end_s
        synthetic.fill_telemetry(store, devices=3, seconds=120, end_s=end)
    return path


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def truncate(path: Path) -> None:
    """A copy cut short (a full disk, an interrupted `cp`): half the file is gone."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


def not_sqlite(path: Path) -> None:
    """Another file where the store should be (a CSV passed as --store)."""
    path.write_text("time_s,task\n0.1,digits\n")


def without_telemetry(path: Path) -> None:
    """A table dropped by hand or by another program."""
    _sql(path, "DROP TABLE telemetry")


def newer_schema(path: Path) -> None:
    """What a newer dartfl would leave: a higher version, a new table and a new column."""
    _sql(
        path,
        f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}",
        "CREATE TABLE artifacts (run_id INTEGER, path TEXT)",
        "ALTER TABLE runs ADD COLUMN tags TEXT",
    )


def malformed_json(path: Path) -> None:
    """JSON columns edited by hand: run 1's config, run 2's dart result, run 3's (FL) results,
    the newest snapshot of dev-001, and some of run 1's decisions' task shares."""
    _sql(
        path,
        'UPDATE runs SET config = \'{"profile_name": "pi4",,}\' WHERE run_id = 1',
        "UPDATE results SET metrics = '{\"slo_attainment\": 0.9' WHERE run_id = 2 AND policy = 'dart'",
        "UPDATE results SET metrics = 'not json' WHERE run_id = 3",
        "UPDATE telemetry SET payload = '{\"device\": ' WHERE device = 'dev-001' AND t_s = "
        "(SELECT MAX(t_s) FROM telemetry WHERE device = 'dev-001')",
        "UPDATE decisions SET task_shares = '[0.5,' WHERE run_id = 1 AND rowid % 3 = 0",
    )


def text_in_numbers(path: Path) -> None:
    """Numeric telemetry columns written as text by hand (SQLite's REAL affinity keeps text that
    does not read as a number): headline columns of dev-001's snapshot 30 s before its newest,
    and the time of dev-002's newest."""
    _sql(
        path,
        "UPDATE telemetry SET backlog = 'lots', p99_ms = 'slow', slo_attainment = 'most' "
        "WHERE device = 'dev-001' AND t_s = (SELECT MAX(t_s) - 30 FROM telemetry WHERE device = 'dev-001')",
        "UPDATE telemetry SET t_s = 'late' WHERE device = 'dev-002' AND t_s = "
        "(SELECT MAX(t_s) FROM telemetry WHERE device = 'dev-002')",
    )


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holding the store's lock (exclusive locking mode, a write under way),
    so readers and writers wait for it and time out."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("INSERT INTO runs (kind, created_s, status, config) VALUES ('sim', 1, 'running', '{}')")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "not-sqlite": not_sqlite,
    "missing-table": without_telemetry,
    "newer-schema": newer_schema,
    "malformed-json": malformed_json,
    "text-in-numbers": text_in_numbers,
}


@contextmanager
def locked_copy(template: Path, directory: Path) -> Iterator[Path]:
    """A copy of `template` in `directory` (runs.sqlite), held `locked` while the block runs;
    the lock is gone after it."""
    path = directory / "runs.sqlite"
    shutil.copyfile(template, path)
    with locked(path):
        yield path


def damaged_copy(template: Path, directory: Path, damage: str) -> Path:
    """A copy of `template` in `directory`, damaged by DAMAGE[damage]."""
    path = directory / f"{damage}.sqlite"
    shutil.copyfile(template, path)
    DAMAGE[damage](path)
    return path


__all__ = ["DAMAGE", "SIM_LABELS", "damaged_copy", "healthy_store", "locked", "locked_copy"]
