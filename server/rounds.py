"""The server's round loop: configure, collect, aggregate per part, evaluate, checkpoint, record.

Written against Flower's `Grid` port (get_node_ids, push_messages, pull_messages), so tests
drive it with an in-memory grid that calls the ClientApp in-process. Each round:
1. wait (up to node-wait-s) for enough nodes: min-available-nodes before the first round,
   min-train-nodes afterwards (a node that died is not waited for forever);
2. send every connected node the global weights and the round's config (deadline, policy...);
3. collect replies (server.collect): each node's reply is pulled on its own, and a node is
   given up when it leaves the federation (missed heartbeats) or at round-timeout-s, so a
   node that dies mid-round, even while uploading its reply, cannot cost the others' updates;
   error replies and unusable updates (missing or malformed counts, weights that do not fit
   the model or hold NaN) are dropped with a warning, so one broken or diverged device cannot
   stop or poison the run;
4. aggregate with the multitask rule (server.aggregation), evaluate per task on the test sets;
5. checkpoint, then record the round in the run store and the results file.
A restarted server finds the latest checkpoint and resumes at the round after it, if the
checkpoint was written with the same settings. `_MAX_EMPTY_ROUNDS` rounds in a row without
one usable update fail the run: every node failing, or a round-timeout-s shorter than the
nodes' rounds, would otherwise finish "ok" with an untrained model.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from dartfl.errors import ConfigError, DartflError
from fltask.config import FlConfig
from fltask.evaluation import Evaluator, demand_weighted
from fltask.records import (
    arrays_to_weights,
    record_to_metrics,
    samples_from_metrics,
    weights_to_arrays,
)
from server.aggregation import ClientUpdate, aggregate, check_weights
from server.checkpoint import latest_checkpoint, save_checkpoint
from server.collect import CollectingGrid, collect_replies

__all__ = ["GridPort", "run_rounds", "summarize_history"]

# What the loop needs of Flower's Grid: what collecting replies needs.
GridPort = CollectingGrid

log = logging.getLogger(__name__)

_COUNTERS = ("requests", "slo-met", "slo-met-inference-only", "num-examples", "fluid-trainable")
_MAX_EMPTY_ROUNDS = 3
# Settings a resumed run may change: how long to wait, how many rounds, where output goes.
# Any other difference (tasks, width, policy, seed, learning rate...) would mix two
# experiments under one record.
_RESUMABLE_KEYS = frozenset(
    {
        "num-server-rounds",
        "round-timeout-s",
        "node-wait-s",
        "min-available-nodes",
        "min-train-nodes",
        "checkpoint-dir",
        "results-file",
        "store",
        "run-label",
    }
)


def _wait_for_nodes(grid: GridPort, needed: int, wait_s: float, sleep_s: float = 0.5) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= needed:
            return nodes
        if time.monotonic() >= deadline:
            raise DartflError(f"only {len(nodes)} node(s) connected after {wait_s:.0f} s, need {needed}")
        log.info("waiting for nodes: %d connected, need %d", len(nodes), needed)
        time.sleep(sleep_s)


def _round_config(cfg: FlConfig, server_round: int) -> ConfigRecord:
    values: dict[str, Any] = dict(cfg.to_run_config())
    values["server-round"] = server_round
    return ConfigRecord(values)


def _fleet_task_loss(client_metrics: list[dict[str, float]], tasks: tuple[str, ...]) -> dict[str, float]:
    """Mean training cross-entropy per task over every sample the fleet trained this round.

    Clients report the sum (`ce-sum-<task>`) and the count (`samples-<task>`), so this is the
    exact pooled mean; it shows which tasks the model is still learning (per-round history).
    A task nobody trained this round is left out.
    """
    out = {}
    for task in tasks:
        reporting = [m for m in client_metrics if f"ce-sum-{task}" in m]
        n = sum(m.get(f"samples-{task}", 0.0) for m in reporting)
        if n > 0:
            out[task] = sum(m[f"ce-sum-{task}"] for m in reporting) / n
    return out


def summarize_history(
    cfg: FlConfig, history: list[dict[str, Any]], totals: dict[str, float]
) -> dict[str, Any]:
    """The run's headline figures from its per-round history and cumulative counters."""
    last = history[-1] if history else {}
    requests = totals.get("requests", 0.0)
    trainable = totals.get("fluid-trainable", 0.0)
    return {
        "policy": cfg.policy,
        "loss_weighting": cfg.weighting,
        "rounds": len(history),
        "accuracy_per_task": last.get("accuracy_per_task", {}),
        "mean_accuracy": last.get("mean_accuracy"),
        "demand_weighted_accuracy": last.get("demand_weighted_accuracy"),
        "slo_attainment": totals.get("slo-met", 0.0) / requests if requests else None,
        "slo_attainment_inference_only": totals.get("slo-met-inference-only", 0.0) / requests
        if requests
        else None,
        "harvest_efficiency": totals.get("num-examples", 0.0) / trainable if trainable else None,
        "samples_trained": int(totals.get("num-examples", 0.0)),
        "samples_per_task": {t: int(totals.get(f"samples-{t}", 0.0)) for t in cfg.task_names},
        "demand_per_task": {t: totals.get(f"requests-{t}", 0.0) for t in cfg.task_names},
        "mean_round_overhead_s": float(np.mean([h["overhead_s"] for h in history])) if history else None,
        "history": history,
    }


