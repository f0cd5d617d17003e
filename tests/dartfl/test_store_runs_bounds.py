"""The run store's readers on ids and limits beyond SQLite's integers and times no date can be."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.store import RunStore


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    with RunStore(tmp_path / "runs.sqlite") as runs:
        runs.finish_run(runs.start_run("sim", "one", {}))
    return RunStore(tmp_path / "runs.sqlite")


@pytest.mark.parametrize("run_id", [2**63, -(2**63) - 1, 10**30])
def test_an_id_beyond_sqlites_integers_is_no_run(store: RunStore, run_id: int) -> None:
    # Binding it raised OverflowError, which no caller expects of a lookup.
    with store:
        assert store.get_run(run_id) is None
        with pytest.raises(ConfigError, match=f"no run {run_id} in run store"):
            store.delete_run(run_id)


def test_a_limit_beyond_sqlites_integers_means_every_run(store: RunStore) -> None:
    with store:
        assert [r.label for r in store.list_runs(limit=10**30)] == ["one"]


@pytest.mark.parametrize("created", [1e300, -1e12, 1e10 + 1])
def test_a_start_time_no_date_can_be_is_named_and_read_as_nan(store: RunStore, created: float) -> None:
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET created_s = ?", (created,))
    conn.close()
    with store:
        run = store.get_run(1)
    assert run is not None and math.isnan(run.created_s) and run.duration_s is None
    assert run.damage == (
        f"{store.path}: run 1's start time is not a date ({created:g}, not a Unix time in [0, 1e+10]): "
        f"delete the run with `dartfl runs delete 1 --store {store.path}` or restore a backup",
    )
