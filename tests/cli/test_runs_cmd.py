from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.cli.main import main
from dartfl.store import SCHEMA_VERSION, RunStore
from dartfl.store import connection as store_connection
from tests.store_fixtures import damaged_copy, healthy_store, locked_copy


@pytest.fixture
def store_with_runs(tmp_path: Path) -> tuple[Path, int, int]:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        sim = store.start_run("sim", "bursty", {"rate": 50, "profile": "pi4"})
        store.add_result(sim, "dart", {"slo_attainment": 0.991, "per_task": {"fashion": {"p99_s": 0.12}}})
        store.add_result(sim, "inference-first:8", {"slo_attainment": 0.95})
        store.finish_run(sim)
        dc = store.start_run("dc", None, {"gpus": 8})
    return path, sim, dc


def test_runs_list_json_lists_newest_first(
    store_with_runs: tuple[Path, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, sim, dc = store_with_runs
    assert main(["runs", "list", "--store", str(path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in runs] == [dc, sim]
    assert runs[1]["policies"] == ["dart", "inference-first:8"]
    assert (runs[1]["status"], runs[0]["status"]) == ("ok", "running")


def test_runs_list_filters_by_kind(
    store_with_runs: tuple[Path, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, sim, _ = store_with_runs
    assert main(["runs", "list", "--store", str(path), "--kind", "sim", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [sim]


def test_runs_list_table_uses_default_store_from_env(
    store_with_runs: tuple[Path, int, int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, _, _ = store_with_runs
    monkeypatch.setenv("DARTFL_STORE", str(path))
    assert main(["runs", "list"]) == 0
    out = capsys.readouterr().out
    assert "bursty" in out and "running" in out


def test_runs_list_on_a_missing_default_store_is_empty_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default store, before any run; a missing --store is a mistyped path (test_runs_store_paths.py).
    monkeypatch.delenv("DARTFL_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "none"))
    path = tmp_path / "none" / "dartfl" / "runs.sqlite"
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", "list"]) == 0
    assert "no run store yet" in capsys.readouterr().out
    assert not path.parent.exists()


def test_runs_show_json_has_config_and_results(
    store_with_runs: tuple[Path, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, sim, _ = store_with_runs
    assert main(["runs", "show", str(sim), "--store", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["config"] == {"rate": 50, "profile": "pi4"}
    assert shown["results"]["dart"]["per_task"]["fashion"]["p99_s"] == 0.12


def test_runs_show_table_has_a_column_per_policy(
    store_with_runs: tuple[Path, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, sim, _ = store_with_runs
    assert main(["runs", "show", str(sim), "--store", str(path)]) == 0
    out = capsys.readouterr().out
    for text in ("slo_attainment", "per_task.fashion.p99_s", "0.991", "dart", "pi4"):
        assert text in out


def test_runs_show_unknown_run_exits_2_naming_it(
    store_with_runs: tuple[Path, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = store_with_runs
    assert main(["runs", "show", "999", "--store", str(path)]) == 2
    assert "no run 999" in capsys.readouterr().err


def test_runs_show_on_a_missing_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", "1", "--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_runs_list_on_a_corrupt_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"garbage" * 1000)
    assert main(["runs", "list", "--store", str(path)]) == 2
    assert "junk.sqlite" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "complaint"), [(b"", "an empty file"), (b"time_s,task\n", "not an SQLite")]
)
def test_reading_a_file_that_is_no_store_names_it_and_leaves_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, complaint: str
) -> None:
    # `runs list --store empty.csv` turned the empty file into a 40 KB run store.
    path = tmp_path / "w.csv"
    path.write_bytes(content)
    commands = [["runs", "list"], ["runs", "show", "1"]]
    if content:  # an empty file is a new store to the dashboard, as to `dartfl record`
        commands.append(["dashboard"])
    for argv in commands:
        assert main([*argv, "--store", str(path)]) == 2
        assert complaint in capsys.readouterr().err
    assert path.read_bytes() == content


# -- damaged stores: one line each (what, where, how to recover), never a traceback ----------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return healthy_store(tmp_path_factory.mktemp("runs-cmd") / "runs.sqlite")


def test_runs_list_names_a_run_whose_config_is_not_json_and_lists_them_all(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It died with JSONDecodeError.
    monkeypatch.setenv("COLUMNS", "200")  # the table's whole status column
    path = damaged_copy(template, tmp_path, "malformed-json")
    assert main(["runs", "list", "--store", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["run_id"] for r in json.loads(out)] == [4, 3, 2, 1]
    assert err == (
        f"dartfl: warning: {path}: run 1's config is not JSON (Expecting property name enclosed in "
        f"double quotes at character 23): delete the run with `dartfl runs delete 1 --store {path}` "
        "or restore a backup\n"
    )
    assert main(["runs", "list", "--store", str(path)]) == 0
    assert "ok (damaged)" in capsys.readouterr().out


def test_runs_show_prints_what_reads_names_each_damaged_part_and_exits_1(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged_copy(template, tmp_path, "malformed-json")
    assert main(["runs", "show", "1", "--store", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "slo_attainment" in out and "0.99" in out  # its results still read
    assert err.startswith(f"dartfl: damaged: {path}: run 1's config is not JSON") and err.count("\n") == 1
    assert main(["runs", "show", "2", "--store", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    shown = json.loads(out)
    assert shown["run"]["config"] == {"profile_name": "pi4"} and shown["results"] == {}
    assert shown["damage"] == [err.removeprefix("dartfl: damaged: ").rstrip("\n")]
    assert "run 2's result for policy 'dart' is not JSON" in err


def test_runs_delete_removes_a_damaged_run(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged_copy(template, tmp_path, "malformed-json")
    assert main(["runs", "delete", "1", "--store", str(path)]) == 0
    assert capsys.readouterr().out == f"deleted run 1 from {path} (2 results, 400 decisions)\n"
    assert main(["runs", "list", "--store", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["run_id"] for r in json.loads(out)] == [4, 3, 2] and err == ""
    assert main(["runs", "delete", "1", "--store", str(path)]) == 2
    assert "no run 1 in run store" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("damage", "argv", "code", "complaint"),
    [
        ("truncated", ["list"], 2, "is damaged (database disk image is malformed): restore a backup"),
        ("truncated", ["show", "1"], 2, "is damaged (database disk image is malformed): restore a backup"),
        ("missing-table", ["delete", "9"], 2, "no run 9 in run store"),  # the writer repaired it
        ("newer-schema", ["delete", "1"], 2, "writing refused so as not to damage it"),
    ],
)
def test_runs_on_a_damaged_store_exits_with_one_line(
    template: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: str,
    argv: list[str],
    code: int,
    complaint: str,
) -> None:
    path = damaged_copy(template, tmp_path, damage)
    assert main(["runs", *argv, "--store", str(path)]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and complaint in err and "Traceback" not in err


def test_runs_list_reads_a_newer_store_with_a_warning(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = damaged_copy(template, tmp_path, "newer-schema")
    before = path.read_bytes()
    assert main(["runs", "list", "--store", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 4
    assert err.startswith(f"dartfl: warning: {path} has schema version {SCHEMA_VERSION + 1}, newer than")
    assert path.read_bytes() == before


def test_runs_list_on_a_locked_store_exits_1_saying_so(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_connection, "READ_BUSY_TIMEOUT_S", 0.1)
    with locked_copy(template, tmp_path) as path:
        assert main(["runs", "list", "--store", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"dartfl: failed: {path} is locked by another process")


# -- durations: a run recorded once it is over starts when it began --------------------------


def test_a_recorded_run_lasts_from_its_start_not_from_when_it_was_recorded(tmp_path: Path) -> None:
    # `dc sim` of 62 s was recorded as 0.02 s, replays as 0.0 s: the run was started in the
    # store only once it was over. record_runs takes when it began.
    from dartfl.cli.recording import record_runs

    arrivals = Arrivals(np.array([0.5, 1.0]), np.array([0, 0]), ("digits",), 2.0)
    args = argparse.Namespace(seed=1)
    started = time.time() - 62.0
    run_id = record_runs(tmp_path / "s.sqlite", "replay", args, arrivals, "replay", [], started_s=started)
    with RunStore(tmp_path / "s.sqlite") as store:
        run = store.get_run(run_id)
    assert run is not None and run.created_s == started
    assert run.duration_s is not None and run.duration_s >= 62.0


@pytest.mark.parametrize(
    ("module", "argv", "kind"),
    [
        (
            "sim_cmd",
            ["sim", "--workload", "poisson", "--duration-s", "5", "--profile", "pi4", "--policy", "dart"],
            "sim",
        ),
        # `dc sim` started its run in the store once the simulation was over: 0.02 s for 62 s.
        ("dc_cmd", ["dc", "sim", "--gpus", "8", "--steps", "2", "--policy", "static:0.5"], "dc"),
    ],
)
def test_a_simulation_records_the_time_it_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, argv: list[str], kind: str
) -> None:
    import importlib

    class SlowClock:  # the simulation "began" 62 s before it was recorded
        @staticmethod
        def time() -> float:
            return time.time() - 62.0

    monkeypatch.setattr(importlib.import_module(f"dartfl.cli.{module}"), "time", SlowClock)
    store = tmp_path / "runs.sqlite"
    assert main([*argv, "--no-plot", "--json", "--store", str(store)]) == 0
    with RunStore(store) as runs:
        (run,) = runs.list_runs()
    assert run.kind == kind
    assert run.duration_s is not None and run.duration_s >= 62.0


def test_an_edge_replay_is_recorded_from_when_it_began(tmp_path: Path) -> None:
    # Replays were recorded as 0.0 s long.
    from types import SimpleNamespace

    from dartfl.cli.replay_cmd import _record
    from dartfl.fluid import FluidTerms
    from dartfl.metrics import RunRecord

    times = np.array([0.5, 1.0])
    record = RunRecord(
        "dart", ("digits",), (0.25,), 2.0, times, times + 0.01, np.zeros(2, np.int64),
        np.zeros(2, bool), (0,), 0.0, FluidTerms(0.0, 0.0), 1, np.zeros(0),
    )  # fmt: skip
    arrivals = Arrivals(times, np.array([0, 0]), ("digits",), 2.0)
    args = argparse.Namespace(store=tmp_path / "s.sqlite", device="pi-01", seed=1)
    started = time.time() - 62.0
    replayed = SimpleNamespace(record=record, arrivals=arrivals, started_s=started)
    _record(args, replayed, {"requests": 2})  # type: ignore[arg-type]
    with RunStore(tmp_path / "s.sqlite") as store:
        (run,) = store.list_runs()
    assert (run.kind, run.created_s) == ("replay", started)
    assert run.duration_s is not None and run.duration_s >= 62.0


def test_runs_list_reads_whole_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "runs.sqlite"
    policies = ["dart", "inference-only", "inference-first:4", "static:0.5", "proportional", "threshold"]
    with RunStore(path) as store:
        run = store.start_run("sim", "25,972 req / 300 s on pi4", {}, started_s=time.time() - 62)
        for policy in policies:
            store.add_result(run, policy, {"slo_attainment": 0.9})
        store.finish_run(run)
    assert main(["runs", "list", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out  # nothing collapsed to an ellipsis
    words = out.split()
    assert all(policy in words for policy in policies)  # every policy whole
    assert "62 s" in out  # the run's real duration


def test_runs_show_names_every_metric_whole_with_one_number_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "runs.sqlite"
    per_task = {"digits": 2385, "fashion": 2285, "uci-digits": 2351}
    with RunStore(path) as store:
        run = store.start_run("sim", None, {})
        for policy in ("dart", "inference-only", "inference-first:4", "static:0.5", "proportional"):
            store.add_result(run, policy, {"requests": 25972, "p99_latency_s": 0.58163, "per_task": per_task})
        store.finish_run(run)
    assert main(["runs", "show", str(run), "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80  # policies that do not fit: a further table
    words = out.split()
    for task in per_task:
        assert words.count(f"per_task.{task}") == out.count("results (") > 1  # whole, in every table
    assert "…" not in out
    assert "25,972" in out and "0.5816" in out and "2,385" in out
