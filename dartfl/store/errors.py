"""What can go wrong with a run store file, each said in one line: what is damaged, where, and
how to recover. Every SQLite error a store method meets is turned into one of these by
`translate`, so no caller (the CLI, the recorder, the dashboard) ever sees a raw
`sqlite3.Error` or a traceback for a damaged, locked or newer file."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dartfl.errors import DartflError, InputError

__all__ = [
    "StoreBusyError",
    "StoreDamagedError",
    "StoreError",
    "StoreTooNewError",
    "StoreWriteError",
    "decode_json_column",
    "delete_run_hint",
    "read_only_error",
    "translate",
]

FIX_PATH = "pass --store PATH or set DARTFL_STORE to a writable file path"


class StoreError(DartflError):
    """A run store cannot be read or written; the message says what, where and how to recover."""


class StoreDamagedError(StoreError, InputError):
    """The file, a table or a row of it is damaged (exit code 2: the file passed is unusable)."""


class StoreTooNewError(StoreError, InputError):
    """The file has a newer schema than this dartfl: readable in part, never written (exit 2)."""


class StoreBusyError(StoreError):
    """Another process holds the store's lock for longer than a busy wait (exit code 1)."""


class StoreWriteError(StoreError):
    """The store cannot be written now: disk full, read-only file, I/O error (exit code 1)."""


def salvage_hint(path: Path) -> str:
    recovered = path.with_name(f"{path.stem}.recovered{path.suffix or '.sqlite'}")
    # `.dump`, not `.recover`: Debian's sqlite3 lacks the page access that `.recover` needs;
    # a dump that meets damage ends in ROLLBACK, which would throw away what it did read.
    return (
        f"restore a backup, or keep what still reads: `sqlite3 {path} .dump | sed "
        f"'s/^ROLLBACK; -- due to errors$/COMMIT;/' | sqlite3 {recovered}`"
    )


def read_only_error(path: Path) -> StoreWriteError:
    return StoreWriteError(
        f"cannot write {path}: the file or its directory is read-only; make it writable or {FIX_PATH}"
    )


def delete_run_hint(path: Path, run_id: int) -> str:
    return f"delete the run with `dartfl runs delete {run_id} --store {path}` or restore a backup"


_NO_TABLE = re.compile(r"no such table: (?:main\.)?(\w+)")


def translate(
    exc: sqlite3.Error,
    path: Path,
    *,
    busy_timeout_s: float,
    missing_table: Callable[[str], str] | None = None,
) -> StoreError | None:
    """The one-line StoreError for a SQLite error, or None for errors that are about the
    values passed in (binding, constraints), which the caller handles.

    `missing_table(name) -> str` words a missing table (it knows the store's version)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = str(exc)
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreBusyError(
            f"{path} is locked by another process (waited {busy_timeout_s:g} s): retry once it is "
            f"done; `fuser -v {path}` shows which process holds it"
        )
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return StoreDamagedError(f"{path} is damaged ({text}): {salvage_hint(path)}")
    if primary == sqlite3.SQLITE_FULL:
        return StoreWriteError(f"cannot write {path}: the disk is full; free some space or {FIX_PATH}")
    if primary == sqlite3.SQLITE_READONLY:
        return read_only_error(path)
    if primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        return StoreWriteError(f"cannot read or write {path} ({text}); check the file and its directory")
    if (match := _NO_TABLE.search(text)) is not None and missing_table is not None:
        return StoreDamagedError(missing_table(match.group(1)))
    if "no such column" in text:
        return StoreDamagedError(
            f"{path}: a column is missing ({text}), so something other than dartfl changed its "
            f"tables: restore a backup"
        )
    if "malformed JSON" in text:
        return StoreDamagedError(f"{path}: a JSON column holds malformed JSON: {salvage_hint(path)}")
    return None  # a bug of ours or a value the caller passed: not the file's fault


def decode_json_column(text: object, what: str, recover: str, *, expect: type = dict) -> Any:
    """A JSON column's value; StoreDamagedError naming `what` (e.g. "runs.sqlite: run 12's
    config") and the fix when it is not JSON or not of the `expect`ed type."""
    if not isinstance(text, str):
        raise StoreDamagedError(f"{what} is not JSON text (a {type(text).__name__}): {recover}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreDamagedError(f"{what} is not JSON ({exc.msg} at character {exc.pos}): {recover}") from None
    except RecursionError:
        raise StoreDamagedError(f"{what} is not JSON (nested too deeply): {recover}") from None
    if not isinstance(value, expect):
        wanted = "an object" if expect is dict else f"a {expect.__name__}"
        raise StoreDamagedError(f"{what} is JSON but not {wanted} (a {type(value).__name__}): {recover}")
    return value
