from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.store import RunStore


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


def test_runs_list_on_a_missing_store_is_empty_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "none" / "runs.sqlite"
    assert main(["runs", "list", "--store", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", "list", "--store", str(path)]) == 0
    assert "no runs" in capsys.readouterr().out
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
    for argv in (["runs", "list"], ["runs", "show", "1"], ["dashboard"]):
        assert main([*argv, "--store", str(path)]) == 2
        assert complaint in capsys.readouterr().err
    assert path.read_bytes() == content
