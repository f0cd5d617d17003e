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


def nice_window_s(horizon_s: float, bins: int = 150) -> float:
    """A round window (1, 2 or 5 times a power of ten, in s) that cuts the run into about
    `bins` pieces, so that an axis reads "per 2 s", not "per 3.0105 s"."""
    raw = max(horizon_s / bins, 1e-3)
    decade = 10.0 ** np.floor(np.log10(raw))
    return float(next(m * decade for m in (1, 2, 5, 10) if m * decade >= raw))


def _slo_met(record: RunRecord) -> float:
    """Share of the run's requests answered within their task's SLO (rejected ones miss)."""
    if record.arrival_s.size == 0:
        return float("nan")
    slo = np.asarray(record.slo_s)[record.tasks]
    return float(np.mean((record.finish_s - record.arrival_s) <= slo))  # NaN compares False


def _fit_count_axis(ax: Any, peak: float) -> None:
    """Counts from 0: linear while they stay small, else symlog (no negative half)."""
    if peak > 100:
        ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, max(1.0, peak) * (3 if peak > 100 else 1.1))


def plot_sim(
    records: Sequence[RunRecord], path: Path, title: str = "", window_s: float | None = None
) -> Path:
    """Backlog, inference share, training step size and p99 latency over time: one row per
    policy (small multiples: overlaid, the lines hide each other), one column per measure,
    each column on one scale so that rows compare."""
    plt = pyplot()
    horizon = max((r.horizon_s for r in records), default=1.0)
    window = window_s or nice_window_s(horizon)
    rows = max(1, len(records))
    fig, axes = plt.subplots(
        rows, 4, figsize=(13, 1.7 * rows + 1.2), sharex=True, sharey="col", squeeze=False
    )
    slo_ms = 1e3 * min(records[0].slo_s) if records and records[0].slo_s else None
    peak_backlog, p99_range = 0.0, [np.inf, 0.0]
    for i, record in enumerate(records):
        p = record.periods
        row = axes[i]
        if "t_s" in p and len(p["t_s"]):
            row[0].plot(p["t_s"], p["backlog"], lw=0.8, color="C0")
            row[1].plot(p["t_s"], p["inference_share"], lw=0.8, color="C1")
            row[2].step(p["t_s"], p["microbatch"], lw=0.8, where="post", color="C2")
            peak_backlog = max(peak_backlog, float(np.max(p["backlog"])))
        t, p99 = windowed_p99_s(record, window)
        row[3].plot(t, p99 * 1e3, lw=0.8, color="C3")
        if p99.size:
            p99_range = [
                min(p99_range[0], float(np.min(p99)) * 1e3),
                max(p99_range[1], float(np.max(p99)) * 1e3),
            ]
        if slo_ms:
            row[3].axhline(slo_ms, color="k", ls="--", lw=0.8)
        row[0].set_ylabel(
            f"{record.policy}\nSLO met {_slo_met(record):.1%}\ntrained {sum(record.trained_per_task):,}",
            fontsize=8,
        )
    _fit_count_axis(axes[0][0], peak_backlog)
    axes[0][1].set_ylim(-0.02, 1.02)
    axes[0][2].set_ylim(bottom=0)
    if p99_range[1] > 0 and p99_range[1] / max(p99_range[0], 1e-3) > 20:
        axes[0][3].set_yscale("log")  # the column spans decades: read each row's level
    else:
        axes[0][3].set_ylim(bottom=0)
    slo_note = f" (dashed: SLO {slo_ms:g} ms)" if slo_ms else ""
    for col, name in enumerate(
        (
            "backlog (queued requests)",
            "inference share (policy's priority)",
            "training step (samples)",
            f"p99 latency, ms, per {window:g} s{slo_note}",
        )
    ):
        axes[0][col].set_title(name, fontsize=9)
        axes[-1][col].set_xlabel("time (s)")
    fig.suptitle(title or "dartfl sim", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
