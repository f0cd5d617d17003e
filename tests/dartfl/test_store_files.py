"""The run store's file: where it lives by default, what is refused as a store (a directory, a
file that is no database, another program's database, a newer schema), processes creating one
at once, and a commit that fails under another process's lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.paths import default_store_path
from dartfl.store import SCHEMA_VERSION, RunStore, StoreBusyError, StoreTooNewError


def test_store_directory_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"cannot create the run store directory .*file.*DARTFL_STORE"):
        RunStore(blocker / "sub" / "runs.sqlite")


def test_store_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        RunStore(tmp_path)


def test_file_that_is_not_a_database_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not an sqlite database at all" * 100)
    with pytest.raises(ConfigError, match=r"junk\.sqlite is not an SQLite database, so not a run store"):
        RunStore(path)


def test_other_sqlite_database_is_not_taken_for_a_store(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    with pytest.raises(ConfigError, match="tables: users"):
        RunStore(path)


def test_store_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    RunStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreTooNewError, match="newer than this dartfl's 2: writing refused"):
        RunStore(path)


def test_default_store_path_prefers_env_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DARTFL_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("DARTFL_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "dartfl" / "runs.sqlite"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "dartfl" / "runs.sqlite"


def test_suite_never_uses_the_users_data_dir() -> None:
    assert "dartfl-store" in str(default_store_path())


def test_processes_creating_one_new_store_at_once_agree_on_its_schema(tmp_path: Path) -> None:
    path = tmp_path / "new" / "runs.sqlite"
    script = "import sys; from dartfl.store import RunStore; RunStore(sys.argv[1]).close()"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path)]) for _ in range(6)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


def test_a_commit_that_fails_rolls_back_and_the_next_write_succeeds(tmp_path: Path) -> None:
    # Outside WAL mode (a file system without shared memory) a reader's shared lock makes
    # COMMIT fail with SQLITE_BUSY. The failed transaction must be rolled back, or the store
    # keeps its write lock and every later write fails.
    path = tmp_path / "s.sqlite"
    store = RunStore(path)
    run = store.start_run("fl", "x", {})
    store._conn.execute("PRAGMA busy_timeout=50")
    assert store._conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM runs").fetchall()
    with pytest.raises(StoreBusyError, match="is locked by another process"):
        store.add_result(run, "dart", {"a": 1})
    assert not store._conn.in_transaction
    reader.execute("COMMIT")
    reader.close()
    store.add_result(run, "dart", {"a": 2})
    assert store.results(run)["dart"]["a"] == 2
    store.close()


def _read_only_mount_works() -> bool:
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.skipif(
    not _read_only_mount_works(), reason="needs root and unshare -m for a read-only bind mount"
)
def test_a_store_in_a_read_only_directory_can_still_be_listed(tmp_path: Path) -> None:
    # A backup on a read-only mount: SQLite's WAL mode wants a -shm file beside the store even
    # to read it, and `dartfl runs list` failed with "unable to open database file".
    directory = tmp_path / "backup"
    directory.mkdir()
    store = directory / "runs.sqlite"
    with RunStore(store) as writer:
        writer.finish_run(writer.start_run("sim", "kept", {}), "ok")
    assert not Path(f"{store}-wal").exists()  # closed cleanly: every run is in the main file
    listing = f"{sys.executable} -m dartfl.cli.main runs list --json --store {store}"
    script = f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} && {listing}"
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert '"kept"' in done.stdout
