"""The ServerApp's round loop in-process: the real ClientApp behind an in-memory grid."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

from dartfl.errors import ConfigError, DartflError
from dartfl.store import RunStore
from edge_client.client_app import app as client_app
from fltask.config import FlConfig
from fltask.evaluation import Evaluator
from fltask.records import arrays_to_weights, weights_to_arrays
from server.checkpoint import save_checkpoint
from server.local_grid import LocalGrid
from server.rounds import _record, run_rounds

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
    written = json.loads((tmp_path / "r.json").read_text())
    assert written == {**summary, "run_id": runs[0].run_id}  # the file names the stored run


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


class _TamperingGrid(LocalGrid):
    """Node 11's reply is corrupted by `tamper[round]` before the server sees it."""

    def __init__(self, *args: Any, tamper: dict[int, Callable[[Message], None]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tamper = tamper

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        replies = list(super().pull_messages(message_ids))
        for reply in replies:
            server_round = int(reply.metadata.group_id)
            if reply.metadata.src_node_id == 11 and server_round in self.tamper:
                self.tamper[server_round](reply)
        return replies


def _nan_weight(reply: Message) -> None:  # a device whose training diverged
    weights = arrays_to_weights(reply.content["arrays"])  # type: ignore[arg-type]
    key = next(iter(weights))
    weights[key] = np.full_like(weights[key], np.nan)
    reply.content["arrays"] = weights_to_arrays(weights)


def _negative_count(reply: Message) -> None:
    reply.content["metrics"]["samples-digits"] = -5  # type: ignore[index]


def _no_weights(reply: Message) -> None:
    del reply.content["arrays"]


def test_unusable_updates_are_dropped_and_the_run_goes_on(tmp_path: Path) -> None:
    # One broken or diverged device used to abort the whole run (or poison the global model).
    cfg = FlConfig(num_server_rounds=3, **SMALL)
    tamper = {1: _nan_weight, 2: _negative_count, 3: _no_weights}
    grid = _TamperingGrid(
        client_app,
        {10: {"partition-id": 0, "num-partitions": 2}, 11: {"partition-id": 1, "num-partitions": 2}},
        cfg.to_run_config(),
        tamper=tamper,
    )
    summary = run_rounds(grid, cfg)
    assert [h["replies"] for h in summary["history"]] == [1, 1, 1]
    assert [h["rejected"] for h in summary["history"]] == [1, 1, 1]
    evaluator = Evaluator(cfg)
    initial = evaluator.accuracy(evaluator.initial_weights())
    assert summary["mean_accuracy"] > sum(initial.values()) / 3 + 0.05


def test_rounds_without_a_usable_update_fail_the_run_and_its_record(tmp_path: Path) -> None:
    # Every node failing (or a round-timeout-s shorter than the nodes' rounds) finished the
    # run "ok" with an untrained model.
    store = tmp_path / "runs.sqlite"
    cfg = FlConfig(num_server_rounds=5, store=str(store), **SMALL)
    grid = _grid(cfg)
    grid.failing.update({10, 11})
    with pytest.raises(DartflError, match=r"3 rounds in a row without one usable update.*round-timeout-s"):
        run_rounds(grid, cfg)
    assert {m.metadata.group_id for m in grid.sent} == {"1", "2", "3"}
    with RunStore(store) as s:
        assert [r.status for r in s.list_runs(kind="fl")] == ["failed"]


def test_samples_of_a_round_whose_weights_were_kept_do_not_count(tmp_path: Path) -> None:
    cfg = FlConfig(num_server_rounds=1, **{**SMALL, "min_train_nodes": 2})
    grid = _grid(cfg)
    grid.failing.add(11)
    summary = run_rounds(grid, cfg)
    assert summary["history"][0]["aggregated"] is False
    assert summary["samples_trained"] == 0 and summary["harvest_efficiency"] == 0.0
    assert summary["slo_attainment"] is not None  # the requests were served all the same


def test_a_checkpoint_written_with_other_settings_is_refused(tmp_path: Path) -> None:
    first = FlConfig(num_server_rounds=1, checkpoint_dir=str(tmp_path / "ckpt"), **SMALL)
    run_rounds(_grid(first), first)
    other = FlConfig(num_server_rounds=2, checkpoint_dir=str(tmp_path / "ckpt"), learning_rate=0.1, **SMALL)
    with pytest.raises(ConfigError, match=r"other settings \(learning-rate: 0.05 -> 0.1\)"):
        run_rounds(_grid(other), other)
    # More rounds and a longer timeout are no other experiment: the run resumes.
    more = FlConfig(
        num_server_rounds=2, checkpoint_dir=str(tmp_path / "ckpt"), **{**SMALL, "node_wait_s": 5.0}
    )
    assert run_rounds(_grid(more), more)["rounds"] == 2


def test_a_store_that_cannot_be_written_does_not_stop_training(caplog: pytest.LogCaptureFixture) -> None:
    class LockedStore:
        path = "runs.sqlite"

        def add_result(self, *args: Any) -> None:
            raise sqlite3.OperationalError("database is locked")

    assert _record(LockedStore(), 7, "dart", {"rounds": 1}) is False
    assert "cannot record run 7 (database is locked)" in caplog.text
    assert _record(None, None, "dart", {"rounds": 1}) is True


def test_a_checkpoint_from_before_settings_were_saved_is_checked_on_policy_and_tasks(tmp_path: Path) -> None:
    # Such a checkpoint holds only the policy and the tasks: those must still match.
    cfg = FlConfig(num_server_rounds=2, checkpoint_dir=str(tmp_path / "ckpt"), **SMALL)
    old_state = {"policy": "dart", "tasks": list(cfg.task_names), "history": [], "totals": {}}
    save_checkpoint(tmp_path / "ckpt", 1, Evaluator(cfg).initial_weights(), old_state)
    other = FlConfig(
        num_server_rounds=2, checkpoint_dir=str(tmp_path / "ckpt"), policy="inference-first", **SMALL
    )
    with pytest.raises(ConfigError, match=r"policy: 'dart' -> 'inference-first'"):
        run_rounds(_grid(other), other)
    grid = _grid(cfg)
    assert run_rounds(grid, cfg)["rounds"] == 1  # round 2 only: round 1 came from the checkpoint
    assert {m.metadata.group_id for m in grid.sent} == {"2"}


def test_a_node_killed_while_uploading_its_reply_leaves_the_run_to_the_survivor() -> None:
    # Issue 16: a SuperNode killed while uploading its reply left a reply whose objects never
    # came; pulling it blocked for the SuperLink's push session (180 s) past round-timeout-s,
    # and the survivor's update, which came in meanwhile, was lost with it.
    cfg = FlConfig(num_server_rounds=2, **{**SMALL, "round_timeout_s": 20.0})
    grid = _grid(cfg)
    grid.offline_after_s = 1.0  # it misses its heartbeats
    grid.session_ttl_s = 60.0  # the stalled pull outlasts the round's timeout
    grid.kill(11, "uploading")
    grid.reply_after_s[10] = 0.5  # the survivor's reply comes after the killed node's
    try:
        summary = run_rounds(grid, cfg)
    finally:
        grid.close()
    first, second = summary["history"]
    assert first["updated_nodes"] == [10] and first["aggregated"]
    assert first["left_nodes"] == [11] and first["timed_out_nodes"] == []
    assert first["round_s"] < cfg.round_timeout_s  # given up when it left, not at the timeout
    assert second["nodes_sent"] == 1 and second["updated_nodes"] == [10]  # the run goes on without it


def test_a_node_killed_while_training_is_not_sent_later_rounds() -> None:
    cfg = FlConfig(num_server_rounds=2, **{**SMALL, "round_timeout_s": 20.0})
    grid = _grid(cfg)
    grid.offline_after_s = 1.0
    grid.kill(11, "training")
    summary = run_rounds(grid, cfg)
    first, second = summary["history"]
    assert first["updated_nodes"] == [10] and first["aggregated"] and first["round_s"] < 20.0
    assert second["nodes_sent"] == 1 and second["updated_nodes"] == [10]
