"""The run store: every run's config, per-period decisions and results in one SQLite file.

One file, WAL mode, so a dashboard or `dartfl runs` can read while a simulation writes. The
schema is in docs/store.md. JSON columns hold strict JSON (non-finite floats become null) so
SQLite's own json functions can query them.

A `RunStore` owns one connection guarded by a lock: one writer thread, any number of reader
threads in this process, and readers in other processes through their own `RunStore`.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from dartfl.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "RUN_KINDS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "DecisionPoint",
    "DecisionRow",
    "FleetPoint",
    "RunInfo",
    "RunStore",
    "TelemetryDevice",
    "TelemetryPoint",
    "TelemetryRow",
    "to_jsonable",
]

SCHEMA_VERSION = 2
RUN_KINDS = ("sim", "replay", "fl", "dc", "fleet")
RUN_STATUSES = ("running", "ok", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id     INTEGER PRIMARY KEY,
    kind       TEXT NOT NULL,
    label      TEXT,
    created_s  REAL NOT NULL,
    finished_s REAL,
    status     TEXT NOT NULL,
    config     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run_id  INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    policy  TEXT NOT NULL,
    metrics TEXT NOT NULL,
    PRIMARY KEY (run_id, policy)
);
CREATE TABLE IF NOT EXISTS decisions (
    run_id          INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    policy          TEXT NOT NULL,
    t_s             REAL NOT NULL,
    backlog         INTEGER NOT NULL,
    inference_share REAL NOT NULL,
    microbatch      INTEGER NOT NULL,
    max_batch       INTEGER NOT NULL,
    task_shares     TEXT NOT NULL,
    trained_samples INTEGER NOT NULL,
    latency_p99_s   REAL
);
CREATE INDEX IF NOT EXISTS decisions_by_time ON decisions (run_id, policy, t_s);
"""

# Forward migrations: MIGRATIONS[v] takes a store from version v - 1 to v. A new store gets
# the version-1 schema above and then every migration, so old and new stores end up alike.
_MIGRATIONS: dict[int, str] = {
    2: """
CREATE TABLE IF NOT EXISTS telemetry (
    device          TEXT NOT NULL,
    t_s             REAL NOT NULL,
    backlog         INTEGER,
    inference_share REAL,
    p50_ms          REAL,
    p95_ms          REAL,
    p99_ms          REAL,
    slo_ms          REAL,
    slo_attainment  REAL,
    train_samples   INTEGER,
    payload         TEXT NOT NULL
);
-- Unique: a QoS 1 duplicate of a snapshot is stored once (INSERT OR IGNORE).
CREATE UNIQUE INDEX IF NOT EXISTS telemetry_by_device ON telemetry (device, t_s);
CREATE INDEX IF NOT EXISTS telemetry_by_time ON telemetry (t_s);
""",
}

