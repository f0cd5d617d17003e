"""An FL run's rounds for the FL page: per-task, mean and demand-weighted accuracy per round,
and the samples each client contributed, read tolerantly from the shapes docs/dashboard.md
documents (the FL server's own summary among them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from dartfl.store import RunInfo
from dashboard.telemetry import number

__all__ = ["fl_frames"]


def _clients(value: object) -> list[tuple[str, float]]:
    """`clients` as a mapping {id: {"samples": n}} or {id: n}, or a list of {"client", "samples"}."""
    out: list[tuple[str, float]] = []
    if isinstance(value, Mapping):
        for cid, v in value.items():
            n = number(v.get("samples")) if isinstance(v, Mapping) else number(v)
            if n is not None:
                out.append((str(cid), n))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                n = number(item.get("samples"))
                if n is not None:
                    out.append((str(item.get("client", item.get("node_id", i))), n))
    return out


def fl_frames(run: RunInfo, results: Mapping[str, Mapping[str, Any]]) -> dict[str, pd.DataFrame]:
    """An FL run's rounds: `accuracy` (policy, round, task, accuracy), `summary` (policy, round,
    metric in {mean, demand-weighted}, accuracy) and `clients` (policy, round, client, samples).
    Demand-weighted accuracy is computed from the config's `task_demand` when a round lacks it."""
    demand = run.config.get("task_demand")
    if not isinstance(demand, Mapping):  # the FL server's summary keeps it per policy
        demand = next((m.get("demand_per_task") for m in results.values() if m.get("demand_per_task")), None)
    demand = (
        {k: w for k, v in demand.items() if (w := number(v)) is not None}
        if isinstance(demand, Mapping)
        else {}
    )
    accuracy, summary, clients = [], [], []
    for policy, metrics in results.items():
        rounds = metrics.get("rounds")
        if not isinstance(rounds, list):  # the FL server writes a round count there, the list in history
            rounds = metrics.get("history")
        for i, rnd in enumerate(rounds if isinstance(rounds, list) else []):
            if not isinstance(rnd, Mapping):
                continue
            r = number(rnd.get("round"))
            r = float(i + 1) if r is None else r
            acc = rnd.get("accuracy", rnd.get("accuracy_per_task"))
            per_task = (
                {k: a for k, v in acc.items() if (a := number(v)) is not None}
                if isinstance(acc, Mapping)
                else {}
            )
            for task, a in sorted(per_task.items()):
                accuracy.append({"policy": policy, "round": r, "task": task, "accuracy": a})
            mean = number(rnd.get("mean_accuracy"))
            if mean is None and per_task:
                mean = sum(per_task.values()) / len(per_task)
            weighted = number(rnd.get("weighted_accuracy", rnd.get("demand_weighted_accuracy")))
            weights = {k: demand[k] for k in per_task if k in demand}
            if weighted is None and weights and sum(weights.values()) > 0:
                weighted = sum(per_task[k] * w for k, w in weights.items()) / sum(weights.values())
            for name, value in (("mean", mean), ("demand-weighted", weighted)):
                if value is not None:
                    summary.append({"policy": policy, "round": r, "metric": name, "accuracy": value})
            per_client = _clients(rnd.get("clients"))
            total = number(rnd.get("samples"))
            if not per_client and total is not None:
                per_client = [("all clients", total)]
            for cid, n in per_client:
                clients.append({"policy": policy, "round": r, "client": cid, "samples": n})
    return {
        "accuracy": pd.DataFrame(accuracy, columns=["policy", "round", "task", "accuracy"]),
        "summary": pd.DataFrame(summary, columns=["policy", "round", "metric", "accuracy"]),
        "clients": pd.DataFrame(clients, columns=["policy", "round", "client", "samples"]),
    }