def run_rounds(grid: GridPort, cfg: FlConfig, evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Run (or resume) the federated rounds; returns the run summary."""
    evaluator = evaluator or Evaluator(cfg)
    run = _resume(cfg, evaluator.initial_weights())
    store = _open_store(cfg)
    if store is not None and run.store_run is not None and store.get_run(run.store_run) is None:
        store.close()
        raise ConfigError(
            f"the checkpoint in {cfg.checkpoint_dir} records into run {run.store_run} of {store.path}, which "
            "has no such run; resume with the run store it started with, or use another checkpoint-dir"
        )
    if store is not None and run.store_run is None:
        run.store_run = store.start_run("fl", cfg.run_label or f"fl {cfg.policy}", cfg.to_run_config())
    if store is not None:
        log.info("recording as run %s in the run store %s", run.store_run, store.path)
    empty_rounds = 0
    try:
        for server_round in range(run.start, cfg.num_server_rounds + 1):
            entry = _play_round(grid, cfg, evaluator, run, server_round)
            empty_rounds = 0 if entry["replies"] else empty_rounds + 1
            if empty_rounds >= _MAX_EMPTY_ROUNDS:
                raise DartflError(
                    f"{empty_rounds} rounds in a row without one usable update (round {server_round}: "
                    f"{entry['replies'] + entry['rejected']} of {entry['nodes_sent']} node(s) replied); "
                    f"check the nodes' logs, and that round-timeout-s ({cfg.round_timeout_s:g} s) leaves "
                    f"the nodes time for round-deadline-s ({cfg.round_deadline_s:g} s) plus their start-up"
                )
            if cfg.checkpoint_dir:
                save_checkpoint(cfg.checkpoint_dir, server_round, run.weights, run.checkpoint_state(cfg))
            summary = summarize_history(cfg, run.history, run.totals)
            _record(store, run.store_run, cfg.policy, summary)
            if cfg.results_file:
                _write_json(Path(cfg.results_file), {**summary, "run_id": run.store_run})

        summary = summarize_history(cfg, run.history, run.totals)
        if not _record(store, run.store_run, cfg.policy, summary, status="ok") and cfg.results_file:
            log.error("the run's results are in %s", cfg.results_file)
        if cfg.results_file:
            # The file also names the run store's run (null: not recorded), so a caller such as
            # `dartfl fl sim --json` can point at it.
            _write_json(Path(cfg.results_file), {**summary, "run_id": run.store_run})
        return summary
    except BaseException:
        _record(store, run.store_run, cfg.policy, None, status="failed")
        raise
    finally:
        if store is not None:
            store.close()


@dataclass
class _RunState:
    """What a run carries from round to round, and what its checkpoint holds."""

    weights: dict[str, np.ndarray]
    history: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, float] = field(default_factory=dict)
    store_run: int | None = None
    start: int = 1  # the first round to play

    def checkpoint_state(self, cfg: FlConfig) -> dict[str, Any]:
        return {
            "run_config": _resume_config(cfg),  # holds the policy and the tasks too
            "history": self.history,
            "totals": self.totals,
            "store_run": self.store_run,
        }


def _resume(cfg: FlConfig, initial: dict[str, np.ndarray]) -> _RunState:
    """A fresh run, or the one the latest checkpoint holds if it was written with these settings."""
    if not cfg.checkpoint_dir or (ckpt := latest_checkpoint(cfg.checkpoint_dir)) is None:
        return _RunState(initial)
    _check_resumable(cfg, ckpt.state, ckpt.server_round)
    try:
        check_weights(initial, ckpt.weights)
    except DartflError as exc:
        raise ConfigError(
            f"the checkpoint in {cfg.checkpoint_dir} does not fit this model ({exc}); "
            "use another checkpoint-dir"
        ) from None
    log.warning("resuming from the checkpoint of round %d in %s", ckpt.server_round, cfg.checkpoint_dir)
    return _RunState(
        ckpt.weights,
        ckpt.state["history"],
        ckpt.state["totals"],
        ckpt.state.get("store_run"),
        ckpt.server_round + 1,
    )


def _play_round(
    grid: GridPort, cfg: FlConfig, evaluator: Evaluator, run: _RunState, server_round: int
) -> dict[str, Any]:
    """Send the round, aggregate the usable updates into `run`, evaluate; returns the round's
    history entry (also appended to `run.history`)."""
    needed = cfg.min_available_nodes if server_round == run.start else cfg.min_train_nodes
    nodes = _wait_for_nodes(grid, needed, cfg.node_wait_s)
    t0 = time.monotonic()
    config = _round_config(cfg, server_round)
    content = RecordDict({"arrays": weights_to_arrays(run.weights), "config": config})
    messages = [
        Message(content, dst_node_id=node, message_type=MessageType.TRAIN, group_id=str(server_round))
        for node in nodes
    ]
    collected = collect_replies(grid, messages, timeout_s=cfg.round_timeout_s)
    replies = collected.replies
    updates, client_metrics, updated_nodes = _usable_updates(replies, run.weights, cfg, server_round)
    aggregated = len(updates) >= cfg.min_train_nodes
    if aggregated:
        run.weights = aggregate(run.weights, updates)
    else:
        log.warning(
            "round %d: %d update(s), fewer than min-train-nodes: weights kept", server_round, len(updates)
        )
    round_s = time.monotonic() - t0
    accuracy = evaluator.accuracy(run.weights)
    _add_counters(run.totals, client_metrics, aggregated)
    demand = {t: run.totals.get(f"requests-{t}", 0.0) for t in cfg.task_names}
    slowest = max((m.get("client-wall-s", 0.0) for m in client_metrics), default=0.0)
    entry = {
        "round": server_round,
        "nodes_sent": len(messages),
        "replies": len(updates),
        "rejected": len(replies) - len(updates),
        "updated_nodes": updated_nodes,
        "left_nodes": collected.left,
        "timed_out_nodes": collected.timed_out,
        "aggregated": aggregated,
        "accuracy_per_task": accuracy,
        "mean_accuracy": float(np.mean(list(accuracy.values()))),
        "demand_weighted_accuracy": demand_weighted(accuracy, demand),
        "round_s": round_s,
        "slowest_client_s": slowest,
        "slowest_train_s": max((m.get("train-wall-s", 0.0) for m in client_metrics), default=0.0),
        "overhead_s": round_s - slowest,
        "samples": int(sum(u.total_samples for u in updates)),
        "train_loss_per_task": _fleet_task_loss(client_metrics, cfg.task_names),
    }
    run.history.append(entry)
    log.info(
        "round %d/%d: updates from %d of %d nodes, %d samples; accuracy %s, mean %.4f, "
        "demand-weighted %.4f; %.1f s",
        server_round,
        cfg.num_server_rounds,
        len(updates),
        len(messages),
        entry["samples"],
        " ".join(f"{task} {acc:.4f}" for task, acc in accuracy.items()),
        entry["mean_accuracy"],
        entry["demand_weighted_accuracy"],
        round_s,
    )
    log.debug("round %d: %s", server_round, json.dumps(entry))
    return entry


def _add_counters(totals: dict[str, float], client_metrics: list[dict[str, float]], aggregated: bool) -> None:
    """Add the round's counters to the run's totals. The samples of a round whose weights were
    kept never reached the model, so they do not count; its requests and SLO do."""
    for metrics in client_metrics:
        for key, value in metrics.items():
            if not (key in _COUNTERS or key.startswith(("samples-", "requests-"))):
                continue
            trained = key == "num-examples" or key.startswith("samples-")
            if aggregated or not trained:
                totals[key] = totals.get(key, 0.0) + value


def _usable_updates(
    replies: list[tuple[int, Message]], weights: dict[str, np.ndarray], cfg: FlConfig, server_round: int
) -> tuple[list[ClientUpdate], list[dict[str, float]], list[int]]:
    """The (node, reply) pairs' updates, metrics and nodes, without error replies and unusable
    updates."""
    updates, client_metrics, nodes = [], [], []
    for node, reply in replies:
        if reply.has_error():
            log.warning("round %d: node %s failed: %s", server_round, node, reply.error.reason)
            continue
        try:
            metrics = record_to_metrics(reply.content["metrics"])  # type: ignore[arg-type]
            update = ClientUpdate(
                arrays_to_weights(reply.content["arrays"]),  # type: ignore[arg-type]
                samples_from_metrics(metrics, cfg.task_names),
            )
            check_weights(weights, update.weights)
        except (DartflError, KeyError, TypeError, ValueError) as exc:
            log.warning("round %d: node %s sent an unusable update, dropped: %s", server_round, node, exc)
            continue
        updates.append(update)
        client_metrics.append(metrics)
        nodes.append(node)
    return updates, client_metrics, nodes


def _resume_config(cfg: FlConfig) -> dict[str, Any]:
    return {k: v for k, v in cfg.to_run_config().items() if k not in _RESUMABLE_KEYS}


def _check_resumable(cfg: FlConfig, state: dict[str, Any], server_round: int) -> None:
    """ConfigError if the checkpoint was written by a run with other settings."""
    if "run_config" in state:
        saved, now = state["run_config"], _resume_config(cfg)
    else:  # a checkpoint from before the settings were saved: only the policy and the tasks
        saved = {"policy": state.get("policy"), "tasks": state.get("tasks")}
        now = {"policy": cfg.policy, "tasks": list(cfg.task_names)}
    differ = [f"{k}: {saved[k]!r} -> {now.get(k)!r}" for k in sorted(saved) if saved[k] != now.get(k)]
    if differ:
        raise ConfigError(
            f"the checkpoint of round {server_round} in {cfg.checkpoint_dir} belongs to a run with other "
            f"settings ({'; '.join(differ)}); run with the same settings to resume, "
            "or use another checkpoint-dir"
        )


def _record(
    store: Any, run_id: int | None, policy: str, summary: dict[str, Any] | None, status: str = ""
) -> bool:
    """Record the summary (and the run's final status) in the run store; False, with a
    warning, if the store cannot be written (locked past its busy timeout, disk full): the
    record is an extra copy, and the checkpoint and results file hold the run, so training goes on."""
    if store is None or run_id is None:
        return True
    try:
        if summary is not None:
            store.add_result(run_id, policy, summary)
        if status:
            store.finish_run(run_id, status)
    except (sqlite3.Error, DartflError) as exc:
        log.warning("run store %s: cannot record run %d (%s)", store.path, run_id, exc)
        return False
    return True


def _open_store(cfg: FlConfig) -> Any:
    path = cfg.store_path
    if path is None:
        return None
    from dartfl.store import RunStore

    return RunStore(path)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)
