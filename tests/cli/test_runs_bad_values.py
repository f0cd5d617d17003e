"""`dartfl runs` on values no command writes: times no date can be, ids and limits beyond
SQLite's integers, non-finite metrics. Each reads as one line (or strict JSON), never a traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.store import RunStore

HUGE = "99999999999999999999999"  # above SQLite's largest INTEGER, 2**63 - 1


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as runs:
        for label in ("first", "second"):
            run = runs.start_run("sim", label, {"profile": "pi4"})
            runs.add_result(run, "dart", {"slo_attainment": 0.99, "samples_per_s": 12.5})
            runs.finish_run(run)
    return path


def _set(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    conn.close()


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_time_no_date_can_be_reads_as_damage_with_the_rest_of_the_run(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `runs list` died with "ValueError: year -29719 is out of range", `runs show` with
    # "OverflowError: timestamp out of range".
    _set(store, "UPDATE runs SET created_s = 1e300 WHERE run_id = 1")
    _set(store, "UPDATE runs SET created_s = -1e12, finished_s = 1e12 WHERE run_id = 2")
    recover = "delete the run with `dartfl runs delete {id} --store " + f"{store}` or restore a backup"
    start_1 = f"{store}: run 1's start time is not a date (1e+300, not a Unix time in [0, 1e+10]): "
    start_1 += recover.format(id=1)
    start_2 = f"{store}: run 2's start time is not a date (-1e+12, not a Unix time in [0, 1e+10]): "
    start_2 += recover.format(id=2)
    finish_2 = f"{store}: run 2's finish time is not a date (1e+12, not a Unix time in [0, 1e+10]): "
    finish_2 += recover.format(id=2)

    assert main(["runs", "list", "--store", str(store)]) == 0
    out, err = capsys.readouterr()
    assert err == "".join(f"dartfl: warning: {line}\n" for line in (start_2, finish_2, start_1))
    assert "second" in out and "?" in out and "(damaged)" in out

    assert main(["runs", "list", "--store", str(store), "--json"]) == 0
    listed = _strict(capsys.readouterr().out)
    assert isinstance(listed, list)
    assert (listed[0]["created_s"], listed[0]["finished_s"]) == (None, None)  # run 2, newest

    assert main(["runs", "show", "1", "--store", str(store)]) == 1
    out, err = capsys.readouterr()
    assert "started ?" in out and "slo_attainment" in out  # the rest still reads
    assert err == f"dartfl: damaged: {start_1}\n"
    assert main(["runs", "show", "2", "--store", str(store), "--json"]) == 1
    out, err = capsys.readouterr()
    shown = _strict(out)
    assert isinstance(shown, dict) and shown["damage"] == [start_2, finish_2]
    assert err == f"dartfl: damaged: {start_2}\ndartfl: damaged: {finish_2}\n"


@pytest.mark.parametrize("run_id", [HUGE, f"-{HUGE}"])
def test_a_run_id_beyond_sqlites_integers_is_no_run(
    store: Path, capsys: pytest.CaptureFixture[str], run_id: str
) -> None:
    # OverflowError: Python int too large to convert to SQLite INTEGER.
    assert main(["runs", "show", run_id, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err == f"dartfl: error: no run {run_id} in {store}; see `dartfl runs list --store {store}`\n"
    assert main(["runs", "delete", run_id, "--store", str(store), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"dartfl: error: no run {run_id} in run store {store}; list its runs with "
        f"`dartfl runs list --store {store}`\n"
    )


def test_a_limit_beyond_sqlites_integers_lists_every_run(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "At most this many": no store holds more rows than SQLite's largest integer.
    assert main(["runs", "list", "--store", str(store), "--limit", HUGE, "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [2, 1]


def test_runs_show_json_prints_a_non_finite_metric_as_null(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A row written by hand holds NaN, which Python's json reads; --json printed a bare NaN.
    _set(
        store,
        """UPDATE results SET metrics = '{"samples_per_s": NaN, "peak": -Infinity, """
        """"per_task": {"a": [Infinity, 1.5]}, "slo_attainment": "high"}' WHERE run_id = 2""",
    )
    assert main(["runs", "show", "2", "--store", str(store), "--json"]) == 0
    shown = _strict(capsys.readouterr().out)
    assert isinstance(shown, dict)
    assert shown["results"]["dart"] == {
        "samples_per_s": None,
        "peak": None,
        "per_task": {"a": [None, 1.5]},
        "slo_attainment": "high",
    }
    assert main(["runs", "show", "2", "--store", str(store)]) == 0  # the table reads too
    assert "samples_per_s" in capsys.readouterr().out
