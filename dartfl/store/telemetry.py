"""The telemetry table: device snapshots as published on MQTT, stored once each, and read back
as the latest per device, one device's bucketed series, or fleet-wide buckets."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

from dartfl.errors import ConfigError
from dartfl.protocol import MAX_DEVICE_MESSAGE_BYTES
from dartfl.protocol.jsonwire import MAX_UNIX_S
from dartfl.store.connection import StoreConnection
from dartfl.store.errors import StoreDamagedError, decode_json_column
from dartfl.store.jsonable import strict_json_text, to_jsonable
from dartfl.store.records import FleetPoint, TelemetryDevice, TelemetryPoint, TelemetryRow

__all__ = ["MAX_PAYLOAD_BYTES", "TelemetryTable", "check_row"]

# The largest snapshot a device may publish (the decoder refuses more): one stored payload is
# at most this, so the table's size is bounded by its rows (docs/store.md).
MAX_PAYLOAD_BYTES = MAX_DEVICE_MESSAGE_BYTES


# A snapshot's time as SQL compares it: SQLite orders every TEXT or BLOB value after every
# number, so a t_s damaged into text (the column's REAL affinity cannot stop a direct write)
# sorts above +inf (9e999). Readers keep `t_s <= 9e999` and so never place such a row in time;
# `t_s > 9e999` finds the damaged ones through the time index.
_TIMED = "t_s <= 9e999"
_UNTIMED = "t_s > 9e999"


def _number(column: str) -> str:
    """SQL for `column` where it holds a number, NULL where a direct write left text or a blob
    (SQLite's AVG would read 'lots' as 0 and MAX would return it)."""
    return f"CASE WHEN typeof({column}) IN ('integer', 'real') THEN {column} END"


class TelemetryTable(StoreConnection):
    """The methods on telemetry of a `RunStore`."""

    _TELEMETRY_COLUMNS = (
        "device, t_s, backlog, inference_share, p50_ms, p95_ms, p99_ms, slo_ms, slo_attainment, "
        "train_samples, payload"
    )

    def add_telemetry(self, rows: Iterable[TelemetryRow]) -> int:
        """Append snapshots in one transaction; a snapshot already stored (same device and
        t_s, e.g. a QoS 1 redelivery) is skipped. Returns how many were new.

        ConfigError, and nothing written, when a row holds what no device can report: a time
        outside the Unix range, a share outside [0, 1], a negative count, a payload over
        MAX_PAYLOAD_BYTES (what a decoded snapshot can be; the decoder refuses more)."""
        params = [
            (
                check_row(r).device,
                r.t_s,
                r.backlog,
                to_jsonable(r.inference_share),
                to_jsonable(r.p50_ms),
                to_jsonable(r.p95_ms),
                to_jsonable(r.p99_ms),
                to_jsonable(r.slo_ms),
                to_jsonable(r.slo_attainment),
                r.train_samples,
                _payload_text(r),
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

    def prune_telemetry(self, before_s: float, after_s: float | None = None) -> int:
        """Delete snapshots older than `before_s` and, with `after_s`, those dated after it
        (a device clock far ahead, recorded before the recorder refused such snapshots: they
        would stay the device's newest for good). Unix times; returns how many went."""
        with self._transaction() as conn:
            return conn.execute(
                "DELETE FROM telemetry WHERE t_s < ? OR t_s > ?",
                (before_s, math.inf if after_s is None else after_s),
            ).rowcount

    def trim_telemetry(self, device: str, keep: int) -> int:
        """Keep only the newest `keep` snapshots of `device`; returns how many it has left."""
        if keep < 1:
            raise ConfigError(f"keep must be >= 1 snapshot, got {keep}")
        with self._transaction() as conn:
            # The (device, t_s) index finds the oldest kept snapshot without a scan of the rest.
            cut = conn.execute(
                "SELECT t_s FROM telemetry WHERE device = ? ORDER BY t_s DESC LIMIT 1 OFFSET ?",
                (device, keep - 1),
            ).fetchone()
            if cut is not None:
                conn.execute("DELETE FROM telemetry WHERE device = ? AND t_s < ?", (device, cut[0]))
            left = conn.execute("SELECT COUNT(*) FROM telemetry WHERE device = ?", (device,)).fetchone()
        return int(left[0])

    def telemetry_devices(self) -> list[TelemetryDevice]:
        """Devices with recorded telemetry, by name."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(
                f"SELECT device, MIN(t_s), MAX(t_s), COUNT(*) FROM telemetry WHERE {_TIMED} "
                "GROUP BY device ORDER BY device"
            ).fetchall()
        return [TelemetryDevice(*row) for row in rows]

    def telemetry_device(self, device: str) -> TelemetryDevice | None:
        """One device's recorded span and count (None: nothing recorded), by its index range."""
        with self._transaction("DEFERRED") as conn:
            row = conn.execute(
                f"SELECT device, MIN(t_s), MAX(t_s), COUNT(*) FROM telemetry WHERE device = ? AND {_TIMED} "
                "GROUP BY device",
                (device,),
            ).fetchone()
        return None if row is None else TelemetryDevice(*row)

    def telemetry_latest(
        self, since_s: float | None = None, *, damage: list[str] | None = None
    ) -> list[TelemetryRow]:
        """The newest snapshot of each device (only devices heard from since `since_s`).

        A newest snapshot whose payload is not JSON raises its one-line StoreDamagedError, or,
        given a `damage` list, is named there and replaced by that device's newest snapshot
        that reads, so one damaged row does not hide the fleet."""
        where = f"WHERE {_TIMED}" + ("" if since_s is None else " AND t_s >= :since")
        sql = (
            f"SELECT {self._TELEMETRY_COLUMNS} FROM telemetry t JOIN "
            f"(SELECT device AS d, MAX(t_s) AS m FROM telemetry {where} GROUP BY device) l "
            "ON t.device = l.d AND t.t_s = l.m ORDER BY t.device"
        )
        latest: list[TelemetryRow] = []
        with self._transaction("DEFERRED") as conn:
            if damage is not None:
                damage.extend(self._untimed(conn))
            for row in conn.execute(sql, {"since": since_s}).fetchall():
                try:
                    latest.append(self._telemetry_row(row))
                except StoreDamagedError as exc:
                    if damage is None:
                        raise
                    damage.append(str(exc))
                    older = conn.execute(  # walks the (device, t_s) index back from the newest
                        f"SELECT {self._TELEMETRY_COLUMNS} FROM telemetry WHERE device = :d AND t_s < :t "
                        "AND t_s >= :since AND json_valid(payload) ORDER BY t_s DESC LIMIT 1",
                        {"d": row[0], "t": row[1], "since": -math.inf if since_s is None else since_s},
                    ).fetchone()
                    if older is not None:
                        latest.append(self._telemetry_row(older))
        return latest

    def telemetry_before(self, times: Mapping[str, float]) -> dict[str, TelemetryRow]:
        """For each device of `times`, the start of a window that ends at a newer snapshot:
        its newest snapshot at or before that time, else its oldest (the window is then
        shorter); snapshots that do not read are passed over."""
        found: dict[str, TelemetryRow] = {}
        readable = (
            f"SELECT {self._TELEMETRY_COLUMNS} FROM telemetry WHERE device = :d AND {_TIMED} "
            "AND json_valid(payload)"
        )
        with self._transaction("DEFERRED") as conn:
            for device, t_s in times.items():
                args = {"d": device, "t": t_s}
                # Both walk the (device, t_s) index: back from t_s, or up from the first row.
                row = conn.execute(f"{readable} AND t_s <= :t ORDER BY t_s DESC LIMIT 1", args).fetchone()
                if row is None:
                    row = conn.execute(f"{readable} ORDER BY t_s LIMIT 1", args).fetchone()
                if row is not None:
                    found[device] = self._telemetry_row(row)
        return found

    def _untimed(self, conn: sqlite3.Connection) -> list[str]:
        """One line per device with snapshots whose t_s is not a time, which no reader shows."""
        rows = conn.execute(
            # `+device` keeps the planner off the device index (a scan of every row): the time
            # index finds the few rows above +inf directly.
            f"SELECT device, COUNT(*) FROM telemetry WHERE {_UNTIMED} GROUP BY +device ORDER BY +device"
        ).fetchall()
        return [
            f"{self.path}: {count} telemetry snapshot(s) of {device!r} hold a t_s that is not a time "
            f'(not shown): delete them with `sqlite3 {self.path} "DELETE FROM telemetry WHERE '
            f"device = {_sql_text(device)} AND typeof(t_s) NOT IN "
            f"('integer', 'real')\"` or restore a backup"
            for device, count in rows
        ]

    def _telemetry_row(self, row: tuple[Any, ...]) -> TelemetryRow:
        device, t_s, backlog, share, p50, p95, p99, slo, attainment, trained, payload = row
        what = f"{self.path}: the telemetry snapshot of {device!r} at t_s={t_s!r}"
        recover = (
            f'delete it with `sqlite3 {self.path} "DELETE FROM telemetry WHERE device = {_sql_text(device)} '
            f'AND t_s = {t_s!r}"` or restore a backup'
        )
        return TelemetryRow(
            device,
            t_s,
            backlog,
            share,
            p50,
            p95,
            p99,
            slo,
            attainment,
            trained,
            decode_json_column(payload, what, recover),
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
            columns = ", ".join(sql for _, sql in _POINT_STATS)
            stats = conn.execute(
                f"SELECT {bucket} AS b, {columns} FROM telemetry t WHERE {key} "
                "GROUP BY b ORDER BY MIN(t.t_s), b",
                args,
            ).fetchall()
            per_task: dict[str, dict[int, dict[str, float]]] = {}
            for field, agg in _PER_TASK_AGGREGATES:
                rows = conn.execute(
                    f"SELECT {bucket} AS b, j.key, {agg}(j.value) FROM telemetry t, "
                    # A payload that is not JSON (a damaged store) adds nothing, instead of failing.
                    "json_each(CASE WHEN json_valid(t.payload) THEN t.payload ELSE '{}' END, "
                    f"'$.{field}') j "
                    f"WHERE {key} AND j.type IN ('integer', 'real') "
                    "GROUP BY b, j.key ORDER BY b, j.key",
                    args,
                ).fetchall()
                buckets = per_task.setdefault(field, {})
                for b, task, value in rows:
                    buckets.setdefault(b, {})[task] = value
        shares, trained = per_task["task_shares"], per_task["train_samples_per_task"]
        training = per_task["training_busy_s_per_task"]
        names = [name for name, _ in _POINT_STATS]
        return [
            TelemetryPoint(
                **dict(zip(names, row[1:], strict=True)),
                task_shares=shares.get(row[0], {}),
                train_samples_per_task={k: int(v) for k, v in trained.get(row[0], {}).items()},
                training_busy_s_per_task=training.get(row[0], {}),
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
                f"COUNT(DISTINCT device), AVG({_number('slo_attainment')}), "
                f"MIN({_number('slo_attainment')}), "
                f"MAX({_number('p99_ms')} / NULLIF({_number('slo_ms')}, 0)), MAX({_number('backlog')}) "
                "FROM telemetry "
                "WHERE t_s >= :since AND t_s <= :until GROUP BY b ORDER BY b",
                args,
            ).fetchall()
        return [FleetPoint(*row[1:]) for row in rows]


# Per-task fields of the payload, each with how a bucket aggregates it.
_PER_TASK_AGGREGATES = (
    ("task_shares", "AVG"),
    ("train_samples_per_task", "MAX"),
    ("training_busy_s_per_task", "MAX"),
)
# A TelemetryPoint's scalar fields and the SQL that reduces a bucket of snapshots to each.
_POINT_STATS = (
    ("t_s", "MIN(t.t_s)"),
    ("count", "COUNT(*)"),
    # A headline column a direct write damaged into text counts as missing, not as 0.
    ("backlog_max", f"MAX({_number('t.backlog')})"),
    ("backlog_mean", f"AVG({_number('t.backlog')})"),
    ("inference_share", f"AVG({_number('t.inference_share')})"),
    ("p50_ms", f"MAX({_number('t.p50_ms')})"),
    ("p95_ms", f"MAX({_number('t.p95_ms')})"),
    ("p99_ms", f"MAX({_number('t.p99_ms')})"),
    ("slo_ms", f"MAX({_number('t.slo_ms')})"),
    ("slo_attainment", f"AVG({_number('t.slo_attainment')})"),
    ("slo_attainment_min", f"MIN({_number('t.slo_attainment')})"),
    ("train_samples", f"MAX({_number('t.train_samples')})"),
    # The time-use counters from the payload, the bucket's largest (they only grow); a payload
    # that is not JSON (a damaged store) gives NULL instead of failing the query.
    *(
        (
            name,
            f"MAX(CASE WHEN json_valid(t.payload) THEN CASE WHEN json_type(t.payload, '$.{name}') "
            f"IN ('integer', 'real') THEN json_extract(t.payload, '$.{name}') END END)",
        )
        for name in ("uptime_s", "inference_busy_s", "training_busy_s", "idle_s")
    ),
)


def check_row(row: TelemetryRow) -> TelemetryRow:
    """`row` if it holds only what a device can report, else ConfigError naming the field."""

    def refuse(name: str, value: object, expected: str) -> ConfigError:
        return ConfigError(f"telemetry of {row.device!r}: {name} must be {expected}, got {value!r}")

    if not 0.0 <= row.t_s <= MAX_UNIX_S:
        raise refuse("t_s", row.t_s, f"a Unix time in [0, {MAX_UNIX_S:g}]")
    for name in ("inference_share", "slo_attainment"):
        value = getattr(row, name)
        share = _real(value)
        if value is not None and not (share is not None and (0.0 <= share <= 1.0 or math.isnan(share))):
            raise refuse(name, value, "a share in [0, 1]")
    for name in ("backlog", "train_samples"):
        value = getattr(row, name)
        if value is not None and not (type(value) is int and value >= 0):
            raise refuse(name, value, "a count >= 0")
    for name in ("p50_ms", "p95_ms", "p99_ms", "slo_ms"):
        value = getattr(row, name)
        ms = _real(value)
        if value is not None and not (ms is not None and not ms < 0):
            raise refuse(name, value, "a duration >= 0")
    return row


def _sql_text(value: object) -> str:
    """`value` as an SQL string literal, for the commands a damage message prints."""
    return "'" + str(value).replace("'", "''") + "'"


def _real(value: object) -> float | None:
    """`value` as a float if it is a real number (numpy's too; NaN is stored as null)."""
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def _payload_text(row: TelemetryRow) -> str:
    text = strict_json_text(row.payload or {})
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise ConfigError(
            f"telemetry of {row.device!r} at t_s={row.t_s}: payload of {len(text.encode())} bytes, "
            f"over the {MAX_PAYLOAD_BYTES} a snapshot may have"
        )
    return text
