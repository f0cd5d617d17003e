"""Batch arrivals: a compound Poisson process, optionally switched by heavy-tailed ON/OFF periods.

Real LLM and serverless traffic arrives in clumps (a client fans out tens of requests at once,
a cron fires a batch, an agent loop calls back), and its quiet stretches are heavy-tailed
(minutes of silence, then a burst). This generator makes both: batches of many requests
arrive as a Poisson process inside ON periods, ON and OFF periods alternate with Pareto
lengths, and a small background of single requests keeps OFF periods from being silent.
"""

from __future__ import annotations

import numpy as np

from workloads._common import FloatArray, IntArray, check_horizon, require
from workloads.modulated import _pareto_onoff_path

__all__ = ["compound_times"]


def compound_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    batch_mean: float = 20.0,
    batch_cv: float = 1.0,
    batch_alpha: float = 0.0,
    spread_s: float = 0.1,
    on_s: float = 2.0,
    off_s: float = 30.0,
    alpha: float = 1.4,
    background: float = 0.05,
) -> FloatArray:
    """Batches of mean `batch_mean` requests, each spread uniformly over `spread_s` seconds.

    Batch sizes are 1 + Poisson(G) with G ~ Gamma of mean batch_mean - 1 and coefficient of
    variation `batch_cv` (0: Poisson sizes); or, with `batch_alpha` > 1, heavy-tailed:
    classical Pareto(batch_alpha) of mean batch_mean, rounded up (most batches small, a few
    of hundreds or thousands, like an agent fan-out or a backfill job). Batches arrive as a
    Poisson process inside ON periods; ON and OFF periods have classical Pareto(alpha)
    lengths of means on_s and off_s (off_s = 0: always ON, a plain compound Poisson process).
    A fraction `background` of the mean rate arrives as single Poisson requests throughout.
    The batch rate is scaled on the drawn path so that the expected count is exactly
    rate x duration; a batch that runs past the horizon wraps its tail around to the start,
    which keeps the count and moves a few requests.
    """
    check_horizon("compound", duration_s, rate_per_s)
    require("compound", "batch-mean", batch_mean, batch_mean >= 1, ">= 1 request")
    require("compound", "batch-cv", batch_cv, batch_cv >= 0, ">= 0")
    require("compound", "batch-alpha", batch_alpha, batch_alpha == 0 or batch_alpha > 1, "0 (off) or > 1")
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
            starts, ends, states = _pareto_onoff_path(rng, duration_s, alpha, on_s, off_s)
            on = states == 1
            starts, ends = starts[on], ends[on]
        else:
            starts, ends = np.array([0.0]), np.array([float(duration_s)])
        lengths = ends - starts
        batch_rate = (1.0 - background) * rate_per_s * duration_s / (batch_mean * float(lengths.sum()))
        counts = rng.poisson(batch_rate * lengths)
        batch_start = np.repeat(starts, counts) + rng.random(int(counts.sum())) * np.repeat(lengths, counts)
        sizes = _batch_sizes(rng, batch_start.size, batch_mean, batch_cv, batch_alpha)
        times = np.repeat(batch_start, sizes) + rng.random(int(sizes.sum())) * spread_s
        pieces.append(np.mod(times, duration_s))
    return np.sort(np.concatenate(pieces)) if pieces else np.empty(0, dtype=np.float64)


def _batch_sizes(rng: np.random.Generator, n: int, mean: float, cv: float, alpha: float) -> IntArray:
    if alpha > 0:
        # ceil of a classical Pareto of mean `mean - 0.5`: the rounding up adds 0.5 on average.
        x_min = max(mean - 0.5, 0.5) * (alpha - 1.0) / alpha
        pareto: IntArray = np.ceil((1.0 + rng.pareto(alpha, n)) * x_min).astype(np.int64)
        return pareto
    extra = mean - 1.0
    if cv > 0 and extra > 0:
        shape = 1.0 / (cv * cv)
        level = rng.gamma(shape, extra / shape, n)
    else:
        level = np.full(n, extra)
    sizes: IntArray = 1 + rng.poisson(level)
    return sizes