_BUSY_TIMEOUT_S = 10.0  # how long a writer waits for another one before giving up
_FIX = "pass --store PATH or set DARTFL_STORE to a writable file path"


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One control period of one policy, as the executor saw and decided it.

    `backlog` is the total queued requests at `t_s`; `trained_samples` counts the samples
    trained during the period that starts at `t_s` (so sums over periods are totals);
    `latency_p99_s` is the p99 latency of requests finished in the period (None if none).
    """

    t_s: float
    backlog: int
    inference_share: float
    microbatch: int
    max_batch: int
    task_shares: tuple[float, ...]
    trained_samples: int
    latency_p99_s: float | None = None

    def __post_init__(self) -> None:
        if self.backlog < 0 or self.trained_samples < 0:
            raise ConfigError(
                f"backlog and trained_samples must be >= 0, got {self.backlog}, {self.trained_samples}"
            )
        if not math.isfinite(self.t_s):
            raise ConfigError(f"decision time t_s must be finite, got {self.t_s}")


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    """A bucket of consecutive decisions (one decision when not downsampled).

    `t_s` is the first decision time in the bucket; `backlog_max` keeps bursts visible;
    shares, microbatch and backlog_mean are bucket means; `trained_samples` is the bucket sum;
    `latency_p99_s` the worst period p99 in the bucket.
    """

    t_s: float
    count: int
    backlog_max: int
    backlog_mean: float
    inference_share: float
    microbatch: float
    max_batch: int
    task_shares: tuple[float, ...]
    trained_samples: int
    latency_p99_s: float | None


@dataclass(frozen=True, slots=True)
class TelemetryRow:
    """One telemetry snapshot of one device, as published on MQTT (docs/protocol.md).

    `t_s` is the device's Unix time; the columns are the snapshot's headline numbers (None
    when the snapshot lacks them) and `payload` the whole snapshot, for per-task detail.
    `backlog` is the total over tasks; `train_samples` the device's lifetime counter.
    """

    device: str
    t_s: float
    backlog: int | None = None
    inference_share: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    slo_ms: float | None = None
    slo_attainment: float | None = None
    train_samples: int | None = None
    payload: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"telemetry device must be a non-empty string, got {self.device!r}")
        if not math.isfinite(self.t_s):
            raise ConfigError(f"telemetry time t_s must be finite, got {self.t_s}")


@dataclass(frozen=True, slots=True)
class TelemetryDevice:
    """A device with recorded telemetry: its time span and row count."""

    device: str
    first_t_s: float
    last_t_s: float
    rows: int


@dataclass(frozen=True, slots=True)
class TelemetryPoint:
    """A bucket of consecutive snapshots of one device (one snapshot when not downsampled).

    `t_s` is the first snapshot time in the bucket; `backlog_max` keeps bursts visible;
    shares, backlog_mean and slo_attainment are means, `slo_attainment_min` the worst window;
    latency percentiles are the bucket's worst; `train_samples` and `train_samples_per_task`
    (lifetime counters) the bucket's largest; `task_shares` per-task means, by task name.
    """

    t_s: float
    count: int
    backlog_max: int | None
    backlog_mean: float | None
    inference_share: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    slo_ms: float | None
    slo_attainment: float | None
    slo_attainment_min: float | None
    train_samples: int | None
    task_shares: Mapping[str, float]
    train_samples_per_task: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class FleetPoint:
    """A time bucket over all devices: how many reported, their mean and worst SLO attainment,
    the worst p99 relative to its SLO (p99_ms / slo_ms), and the largest backlog."""

    t_s: float
    devices: int
    slo_attainment: float | None
    slo_attainment_min: float | None
    p99_over_slo_max: float | None
    backlog_max: int | None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of `runs`, plus the policies that have results."""

    run_id: int
    kind: str
    label: str | None
    created_s: float
    finished_s: float | None
    status: str
    config: Mapping[str, Any]
    policies: tuple[str, ...]

    @property
    def duration_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.created_s

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "created_s": self.created_s,
            "finished_s": self.finished_s,
            "policies": list(self.policies),
            "config": dict(self.config),
        }


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays unwrapped, non-finite floats as None."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    for attr in ("item", "tolist"):  # numpy scalars, then arrays
        convert = getattr(value, attr, None)
        if callable(convert):
            try:
                return to_jsonable(convert())
            except (TypeError, ValueError):
                continue  # e.g. .item() on a multi-element array
    raise ConfigError(f"cannot store a value of type {type(value).__name__} as JSON: {value!r}")


def _dumps(value: Any) -> str:
    return json.dumps(to_jsonable(value), allow_nan=False, separators=(",", ":"))


