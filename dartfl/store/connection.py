"""Opening a run store file: the SQLite connection in WAL mode, the schema created, migrated or
repaired in one write transaction, and the lock-guarded transactions every table method uses.

Two ways to open one:
- for writing (the default): the file is created if missing, migrated forward, and a table of
  its version that went missing is recreated empty (with a warning);
- for reading (`read_only=True`: `dartfl runs`, the dashboard): nothing is ever created,
  migrated or written; a store of a newer schema opens with a `notice` and reads what this
  version knows. Damage shows up as a one-line `StoreError` where it is met.

Every SQLite error inside a transaction becomes a one-line StoreError (dartfl.store.errors).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self
from urllib.parse import quote

from dartfl.errors import ConfigError
from dartfl.files import exists_or_explain
from dartfl.store.errors import (
    FIX_PATH,
    StoreDamagedError,
    StoreError,
    StoreTooNewError,
    StoreWriteError,
    read_only_error,
    translate,
)
from dartfl.store.schema import BASE_SCHEMA, MIGRATIONS, SCHEMA_VERSION, TABLE_SINCE, tables_of

log = logging.getLogger(__name__)

__all__ = ["StoreConnection", "check_store_file"]

BUSY_TIMEOUT_S = 10.0  # how long a writer waits for another one before giving up
READ_BUSY_TIMEOUT_S = 2.0  # a reader (a dashboard page) says "locked" sooner than it hangs


class StoreConnection:
    """One open store file; the table classes (`RunTables`, `TelemetryTable`) build on it.

    `version` is the file's schema version; `notice` is one line about a store that reads
    but is not written (a newer schema), else None."""

    def __init__(
        self, path: str | Path, *, clock: Callable[[], float] = time.time, read_only: bool = False
    ) -> None:
        self.path = Path(path).expanduser()
        self.read_only = read_only
        self.version = SCHEMA_VERSION
        self.notice: str | None = None
        self._clock = clock  # created_s / finished_s come from here (tests pass a fake one)
        self._busy_timeout_s = READ_BUSY_TIMEOUT_S if read_only else BUSY_TIMEOUT_S
        self._lock = threading.Lock()
        check_store_file(self.path, empty_ok=not read_only)  # SQLite starts a new file empty
        self._conn = self._connect_for_reading() if read_only else self._connect()
        try:
            if read_only:
                self._conn.execute("PRAGMA query_only=ON")  # SQLite itself refuses any write
                with self._transaction("DEFERRED") as conn:
                    self._inspect_schema(conn)
            else:
                self._enable_wal()
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA foreign_keys=ON")
                # One write transaction, so two processes creating the same store cannot interleave.
                with self._transaction() as conn:
                    self._create_schema(conn)
        except sqlite3.Error as exc:  # outside a transaction: a pragma on a damaged file
            self._conn.close()
            self._raise_store_error(exc)
        except BaseException:
            self._conn.close()
            raise

    # -- opening --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the run store directory {self.path.parent}: {exc}; {FIX_PATH}"
            ) from exc
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (see _transaction).
            return sqlite3.connect(
                self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open run store {self.path}: {exc}; {FIX_PATH}") from exc

    def _connect_for_reading(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise ConfigError(f"run store {self.path} does not exist; {FIX_PATH}")
        # Read-write when we may (query_only still forbids writes), so that closing the last
        # connection cleans up the -wal and -shm files; read-only files open read-only.
        writable = _writable(self.path)
        uri = f"file:{quote(str(self.path.resolve()))}?mode={'rw' if writable else 'ro'}"
        if not writable and not Path(f"{self.path}-wal").exists():
            # A WAL store needs its -shm file even to be read, and a read-only directory (a
            # backup on a read-only mount) cannot get one. With no -wal file beside it the
            # main file holds every committed run, so read it as the unchanging file it is.
            uri += "&immutable=1"
        try:
            return sqlite3.connect(
                uri, uri=True, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            self._raise_store_error(exc)

    def _enable_wal(self) -> None:
        # Switching a new file to WAL fails at once (no busy wait) while another process that
        # opens the same new file holds a lock, so retry for as long as a busy wait would.
        deadline = time.monotonic() + self._busy_timeout_s
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

    @staticmethod
    def _tables(conn: sqlite3.Connection) -> set[str]:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _stored_version(self, conn: sqlite3.Connection, tables: set[str]) -> int | None:
        """The file's schema version; None for a file with no tables yet."""
        if not tables:
            return None
        if "schema_version" not in tables:
            raise ConfigError(
                f"{self.path} is an SQLite database of something else (tables: "
                f"{', '.join(sorted(tables))}), not a DART-FL run store; {FIX_PATH}"
            )
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        if row[0] is None:
            return None
        # Whatever else the row holds ('two', a blob, 0, 1.5: SQLite keeps any value in any
        # column) is damage, said in one line, never a ValueError or a KeyError of a migration.
        if type(row[0]) is not int or row[0] < 1:
            raise StoreDamagedError(self._bad_version(row[0], tables))
        return row[0]

    def _bad_version(self, value: object, tables: set[str]) -> str:
        text = repr(value)
        shown = text if len(text) <= 40 else text[:37] + "..."
        # The newest version whose tables the file holds is most likely the one it had.
        likely = max((v for v in range(1, SCHEMA_VERSION + 1) if tables_of(v) <= tables), default=1)
        return (
            f"{self.path} is damaged (its schema_version row holds {shown}, not a schema version "
            f"1 or above): restore a backup, or write the version back if you know it, e.g. "
            f'`sqlite3 {self.path} "UPDATE schema_version SET version = {likely}"`'
        )

    def _inspect_schema(self, conn: sqlite3.Connection) -> None:
        version = self._stored_version(conn, self._tables(conn))
        if version is None:
            raise ConfigError(f"{self.path} is an SQLite database with no run store in it yet; {FIX_PATH}")
        self.version = version
        if version > SCHEMA_VERSION:
            self.notice = (
                f"{self.path} has schema version {version}, newer than this dartfl's {SCHEMA_VERSION}: "
                f"showing what version {SCHEMA_VERSION} knows, writing refused; install a dartfl "
                f"that knows schema version {version} to see and record everything"
            )

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        tables = self._tables(conn)
        version = self._stored_version(conn, tables)
        if version is not None and version > SCHEMA_VERSION:
            raise StoreTooNewError(
                f"{self.path} has schema version {version}, newer than this dartfl's {SCHEMA_VERSION}: "
                f"writing refused so as not to damage it; install a dartfl that knows schema version "
                f"{version}, or {FIX_PATH}"
            )
        _run_script(conn, BASE_SCHEMA)
        if version is None:  # a new store: version 1, then every migration below
            conn.execute("INSERT INTO schema_version (version) VALUES (1)")
            self._migrate(conn, 1)
            return
        self._repair(conn, version, tables_of(version) - tables)
        self._migrate(conn, version)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            log.info("run store %s migrated to schema version %d", self.path, target)

    def _repair(self, conn: sqlite3.Connection, version: int, missing: set[str]) -> None:
        """Recreate the tables of `version` that are gone (their rows are lost either way)."""
        if not missing:
            return
        for target in range(2, version + 1):  # every statement is IF NOT EXISTS
            _run_script(conn, MIGRATIONS[target])
        log.warning(
            "run store %s: table %s was missing; recreated it empty (restore a backup to get its rows back)",
            self.path,
            ", ".join(sorted(missing)),
        )

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int) -> None:
        for target in range(version + 1, SCHEMA_VERSION + 1):
            _run_script(conn, MIGRATIONS[target])
            conn.execute("UPDATE schema_version SET version = ?", (target,))

    # -- errors ---------------------------------------------------------------------------

    def _missing_table(self, name: str) -> str:
        since = TABLE_SINCE.get(name, 1)
        if since > self.version:
            return (
                f"{self.path} has schema version {self.version}, which has no {name} table yet: a "
                f"dartfl command that records into it (e.g. `dartfl record`) migrates it"
            )
        return (
            f"{self.path}: table {name} is missing (schema version {self.version} has it): a dartfl "
            f"command that records into this store (e.g. `dartfl record`) recreates it empty, or "
            f"restore a backup"
        )

    def _raise_store_error(self, exc: sqlite3.Error) -> NoReturn:
        """Raise the one-line StoreError for `exc`, or `exc` itself when the file is not to
        blame (a value the caller passed, or a bug)."""
        translated = translate(
            exc, self.path, busy_timeout_s=self._busy_timeout_s, missing_table=self._missing_table
        )
        if translated is None:
            raise exc
        raise translated from exc

    def _refuse_writing(self) -> StoreError:
        if self.notice is not None:
            return StoreTooNewError(self.notice)
        return StoreWriteError(f"{self.path} was opened for reading only; open RunStore(path) to write")

    def check_writable(self) -> None:
        """Refuse now, with the fix, a store that opened but cannot be written (a read-only
        file, directory or mount): SQLite opens such a file read-only without a word and fails
        only at the first write, which for a command comes after its slow work."""
        if self.read_only or not _writable(self.path):
            raise read_only_error(self.path)

    # -- transactions ---------------------------------------------------------------------

    @contextmanager
    def _transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        if self.read_only and mode != "DEFERRED":
            raise self._refuse_writing()
        with self._lock:
            try:
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
            except sqlite3.Error as exc:
                self._raise_store_error(exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _writable(path: Path) -> bool:
    """Whether SQLite may write `path`: the file, and its directory for the -wal and -shm files."""
    return os.access(path, os.W_OK) and os.access(path.resolve().parent, os.W_OK)


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


_SQLITE_HEADER = b"SQLite format 3\x00"


def check_store_file(path: Path, *, empty_ok: bool = False) -> None:
    """ConfigError if `path` exists but is no SQLite file (a directory, a CSV, an empty file).

    Called before every open: opening would turn a mistyped file into a new, empty run store
    (or an SQLite error) instead of naming the mistake. A writer passes `empty_ok`: another
    process creating the same store leaves it empty until its first commit."""
    if not exists_or_explain(path, "run store"):
        return
    if path.is_dir():
        raise ConfigError(f"run store {path} is a directory, expected a file; {FIX_PATH}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise ConfigError(f"cannot read run store {path}: {exc.strerror}; {FIX_PATH}") from exc
    if head != _SQLITE_HEADER and not (empty_ok and not head):
        what = "an empty file" if not head else "not an SQLite database"
        raise ConfigError(f"{path} is {what}, so not a run store; {FIX_PATH}")
