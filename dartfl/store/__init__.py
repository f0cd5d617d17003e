"""The run store: every run's config, per-period decisions and results in one SQLite file.

One file, WAL mode, so a dashboard or `dartfl runs` can read while a simulation writes. The
schema is in docs/store.md. JSON columns hold strict JSON (non-finite floats become null) so
SQLite's own json functions can query them.

A `RunStore` owns one connection guarded by a lock: one writer thread, any number of reader
threads in this process, and readers in other processes through their own `RunStore`.

This package is a facade; the pieces live in:
- `schema`: the schema version, the tables and the forward migrations;
- `connection`: opening the file for writing (WAL, busy waits, migrating, repairing) or for
  reading only (`RunStore(path, read_only=True)`), and transactions;
- `errors`: the one-line StoreErrors every SQLite error becomes (damaged, locked, too new);
- `runs`: the runs, results and decisions tables; `telemetry`: the telemetry table;
- `records`: the frozen rows and points the store takes and returns;
- `jsonable`: strict JSON conversion of numpy and other values.
"""

from dartfl.store.connection import check_store_file
from dartfl.store.errors import (
    StoreBusyError,
    StoreDamagedError,
    StoreError,
    StoreTooNewError,
    StoreWriteError,
)
from dartfl.store.jsonable import to_jsonable
from dartfl.store.records import (
    DecisionPoint,
    DecisionRow,
    FleetPoint,
    RunInfo,
    TelemetryDevice,
    TelemetryPoint,
    TelemetryRow,
)
from dartfl.store.run_store import RunStore
from dartfl.store.runs import RUN_KINDS, RUN_STATUSES
from dartfl.store.schema import SCHEMA_VERSION

__all__ = [
    "RUN_KINDS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "DecisionPoint",
    "DecisionRow",
    "FleetPoint",
    "RunInfo",
    "RunStore",
    "StoreBusyError",
    "StoreDamagedError",
    "StoreError",
    "StoreTooNewError",
    "StoreWriteError",
    "TelemetryDevice",
    "TelemetryPoint",
    "TelemetryRow",
    "check_store_file",
    "to_jsonable",
]
