"""Batch arrivals: a compound Poisson process, optionally switched by heavy-tailed ON/OFF periods.

Real LLM and serverless traffic arrives in clumps (a client fans out tens of requests at once,
a cron fires a batch, an agent loop calls back), and its quiet stretches are heavy-tailed
(minutes of silence, then a burst). This generator makes both: batches of many requests
arrive as a Poisson process inside ON periods, ON and OFF periods alternate with Pareto
lengths, and a small background of single requests keeps OFF periods from being silent.
"""

from __future__ import annotations

import numpy as np

from workloads._common import FloatArray, check_horizon, require
from workloads.modulated import _alternating_path

__all__ = ["compound_times"]


def compound_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    batch_mean: float = 20.0,
    batch_cv: float = 1.0,
    spread_s: float = 0.1,
    on_s: float = 2.0,
    off_s: float = 30.0,
    alpha: float = 1.4,
    background: float = 0.05,
) -> FloatArray:
    """Batches of mean `batch_mean` requests, each spread uniformly over `spread_s` seconds.

    Batch sizes are 1 + Poisson(G) with G ~ Gamma of mean batch_mean - 1 and coefficient of
    variation `batch_cv` (0: Poisson sizes). Batches arrive as a Poisson process inside ON
    periods; ON and OFF periods have classical Pareto(alpha) lengths of means on_s and off_s
    (off_s = 0: always ON, a plain compound Poisson process). A fraction `background` of the
    mean rate arrives as single Poisson requests throughout. The batch rate is scaled on the
    drawn path so that the expected count is exactly rate x duration; a batch that runs past the
    horizon wraps its tail around to the start, which keeps the count and moves a few requests.
    """
    check_horizon("compound", duration_s, rate_per_s)
    require("compound", "batch-mean", batch_mean, batch_mean >= 1, ">= 1 request")
    require("compound", "batch-cv", batch_cv, batch_cv >= 0, ">= 0")
    require("compound", "spread-s", spread_s, spread_s >= 0, ">= 0 seconds")
    require("compound", "on-s", on_s, on_s > 0, "> 0 seconds")
    require("compound", "off-s", off_s, off_s >= 0, ">= 0 seconds (0: always on)")
    require("compound", "alpha", alpha, alpha > 1, "> 1 (the mean period must be finite)")
    require("compound", "background", background, 0 <= background <= 1, "in [0, 1]")
    pieces = []
    if background > 0:
        n = int(rng.poisson(background * rate_per_s * duration_s))
        pieces.append(rng.uniform(0.0, duration_s, n))
    if background < 1:
        if off_s > 0:
            # Classical Pareto(alpha, x_m) has mean alpha x_m / (alpha - 1); numpy draws its Lomax shift.
            x_min = np.array([off_s, on_s]) * (alpha - 1.0) / alpha
            starts, ends, states = _alternating_path(
                duration_s, 1, on_s + off_s, lambda s: (1.0 + rng.pareto(alpha, s.size)) * x_min[s]
            )
            on = states == 1
            starts, ends = starts[on], ends[on]
        else:
            starts, ends = np.array([0.0]), np.array([float(duration_s)])
        lengths = ends - starts
        batch_rate = (1.0 - background) * rate_per_s * duration_s / (batch_mean * float(lengths.sum()))
        counts = rng.poisson(batch_rate * lengths)
        batch_start = np.repeat(starts, counts) + rng.random(int(counts.sum())) * np.repeat(lengths, counts)
        extra = batch_mean - 1.0
        if batch_cv > 0 and extra > 0:
            shape = 1.0 / (batch_cv * batch_cv)
            level = rng.gamma(shape, extra / shape, batch_start.size)
        else:
            level = np.full(batch_start.size, extra)
        sizes = 1 + rng.poisson(level)
        times = np.repeat(batch_start, sizes) + rng.random(int(sizes.sum())) * spread_s
        pieces.append(np.mod(times, duration_s))
    return np.sort(np.concatenate(pieces)) if pieces else np.empty(0, dtype=np.float64)
