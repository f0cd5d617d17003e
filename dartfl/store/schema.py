"""The run store's tables: the version-1 schema and the forward migrations to the current
version. Adding a table or a column means a new entry in MIGRATIONS and a bump of
SCHEMA_VERSION; docs/store.md describes the columns."""

from __future__ import annotations

__all__ = ["BASE_SCHEMA", "MIGRATIONS", "SCHEMA_VERSION", "TABLE_SINCE", "tables_of"]

SCHEMA_VERSION = 2

# The version that introduced each table: a store of version v must hold tables_of(v).
TABLE_SINCE: dict[str, int] = {
    "schema_version": 1,
    "runs": 1,
    "results": 1,
    "decisions": 1,
    "telemetry": 2,
}


def tables_of(version: int) -> set[str]:
    """The tables a store of `version` holds (for a newer one: those this dartfl knows)."""
    return {name for name, since in TABLE_SINCE.items() if since <= version}


BASE_SCHEMA = """
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
# Each statement is idempotent (IF NOT EXISTS): a writer that finds a table of its version
# missing runs them all again to recreate it (connection.StoreConnection._repair).
MIGRATIONS: dict[int, str] = {
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
