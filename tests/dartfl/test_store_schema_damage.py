"""A schema_version row that holds no version ('two', a blob, 0, -5, 1.5) is a damaged store,
said in one line by every reader and writer (a ValueError or a KeyError of the migrations
before), and the file is left as it was."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dartfl.cli.main import main
from dartfl.paths import STORE_ENV
from dartfl.store import SCHEMA_VERSION, RunStore, StoreDamagedError
from dashboard.config import BROKER_ENV

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
BAD_VERSIONS = ["'two'", "x'00'", "0", "-5", "1.5"]


def _store(tmp_path: Path, version: str) -> Path:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        store.finish_run(store.start_run("sim", "one run", {"profile_name": "pi4"}))
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE schema_version SET version = {version}")
    conn.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", BAD_VERSIONS)
@pytest.mark.parametrize("read_only", [True, False])
def test_a_schema_version_that_is_no_version_is_a_damaged_store(
    tmp_path: Path, version: str, read_only: bool
) -> None:
    path = _store(tmp_path, version)
    before = _digest(path)
    with pytest.raises(StoreDamagedError) as caught:
        RunStore(path, read_only=read_only).close()
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"{path} is damaged (its schema_version row holds ")
    assert f'UPDATE schema_version SET version = {SCHEMA_VERSION}"' in text
    assert _digest(path) == before


@pytest.mark.parametrize("version", BAD_VERSIONS)
def test_runs_list_and_record_say_so_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    path = _store(tmp_path, version)
    for argv in (
        ["runs", "list", "--store", str(path)],
        ["record", "--store", str(path), "--broker", "mqtt://127.0.0.1:9"],
    ):
        assert main(argv) == 2, argv
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"dartfl: error: {path} is damaged (its schema_version row"), argv


def test_every_dashboard_page_names_the_damage_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store(tmp_path, "'two'")
    monkeypatch.setenv(STORE_ENV, str(path))
    monkeypatch.delenv(BROKER_ENV, raising=False)
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    for script in (
        None,
        "routes/device.py",
        "routes/rounds.py",
        "routes/experiments.py",
        "routes/datacenter.py",
    ):
        if script is not None:
            at.switch_page(script).run()
        assert not at.exception, (script, [e.value for e in at.exception])
        (error,) = [e.value for e in at.error]
        assert error.startswith(f"{path} is damaged (its schema_version row holds 'two'"), script
