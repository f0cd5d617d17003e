"""`dartfl runs delete --json` prints JSON, and `runs show` reads whole at 80 columns: every
metric name distinguishable, long values summarized, no CLI bookkeeping in the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.store import DecisionRow, RunStore

# What `dartfl fl sim` records for a policy (abridged): per-task metrics and a per-round history.
TASKS = ("digits", "fashion", "uci-digits")
FL_RESULT = {
    "policy": "dart",
    "loss_weighting": "demand",
    "rounds": 3,
    "accuracy_per_task": dict(zip(TASKS, (0.656, 0.7001, 0.7911), strict=True)),
    "samples_per_task": dict(zip(TASKS, (1147, 6514, 2022), strict=True)),
    "demand_per_task": dict(zip(TASKS, (686.0, 6116.0, 1561.0), strict=True)),
    "history": [
        {"round": r, "nodes_sent": 2, "replies": 2, "updated_nodes": [6621728845732961249, 7]}
        for r in (1, 2, 3)
    ],
}
# What `dartfl sim` records as its config: its whole argparse namespace.
SIM_CONFIG = {
    "verbose": 0,
    "command": "sim",
    "workload": "poisson",
    "duration_s": 10.0,
    "json": False,
    "no_plot": False,
    "no_store": False,
    "workload_flags_given": ["duration_s", "workload"],
    "task_names": list(TASKS),
}


def test_runs_delete_json_prints_one_json_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        run = store.start_run("sim", "x", {})
        store.add_result(run, "dart", {"slo_attainment": 1.0})
        store.add_decisions(
            run, "dart", [DecisionRow(t * 0.25, 1, 0.6, 8, 32, (0.5, 0.5), 4) for t in range(5)]
        )
        store.finish_run(run)
    assert main(["runs", "delete", str(run), "--store", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"deleted": run, "store": str(path), "results": 1, "decisions": 5}
    assert out.count("\n") == 1 and err == ""


def test_runs_delete_json_of_a_missing_run_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        store.finish_run(store.start_run("sim", "x", {}))
    assert main(["runs", "delete", "9", "--store", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "no run 9 in run store" in err


@pytest.fixture
def shown(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """`runs show` of a run with an FL run's results and a sim run's config, at 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        run = store.start_run("sim", "x", SIM_CONFIG)
        store.add_result(run, "dart", FL_RESULT)
        store.finish_run(run)
    assert main(["runs", "show", str(run), "--store", str(path)]) == 0
    return capsys.readouterr().out


def test_runs_show_keeps_every_metric_name_whole_at_80_columns(shown: str) -> None:
    # They were cut to `accuracy_per…` three times over beside a history blob.
    assert max(len(line) for line in shown.splitlines()) <= 80
    assert "…" not in shown
    words = shown.split()
    for prefix in ("accuracy_per_task", "samples_per_task", "demand_per_task"):
        for task in TASKS:
            assert words.count(f"{prefix}.{task}") == 1


def test_runs_show_summarizes_a_long_list_and_points_to_json(shown: str) -> None:
    (row,) = [line for line in shown.splitlines() if "history" in line]
    assert "(3 entries; --json shows them)" in row
    assert "nodes_sent" not in shown
    assert '["digits", "fashion", "uci-digits"]' in shown  # a short list still shows whole


def test_runs_show_leaves_out_the_recording_commands_own_flags(shown: str) -> None:
    keys = {line.split()[1] for line in shown.splitlines() if line.startswith("│")}
    assert {"workload", "duration_s", "task_names"} <= keys
    assert not keys & {"verbose", "json", "no_plot", "no_store", "command", "workload_flags_given"}


def test_runs_show_json_keeps_the_whole_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        run = store.start_run("sim", "x", SIM_CONFIG)
        store.add_result(run, "dart", FL_RESULT)
        store.finish_run(run)
    assert main(["runs", "show", str(run), "--store", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["run"]["config"] == SIM_CONFIG
    assert record["results"]["dart"]["history"] == FL_RESULT["history"]


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "--workload", "poisson", "--duration-s", "5", "--profile", "x86-1core", "--policy", "dart"],
        ["fleet", "--devices", "2", "--duration-s", "5", "--profile", "x86-1core", "--policy", "dart"],
        ["dc", "sim", "--gpus", "8", "--steps", "3", "--policy", "sync", "--no-plot"],
    ],
)
def test_a_recorded_config_holds_the_run_not_the_commands_bookkeeping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    store = tmp_path / "runs.sqlite"
    assert main([*argv, "--json", "--store", str(store)]) == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    with RunStore(store) as runs:
        run = runs.get_run(run_id)
    assert run is not None
    assert not set(run.config) & {"handler", "verbose", "json", "no_plot", "command", "workload_flags_given"}
    assert "seed" in run.config  # what ran is kept
