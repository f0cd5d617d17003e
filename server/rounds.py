"""The server's round loop: configure, collect, aggregate per part, evaluate, checkpoint, record.

Written against Flower's `Grid` port (get_node_ids, send_and_receive), so tests drive it with
an in-memory grid that calls the ClientApp in-process. Each round:
1. wait (up to node-wait-s) for enough nodes: min-available-nodes before the first round,
   min-train-nodes afterwards (a node that died is not waited for forever);
2. send every connected node the global weights and the round's config (deadline, policy...);
3. collect replies until round-timeout-s; error replies and late nodes are dropped;
4. aggregate with the multitask rule (server.aggregation), evaluate per task on the test sets;
5. checkpoint, then record the round in the run store and the results file.
A restarted server finds the latest checkpoint and resumes at the round after it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from dartfl.errors import ConfigError, DartflError
from edge_client.fl_config import FlConfig
from edge_client.fl_records import (
    arrays_to_weights,
    record_to_metrics,
    samples_from_metrics,
    weights_to_arrays,
)
from server.aggregation import ClientUpdate, aggregate
from server.checkpoint import latest_checkpoint, save_checkpoint
from server.evaluation import Evaluator, demand_weighted

__all__ = ["GridPort", "run_rounds", "summarize_history"]

log = logging.getLogger(__name__)

_COUNTERS = ("requests", "slo-met", "slo-met-inference-only", "num-examples", "fluid-trainable")


class GridPort(Protocol):
    """What the loop needs of Flower's Grid."""

    def get_node_ids(self) -> Iterable[int]: ...

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]: ...


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
    weights = evaluator.initial_weights()
    history: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    store_run: int | None = None
    start = 1
    if cfg.checkpoint_dir and (ckpt := latest_checkpoint(cfg.checkpoint_dir)) is not None:
        if ckpt.state.get("policy") != cfg.policy or ckpt.state.get("tasks") != list(cfg.task_names):
            raise ConfigError(
                f"checkpoint in {cfg.checkpoint_dir} belongs to another run (policy "
                f"{ckpt.state.get('policy')!r}, tasks {ckpt.state.get('tasks')}); use another checkpoint-dir"
            )
        weights, history, totals = ckpt.weights, ckpt.state["history"], ckpt.state["totals"]
        store_run = ckpt.state.get("store_run")
        start = ckpt.server_round + 1
        log.warning("resuming from the checkpoint of round %d in %s", ckpt.server_round, cfg.checkpoint_dir)
    store = _open_store(cfg)
    if store is not None and store_run is None:
        store_run = store.start_run("fl", cfg.run_label or f"fl {cfg.policy}", cfg.to_run_config())

    for server_round in range(start, cfg.num_server_rounds + 1):
        needed = cfg.min_available_nodes if server_round == start else cfg.min_train_nodes
        nodes = _wait_for_nodes(grid, needed, cfg.node_wait_s)
        t0 = time.monotonic()
        content = RecordDict(
            {"arrays": weights_to_arrays(weights), "config": _round_config(cfg, server_round)}
        )
        messages = [
            Message(content, dst_node_id=node, message_type=MessageType.TRAIN, group_id=str(server_round))
            for node in nodes
        ]
        replies = list(grid.send_and_receive(messages, timeout=cfg.round_timeout_s))
        updates, client_metrics = [], []
        for reply in replies:
            if reply.has_error():
                log.warning(
                    "round %d: node %s failed: %s",
                    server_round,
                    reply.metadata.src_node_id,
                    reply.error.reason,
                )
                continue
            metrics = record_to_metrics(reply.content["metrics"])  # type: ignore[arg-type]
            samples = samples_from_metrics(metrics, cfg.task_names)
            updates.append(ClientUpdate(arrays_to_weights(reply.content["arrays"]), samples))  # type: ignore[arg-type]
            client_metrics.append(metrics)
        if len(updates) >= cfg.min_train_nodes:
            weights = aggregate(weights, updates)
        else:
            log.warning(
                "round %d: %d update(s), fewer than min-train-nodes: weights kept", server_round, len(updates)
            )
        round_s = time.monotonic() - t0
        accuracy = evaluator.accuracy(weights)
        for m in client_metrics:
            for key, value in m.items():
                if key in _COUNTERS or key.startswith(("samples-", "requests-")):
                    totals[key] = totals.get(key, 0.0) + value
        demand = {t: totals.get(f"requests-{t}", 0.0) for t in cfg.task_names}
        slowest = max((m.get("client-wall-s", 0.0) for m in client_metrics), default=0.0)
        entry = {
            "round": server_round,
            "nodes_sent": len(messages),
            "replies": len(updates),
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
        history.append(entry)
        log.info("round %d: %s", server_round, json.dumps(entry))
        state = {"policy": cfg.policy, "tasks": list(cfg.task_names), "history": history, "totals": totals}
        if cfg.checkpoint_dir:
            save_checkpoint(cfg.checkpoint_dir, server_round, weights, {**state, "store_run": store_run})
        summary = summarize_history(cfg, history, totals)
        if store is not None and store_run is not None:
            store.add_result(store_run, cfg.policy, summary)
        if cfg.results_file:
            _write_json(Path(cfg.results_file), summary)

    summary = summarize_history(cfg, history, totals)
    if store is not None and store_run is not None:
        store.add_result(store_run, cfg.policy, summary)
        store.finish_run(store_run, "ok")
        store.close()
    if cfg.results_file:
        _write_json(Path(cfg.results_file), summary)
    return summary


def _open_store(cfg: FlConfig) -> Any:
    if not cfg.store:
        return None
    from dartfl.store import RunStore

    return RunStore(cfg.store)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)
