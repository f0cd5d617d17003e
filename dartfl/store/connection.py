"""Opening a run store file: the SQLite connection in WAL mode, the schema created or migrated
forward in one write transaction, and the lock-guarded transactions every table method uses."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from dartfl.errors import ConfigError
from dartfl.store.schema import BASE_SCHEMA, MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

__all__ = ["StoreConnection"]

_BUSY_TIMEOUT_S = 10.0  # how long a writer waits for another one before giving up
_FIX = "pass --store PATH or set DARTFL_STORE to a writable file path"


class StoreConnection:
    """One open store file; the table classes (`RunTables`, `TelemetryTable`) build on it."""

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
        for statement in BASE_SCHEMA.split(";"):
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
            for statement in MIGRATIONS[target].split(";"):
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
                # COMMIT inside the try: one that fails (SQLITE_BUSY, outside WAL mode) must
                # roll back too, or the connection keeps its write lock and every later
                # transaction here fails.
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_SQLITE_HEADER = b"SQLite format 3\x00"


def check_store_file(path: Path) -> None:
    """ConfigError if `path` exists but is no SQLite file (a directory, a CSV, an empty file).

    Commands that only read call it before opening: opening would turn an empty or mistyped
    file into a new, empty run store instead of naming the mistake."""
    if not path.exists():
        return
    if path.is_dir():
        raise ConfigError(f"run store {path} is a directory; {_FIX}")
    with open(path, "rb") as fh:
        head = fh.read(len(_SQLITE_HEADER))
    if head != _SQLITE_HEADER:
        what = "an empty file" if not head else "not an SQLite database"
        raise ConfigError(f"{path} is {what}, so not a run store; {_FIX}")