class RunStore:
    """An open run store. Use as a context manager, or call `close()`."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path).expanduser()
        self._clock = clock  # created_s / finished_s come from here (tests pass a fake one)
        self._lock = threading.Lock()
        self._conn = self._connect()
        try:
            self._enable_wal()
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            # One write transaction, so two processes creating the same store cannot interleave.
            with self._transaction() as conn:
                self._create_schema(conn)
        except ConfigError:
            self._conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ConfigError(f"{self.path} is not a usable DART-FL run store ({exc}); {_FIX}") from exc

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the run store directory {self.path.parent}: {exc}; {_FIX}"
            ) from exc
        if self.path.is_dir():
            raise ConfigError(f"run store {self.path} is a directory, expected a file; {_FIX}")
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (see _transaction).
            return sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open run store {self.path}: {exc}; {_FIX}") from exc

    def _enable_wal(self) -> None:
        # Switching a new file to WAL fails at once (no busy wait) while another process that
        # opens the same new file holds a lock, so retry for as long as a busy wait would.
        deadline = time.monotonic() + _BUSY_TIMEOUT_S
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        if mode != "wal":  # e.g. a file system without shared memory
            log.warning("run store %s runs in %s journal mode, not WAL: readers may block", self.path, mode)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "schema_version" not in tables:
            raise ConfigError(
                f"{self.path} is an SQLite database of something else (tables: "
                f"{', '.join(sorted(tables))}), not a DART-FL run store; {_FIX}"
            )
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        if row[0] is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (1)")
            version = 1
        else:
            version = int(row[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"run store {self.path} has schema version {version}, newer than this dartfl's "
                f"{SCHEMA_VERSION}; upgrade dartfl or {_FIX}"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = ?", (target,))
            if row[0] is not None:
                log.info("run store %s migrated to schema version %d", self.path, target)

    @contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute(f"BEGIN {mode}")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------

    def start_run(self, kind: str, label: str | None, config: Mapping[str, Any]) -> int:
        """Record a new run in status 'running'; returns its run_id."""
        if kind not in RUN_KINDS:
            raise ConfigError(f"unknown run kind {kind!r}; expected one of {', '.join(RUN_KINDS)}")
        with self._transaction() as conn:
            row = conn.execute(
                "INSERT INTO runs (kind, label, created_s, status, config) "
                "VALUES (?, ?, ?, 'running', ?) RETURNING run_id",
                (kind, label, self._clock(), _dumps(config)),
            ).fetchone()
        return int(row[0])

    def add_decisions(self, run_id: int, policy: str, rows: Iterable[DecisionRow]) -> int:
        """Append decisions in one transaction; returns how many were written."""
        params = [
            (
                run_id,
                policy,
                r.t_s,
                r.backlog,
                r.inference_share,
                r.microbatch,
                r.max_batch,
                _dumps(r.task_shares),
                r.trained_samples,
                r.latency_p99_s,
            )
            for r in rows
        ]
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            conn.executemany("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", params)
        return len(params)

    def add_result(self, run_id: int, policy: str, metrics: Mapping[str, Any]) -> None:
        """Store (or replace) the metrics of one policy in a run."""
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            conn.execute(
                "INSERT OR REPLACE INTO results (run_id, policy, metrics) VALUES (?, ?, ?)",
                (run_id, policy, _dumps(metrics)),
            )

    def finish_run(self, run_id: int, status: str = "ok") -> None:
        if status not in RUN_STATUSES[1:]:
            raise ConfigError(f"a run finishes with status 'ok' or 'failed', got {status!r}")
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            conn.execute(
                "UPDATE runs SET status = ?, finished_s = ? WHERE run_id = ?", (status, self._clock(), run_id)
            )

    def _require_run(self, conn: sqlite3.Connection, run_id: int) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise ConfigError(f"no run {run_id} in run store {self.path}; list runs with `dartfl runs list`")

    # -- reading ------------------------------------------------------------------------------

    _RUN_COLUMNS = (
        "r.run_id, r.kind, r.label, r.created_s, r.finished_s, r.status, r.config, "
        "(SELECT group_concat(policy, char(10)) FROM "
        "(SELECT policy FROM results WHERE run_id = r.run_id ORDER BY policy))"
    )

    @staticmethod
    def _run_info(row: tuple[Any, ...]) -> RunInfo:
        policies = tuple(row[7].split("\n")) if row[7] else ()
        return RunInfo(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), policies)

    def list_runs(self, kind: str | None = None, limit: int = 50) -> list[RunInfo]:
        """The newest `limit` runs, newest first, optionally of one kind."""
        where, params = ("WHERE r.kind = ?", [kind]) if kind is not None else ("", [])
        sql = f"SELECT {self._RUN_COLUMNS} FROM runs r {where} ORDER BY r.run_id DESC LIMIT ?"
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
        return [self._run_info(row) for row in rows]

    def get_run(self, run_id: int) -> RunInfo | None:
        with self._transaction("DEFERRED") as conn:
            row = conn.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs r WHERE r.run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else self._run_info(row)

    def results(self, run_id: int) -> dict[str, dict[str, Any]]:
        """Metrics per policy, in policy-name order."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(
                "SELECT policy, metrics FROM results WHERE run_id = ? ORDER BY policy", (run_id,)
            ).fetchall()
        return {policy: json.loads(metrics) for policy, metrics in rows}

    def decisions(self, run_id: int, policy: str, max_points: int = 2000) -> list[DecisionPoint]:
        """A policy's decisions in time order, bucketed in SQL to at most `max_points` points.

        Buckets split [first t_s, last t_s] into `max_points` equal time spans; with no more
        rows than `max_points` every row is its own point.
        """
        if max_points < 1:
            raise ConfigError(f"max_points must be >= 1, got {max_points}")
        key = "d.run_id = :run AND d.policy = :policy"
        with self._transaction("DEFERRED") as conn:  # one snapshot for the count and the buckets
            n, t0, t1 = conn.execute(
                f"SELECT COUNT(*), MIN(t_s), MAX(t_s) FROM decisions d WHERE {key}",
                {"run": run_id, "policy": policy},
            ).fetchone()
            if n == 0:
                return []
            width = (t1 - t0) / max_points if t1 > t0 else 1.0
            bucket = (
                "d.rowid"
                if n <= max_points
                else "MIN(CAST((d.t_s - :t0) / :width AS INTEGER), :last)"  # integer division
            )
            args = {"run": run_id, "policy": policy, "t0": t0, "width": width, "last": max_points - 1}
            stats = conn.execute(
                f"SELECT {bucket} AS b, MIN(d.t_s), COUNT(*), MAX(d.backlog), AVG(d.backlog), "
                "AVG(d.inference_share), AVG(d.microbatch), MAX(d.max_batch), SUM(d.trained_samples), "
                f"MAX(d.latency_p99_s) FROM decisions d WHERE {key} GROUP BY b ORDER BY MIN(d.t_s), b",
                args,
            ).fetchall()
            shares = conn.execute(
                f"SELECT {bucket} AS b, CAST(j.key AS INTEGER) AS k, AVG(j.value) "
                f"FROM decisions d, json_each(d.task_shares) j WHERE {key} GROUP BY b, k ORDER BY b, k",
                args,
            ).fetchall()
        per_bucket: dict[int, list[float]] = {}
        for b, _k, share in shares:
            per_bucket.setdefault(b, []).append(share)
        return [
            DecisionPoint(
                t_s=t,
                count=count,
                backlog_max=bmax,
                backlog_mean=bmean,
                inference_share=share,
                microbatch=micro,
                max_batch=maxb,
                task_shares=tuple(per_bucket.get(b, ())),
                trained_samples=trained,
                latency_p99_s=p99,
            )
            for b, t, count, bmax, bmean, share, micro, maxb, trained, p99 in stats
        ]

    # -- telemetry ----------------------------------------------------------------------------

    _TELEMETRY_COLUMNS = (
        "device, t_s, backlog, inference_share, p50_ms, p95_ms, p99_ms, slo_ms, slo_attainment, "
        "train_samples, payload"
    )

    def add_telemetry(self, rows: Iterable[TelemetryRow]) -> int:
        """Append snapshots in one transaction; a snapshot already stored (same device and
        t_s, e.g. a QoS 1 redelivery) is skipped. Returns how many were new."""
        params = [
            (
                r.device,
                r.t_s,
                r.backlog,
                to_jsonable(r.inference_share),
                to_jsonable(r.p50_ms),
                to_jsonable(r.p95_ms),
                to_jsonable(r.p99_ms),
                to_jsonable(r.slo_ms),
                to_jsonable(r.slo_attainment),
                r.train_samples,
                _dumps(r.payload or {}),
            )
            for r in rows
        ]
        with self._transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO telemetry ({self._TELEMETRY_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )
            return conn.total_changes - before

    def prune_telemetry(self, before_s: float) -> int:
        """Delete snapshots older than `before_s` (Unix time); returns how many went."""
        with self._transaction() as conn:
            return conn.execute("DELETE FROM telemetry WHERE t_s < ?", (before_s,)).rowcount

    def telemetry_devices(self) -> list[TelemetryDevice]:
        """Devices with recorded telemetry, by name."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(
                "SELECT device, MIN(t_s), MAX(t_s), COUNT(*) FROM telemetry GROUP BY device ORDER BY device"
            ).fetchall()
        return [TelemetryDevice(*row) for row in rows]

    def telemetry_latest(self, since_s: float | None = None) -> list[TelemetryRow]:
        """The newest snapshot of each device (only devices heard from since `since_s`)."""
        where = "" if since_s is None else "WHERE t_s >= :since"
        sql = (
            f"SELECT {self._TELEMETRY_COLUMNS} FROM telemetry t JOIN "
            f"(SELECT device AS d, MAX(t_s) AS m FROM telemetry {where} GROUP BY device) l "
            "ON t.device = l.d AND t.t_s = l.m ORDER BY t.device"
        )
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(sql, {"since": since_s}).fetchall()
        return [self._telemetry_row(row) for row in rows]

    @staticmethod
    def _telemetry_row(row: tuple[Any, ...]) -> TelemetryRow:
        device, t_s, backlog, share, p50, p95, p99, slo, attainment, trained, payload = row
        return TelemetryRow(
            device, t_s, backlog, share, p50, p95, p99, slo, attainment, trained, json.loads(payload)
        )

    def telemetry_series(
        self, device: str, since_s: float | None = None, until_s: float | None = None, max_points: int = 600
    ) -> list[TelemetryPoint]:
        """One device's snapshots in [since_s, until_s] in time order, bucketed in SQL to at
        most `max_points` equal time spans (every snapshot its own point when they fit)."""
        if max_points < 1:
            raise ConfigError(f"max_points must be >= 1, got {max_points}")
        key = "t.device = :device AND t.t_s >= :since AND t.t_s <= :until"
        args: dict[str, Any] = {
            "device": device,
            "since": -math.inf if since_s is None else since_s,
            "until": math.inf if until_s is None else until_s,
        }
        with self._transaction("DEFERRED") as conn:
            n, t0, t1 = conn.execute(
                f"SELECT COUNT(*), MIN(t_s), MAX(t_s) FROM telemetry t WHERE {key}", args
            ).fetchone()
            if n == 0:
                return []
            lo = t0 if since_s is None else since_s
            hi = t1 if until_s is None else until_s
            args.update(t0=lo, width=(hi - lo) / max_points if hi > lo else 1.0, last=max_points - 1)
            bucket = "t.rowid" if n <= max_points else "MIN(CAST((t.t_s - :t0) / :width AS INTEGER), :last)"
            stats = conn.execute(
                f"SELECT {bucket} AS b, MIN(t.t_s), COUNT(*), MAX(t.backlog), AVG(t.backlog), "
                "AVG(t.inference_share), MAX(t.p50_ms), MAX(t.p95_ms), MAX(t.p99_ms), MAX(t.slo_ms), "
                "AVG(t.slo_attainment), MIN(t.slo_attainment), MAX(t.train_samples) "
                f"FROM telemetry t WHERE {key} GROUP BY b ORDER BY MIN(t.t_s), b",
                args,
            ).fetchall()
            per_task: dict[str, dict[int, dict[str, float]]] = {}
            for field, agg in (("task_shares", "AVG"), ("train_samples_per_task", "MAX")):
                rows = conn.execute(
                    f"SELECT {bucket} AS b, j.key, {agg}(j.value) FROM telemetry t, "
                    f"json_each(t.payload, '$.{field}') j WHERE {key} AND j.type IN ('integer', 'real') "
                    "GROUP BY b, j.key ORDER BY b, j.key",
                    args,
                ).fetchall()
                buckets = per_task.setdefault(field, {})
                for b, task, value in rows:
                    buckets.setdefault(b, {})[task] = value
        shares, trained = per_task["task_shares"], per_task["train_samples_per_task"]
        return [
            TelemetryPoint(
                t_s=row[1],
                count=row[2],
                backlog_max=row[3],
                backlog_mean=row[4],
                inference_share=row[5],
                p50_ms=row[6],
                p95_ms=row[7],
                p99_ms=row[8],
                slo_ms=row[9],
                slo_attainment=row[10],
                slo_attainment_min=row[11],
                train_samples=row[12],
                task_shares=shares.get(row[0], {}),
                train_samples_per_task={k: int(v) for k, v in trained.get(row[0], {}).items()},
            )
            for row in stats
        ]

    def telemetry_fleet_series(
        self, since_s: float, until_s: float, max_points: int = 300
    ) -> list[FleetPoint]:
        """All devices' snapshots in [since_s, until_s], bucketed in SQL into `max_points`
        equal time spans (see FleetPoint)."""
        if max_points < 1 or not until_s > since_s:
            raise ConfigError(
                f"need max_points >= 1 and until_s > since_s, got {max_points}, [{since_s}, {until_s}]"
            )
        args = {"since": since_s, "until": until_s, "width": (until_s - since_s) / max_points}
        args["last"] = max_points - 1
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(
                "SELECT MIN(CAST((t_s - :since) / :width AS INTEGER), :last) AS b, MIN(t_s), "
                "COUNT(DISTINCT device), AVG(slo_attainment), MIN(slo_attainment), "
                "MAX(p99_ms / NULLIF(slo_ms, 0)), MAX(backlog) FROM telemetry "
                "WHERE t_s >= :since AND t_s <= :until GROUP BY b ORDER BY b",
                args,
            ).fetchall()
        return [FleetPoint(*row[1:]) for row in rows]
