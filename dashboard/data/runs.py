"""Recorded runs for the Experiments page: the runs to pick from, the `dartfl sim` headline
metrics of the picked ones side by side, and one run's per-period decisions over time."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from dartfl.store import DecisionPoint, RunInfo, RunStore, StoreDamagedError
from dashboard.telemetry import number

__all__ = [
    "COMPARE_METRICS",
    "comparison_frame",
    "decisions_frame",
    "open_store",
    "run_choices",
    "run_title",
]

# The headline metrics of `dartfl sim` (its --json contract), with how to show them.
COMPARE_METRICS: dict[str, str] = {
    "slo_attainment": "SLO attainment",
    "p50_latency_s": "p50 latency (s)",
    "p99_latency_s": "p99 latency (s)",
    "harvest_efficiency": "harvest efficiency",
    "train_samples": "samples trained",
    "max_backlog": "max backlog",
    "rejected": "rejected requests",
    "decision_us_p50": "decision time p50 (us)",
}


def open_store(path: Path) -> RunStore | None:
    """The run store at `path` opened for reading only, or None if there is none yet (reading
    never creates, migrates or writes one). A file that cannot be read raises its one-line
    StoreError or ConfigError."""
    return RunStore(path, read_only=True) if path.exists() else None


def run_choices(
    store: RunStore | None, kinds: Sequence[str] | None = None, limit: int = 200
) -> list[RunInfo]:
    """Recorded runs, newest first, of the given kinds (all kinds when None)."""
    if store is None:
        return []
    runs = store.list_runs(limit=limit)
    return [r for r in runs if kinds is None or r.kind in kinds]


def run_title(run: RunInfo) -> str:
    return f"#{run.run_id} {run.kind}: {run.label or 'unlabelled'}"


def comparison_frame(
    store: RunStore, runs: Sequence[RunInfo], damage: list[str] | None = None
) -> pd.DataFrame:
    """One row per (run, policy) with the `dartfl sim` headline metrics (NaN when missing).

    A run whose results are damaged is left out, its one-line StoreDamagedError appended to
    `damage` (raised when no list is given), so the other runs still compare."""
    rows = []
    for run in runs:
        try:
            results = store.results(run.run_id)
        except StoreDamagedError as exc:
            if damage is None:
                raise
            damage.append(str(exc))
            continue
        for policy, metrics in results.items():
            row: dict[str, Any] = {"run": run_title(run), "run_id": run.run_id, "policy": policy}
            for key in COMPARE_METRICS:
                row[key] = number(metrics.get(key))
            rows.append(row)
    return pd.DataFrame(rows, columns=["run", "run_id", "policy", *COMPARE_METRICS])


DECISION_COLUMNS = [
    "t_s",
    "policy",
    "backlog_max",
    "inference_share",
    "microbatch",
    "trained_samples",
    "samples_per_s",
    "latency_p99_ms",
]


def decisions_frame(
    store: RunStore, run_id: int, policies: Sequence[str], max_points: int = 1000
) -> pd.DataFrame:
    """Per-period decisions of several policies of one run, downsampled in SQL, long format,
    with the training rate of each bucket (its samples over its span) and its worst p99."""
    frames = []
    for policy in policies:
        points = store.decisions(run_id, policy, max_points=max_points)
        if points:
            frames.append(_decision_rows(points, policy))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DECISION_COLUMNS)


def _decision_rows(points: Sequence[DecisionPoint], policy: str) -> pd.DataFrame:
    starts = [p.t_s for p in points]
    # A bucket spans to the next one's start; the last one as long as the one before it.
    spans = [b - a for a, b in pairwise(starts)]
    spans.append(spans[-1] if spans else 0.0)
    return pd.DataFrame(
        {
            "t_s": starts,
            "policy": policy,
            "backlog_max": [p.backlog_max for p in points],
            "inference_share": [p.inference_share for p in points],
            "microbatch": [p.microbatch for p in points],
            "trained_samples": [p.trained_samples for p in points],
            "samples_per_s": [
                p.trained_samples / w if w > 0 else None for p, w in zip(points, spans, strict=True)
            ],
            "latency_p99_ms": [None if p.latency_p99_s is None else p.latency_p99_s * 1e3 for p in points],
        },
        columns=DECISION_COLUMNS,
    )
