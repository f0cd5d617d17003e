"""The ServerApp's round loop in-process: the real ClientApp behind an in-memory grid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dartfl.store import RunStore
from edge_client.client_app import app as client_app
from edge_client.fl_config import FlConfig
from server.evaluation import Evaluator
from server.local_grid import LocalGrid
from server.rounds import run_rounds

SMALL: dict[str, Any] = {
    "max_train_per_task": 300,
    "max_test_per_task": 100,
    "round_deadline_s": 5.0,
    "min_available_nodes": 2,
    "node_wait_s": 1.0,
}


def _grid(cfg: FlConfig, n: int = 2) -> LocalGrid:
    nodes = {10 + i: {"partition-id": i, "num-partitions": n} for i in range(n)}
    return LocalGrid(client_app, nodes, cfg.to_run_config())


def test_rounds_aggregate_evaluate_and_record(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    cfg = FlConfig(num_server_rounds=2, store=str(store), results_file=str(tmp_path / "r.json"), **SMALL)
    summary = run_rounds(_grid(cfg), cfg)
    assert summary["rounds"] == 2
    assert [h["replies"] for h in summary["history"]] == [2, 2]
    assert set(summary["accuracy_per_task"]) == {"digits", "fashion", "uci-digits"}
    assert 0.0 <= summary["slo_attainment"] <= 1.0
    assert summary["samples_trained"] == sum(summary["samples_per_task"].values()) > 0
    # Training helped: the global model beats the initial one.
    evaluator = Evaluator(cfg)
    initial = evaluator.accuracy(evaluator.initial_weights())
    assert summary["mean_accuracy"] > sum(initial.values()) / 3 + 0.05
    with RunStore(store) as s:
        runs = s.list_runs(kind="fl")
        assert len(runs) == 1 and runs[0].status == "ok"
        assert s.results(runs[0].run_id)["dart"]["rounds"] == 2
    assert (tmp_path / "r.json").is_file()


def test_a_restarted_server_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    first = FlConfig(num_server_rounds=1, checkpoint_dir=str(tmp_path / "ckpt"), **SMALL)
    run_rounds(_grid(first), first)  # the server "crashes" after round 1
    again = FlConfig(num_server_rounds=2, checkpoint_dir=str(tmp_path / "ckpt"), **SMALL)
    grid = _grid(again)
    summary = run_rounds(grid, again)
    assert {m.metadata.group_id for m in grid.sent} == {"2"}  # round 1 was not redone
    assert [h["round"] for h in summary["history"]] == [1, 2]


def test_a_failed_node_is_dropped_and_the_round_still_finishes(tmp_path: Path) -> None:
    cfg = FlConfig(num_server_rounds=1, **SMALL)
    grid = _grid(cfg)
    grid.failing.add(11)
    summary = run_rounds(grid, cfg)
    assert summary["history"][0]["nodes_sent"] == 2
    assert summary["history"][0]["replies"] == 1


def test_too_few_nodes_fail_after_the_wait(tmp_path: Path) -> None:
    cfg = FlConfig(num_server_rounds=1, **{**SMALL, "min_available_nodes": 3})
    with pytest.raises(Exception, match="need 3"):
        run_rounds(_grid(cfg), cfg)


def test_each_round_records_the_fleet_training_loss_per_task(tmp_path: Path) -> None:
    cfg = FlConfig(num_server_rounds=2, **SMALL)
    summary = run_rounds(_grid(cfg), cfg)
    first, second = (h["train_loss_per_task"] for h in summary["history"])
    assert set(first) == set(cfg.task_names)
    # An untrained 10-class head starts near ln(10) = 2.3; training brings the pooled mean down.
    assert all(0.0 < first[t] < 2.4 for t in cfg.task_names)
    assert sum(second.values()) < sum(first.values())
