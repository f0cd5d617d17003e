"""PNG plots for the CLI and benchmarks (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.metrics import RunRecord


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def windowed_p99_s(record: RunRecord, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """p99 latency of the requests arriving in each window (answered ones; NaN if none)."""
    done = ~np.isnan(record.finish_s)
    if not done.any():
        return np.zeros(0), np.zeros(0)
    latency = (record.finish_s - record.arrival_s)[done]
    bins = (record.arrival_s[done] // window_s).astype(np.int64)
    order = np.argsort(bins, kind="stable")
    bins, latency = bins[order], latency[order]
    edges = np.flatnonzero(np.diff(bins)) + 1
    groups = np.split(latency, edges)
    starts = bins[np.concatenate(([0], edges))]
    return starts * window_s, np.array([np.percentile(g, 99) for g in groups])


def plot_sim(
    records: Sequence[RunRecord], path: Path, title: str = "", window_s: float | None = None
) -> Path:
    """Backlog, inference share, training step size and p99 latency over time, per policy."""
    plt = pyplot()
    horizon = max((r.horizon_s for r in records), default=1.0)
    window = window_s or max(1.0, horizon / 200)
    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    for record in records:
        p = record.periods
        axes[0].plot(p["t_s"], p["backlog"], lw=0.8, label=record.policy)
        axes[1].plot(p["t_s"], p["inference_share"], lw=0.8)
        axes[2].step(p["t_s"], p["microbatch"], lw=0.8, where="post")
        t, p99 = windowed_p99_s(record, window)
        axes[3].plot(t, p99 * 1e3, lw=0.8)
    slo_ms = 1e3 * min(records[0].slo_s) if records else None
    if slo_ms:
        axes[3].axhline(slo_ms, color="k", ls="--", lw=0.8, label="SLO")
        axes[3].legend(loc="upper right", fontsize=8)
    axes[0].set_ylabel("backlog (requests)")
    axes[0].set_yscale("symlog", linthresh=10)
    axes[1].set_ylabel("inference share")
    axes[2].set_ylabel("training step (samples)")
    axes[3].set_ylabel(f"p99 latency per {window:g} s (ms)")
    axes[3].set_yscale("log")
    axes[3].set_xlabel("time (s)")
    axes[0].legend(loc="upper right", fontsize=8, ncol=2)
    fig.suptitle(title or "dartfl sim")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
