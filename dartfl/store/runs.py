"""The runs, results and decisions tables: recording a run, its per-policy metrics and its
per-period decisions, and reading them back (decisions bucketed in SQL)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from dartfl.errors import ConfigError
from dartfl.protocol.jsonwire import MAX_UNIX_S
from dartfl.store.connection import StoreConnection
from dartfl.store.errors import StoreDamagedError, decode_json_column, delete_run_hint
from dartfl.store.jsonable import strict_json_text
from dartfl.store.records import DecisionPoint, DecisionRow, RunInfo

__all__ = ["RUN_KINDS", "RUN_STATUSES", "RunTables"]

RUN_KINDS = ("sim", "replay", "fl", "dc", "fleet")
RUN_STATUSES = ("running", "ok", "failed")
# SQLite's INTEGER range: a run_id outside it cannot be in the store, and binding it would
# raise OverflowError, so such an id is simply "no run" (a dashboard URL or the CLI may pass one).
_SQLITE_INT_MIN, _SQLITE_INT_MAX = -(2**63), 2**63 - 1


class RunTables(StoreConnection):
    """The methods on runs, results and decisions of a `RunStore`."""

    # -- writing ------------------------------------------------------------------------------

    def start_run(
        self, kind: str, label: str | None, config: Mapping[str, Any], *, started_s: float | None = None
    ) -> int:
        """Record a new run in status 'running'; returns its run_id.

        `started_s` (Unix time) is when the run began, for a run recorded only once it is over
        (a simulation, a replay): without it the run starts now, and its duration is the
        time it took to record, not to run."""
        if kind not in RUN_KINDS:
            raise ConfigError(f"unknown run kind {kind!r}; expected one of {', '.join(RUN_KINDS)}")
        now = self._clock()
        if started_s is not None and not (math.isfinite(started_s) and 0 <= started_s <= now):
            raise ConfigError(f"started_s must be a Unix time no later than now ({now:.0f}), got {started_s}")
        with self._transaction() as conn:
            row = conn.execute(
                "INSERT INTO runs (kind, label, created_s, status, config) "
                "VALUES (?, ?, ?, 'running', ?) RETURNING run_id",
                (kind, label, now if started_s is None else started_s, strict_json_text(config)),
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
                strict_json_text(r.task_shares),
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
                (run_id, policy, strict_json_text(metrics)),
            )

    def finish_run(self, run_id: int, status: str = "ok") -> None:
        if status not in RUN_STATUSES[1:]:
            raise ConfigError(f"a run finishes with status 'ok' or 'failed', got {status!r}")
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            conn.execute(
                "UPDATE runs SET status = ?, finished_s = ? WHERE run_id = ?", (status, self._clock(), run_id)
            )

    def delete_run(self, run_id: int) -> tuple[int, int]:
        """Delete a run with its results and decisions, damaged or not (nothing is parsed);
        returns how many results and decisions went with it."""
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            counts = conn.execute(
                "SELECT (SELECT COUNT(*) FROM results WHERE run_id = :r), "
                "(SELECT COUNT(*) FROM decisions WHERE run_id = :r)",
                {"r": run_id},
            ).fetchone()
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))  # foreign keys cascade
        return int(counts[0]), int(counts[1])

    def _require_run(self, conn: sqlite3.Connection, run_id: int) -> None:
        if (
            not _SQLITE_INT_MIN <= run_id <= _SQLITE_INT_MAX
            or conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None
        ):
            raise ConfigError(
                f"no run {run_id} in run store {self.path}; list its runs with "
                f"`dartfl runs list --store {self.path}`"
            )

    # -- reading ------------------------------------------------------------------------------

    _RUN_COLUMNS = (
        "r.run_id, r.kind, r.label, r.created_s, r.finished_s, r.status, r.config, "
        "(SELECT group_concat(policy, char(10)) FROM "
        "(SELECT policy FROM results WHERE run_id = r.run_id ORDER BY policy))"
    )

    def _run_info(self, row: tuple[Any, ...]) -> RunInfo:
        """A `runs` row as a RunInfo; what does not read is named in its `damage`, not raised,
        so one damaged run does not hide the others from a listing."""
        run_id, kind, label, created, finished, status, config_text, policies = row
        what = f"{self.path}: run {run_id}'s"
        recover = delete_run_hint(self.path, run_id)
        damage: list[str] = []
        try:
            config = decode_json_column(config_text, f"{what} config", recover)
        except StoreDamagedError as exc:
            config = {}
            damage.append(str(exc))
        times: list[float | None] = []
        for name, value in (("start time", created), ("finish time", finished)):
            if value is None or (type(value) in (int, float) and 0 <= value <= MAX_UNIX_S):
                times.append(None if value is None else float(value))
                continue
            times.append(math.nan)
            if type(value) in (int, float) and math.isfinite(value):
                # A number no date can be (the writer only stores 0..now): the CLI and the
                # dashboard could not format it, so it reads as damage like text does.
                damage.append(
                    f"{what} {name} is not a date ({value:g}, not a Unix time in "
                    f"[0, {MAX_UNIX_S:g}]): {recover}"
                )
            else:
                damage.append(f"{what} {name} is not a number ({repr(value)[:40]}): {recover}")
        return RunInfo(
            run_id,
            str(kind),
            None if label is None else str(label),
            math.nan if times[0] is None else times[0],
            times[1],
            str(status),
            config,
            tuple(str(policies).split("\n")) if policies else (),
            tuple(damage),
        )

    def list_runs(self, kind: str | None = None, limit: int = 50) -> list[RunInfo]:
        """The newest `limit` runs, newest first, optionally of one kind."""
        # No store holds more rows than SQLite's largest integer, so a larger limit means the
        # same; bound it so that binding it cannot overflow.
        limit = min(limit, _SQLITE_INT_MAX)
        where, params = ("WHERE r.kind = ?", [kind]) if kind is not None else ("", [])
        sql = f"SELECT {self._RUN_COLUMNS} FROM runs r {where} ORDER BY r.run_id DESC LIMIT ?"
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
        return [self._run_info(row) for row in rows]

    def get_run(self, run_id: int) -> RunInfo | None:
        if not _SQLITE_INT_MIN <= run_id <= _SQLITE_INT_MAX:
            return None  # no row can hold it
        with self._transaction("DEFERRED") as conn:
            row = conn.execute(
                f"SELECT {self._RUN_COLUMNS} FROM runs r WHERE r.run_id = ?", (run_id,)
            ).fetchone()
        return None if row is None else self._run_info(row)

    def results(self, run_id: int) -> dict[str, dict[str, Any]]:
        """Metrics per policy, in policy-name order; StoreDamagedError (naming the run, the
        policy and the fix) when a row's metrics are not a JSON object."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(
                "SELECT policy, metrics FROM results WHERE run_id = ? ORDER BY policy", (run_id,)
            ).fetchall()
        recover = delete_run_hint(self.path, run_id)
        return {
            policy: decode_json_column(
                metrics, f"{self.path}: run {run_id}'s result for policy {policy!r}", recover
            )
            for policy, metrics in rows
        }

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
                # A row whose shares are not JSON (a damaged store) adds none, instead of failing the query.
                "FROM decisions d, json_each(CASE WHEN json_valid(d.task_shares) THEN d.task_shares "
                f"ELSE '[]' END) j WHERE {key} GROUP BY b, k ORDER BY b, k",
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
