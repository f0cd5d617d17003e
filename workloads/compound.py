"""Batch arrivals: a compound Poisson process, optionally switched by heavy-tailed ON/OFF periods.

Real LLM and serverless traffic arrives in clumps (a client fans out tens of requests at once,
a cron fires a batch, an agent loop calls back), and its quiet stretches are heavy-tailed
(minutes of silence, then a burst). This generator makes both: batches of many requests
arrive as a Poisson process inside ON periods, ON and OFF periods alternate with Pareto
lengths, and a small background of single requests keeps OFF periods from being silent.
"""

from __future__ import annotations

import numpy as np

from dartfl.errors import ConfigError
from workloads._common import MAX_REQUESTS, FloatArray, IntArray, check_horizon, require
from workloads.modulated import (
    PARETO_ALPHA_MAX,
    STATE_S_RANGE,
    _pareto_onoff_path,
    check_pareto_alternations,
    require_pareto_alpha,
    require_state_s,
)
from workloads.renewal import GAMMA_CV_RANGE

__all__ = ["COMPOUND_MAX_BATCH_MEAN", "compound_times"]

# Largest mean batch size. A million requests at once is already a whole workload in one clump;
# far past it a single batch (1 + Poisson(~batch-mean)) overflows memory, and at 1e308 the
# heavy-tailed sizes overflow int64 (a numpy warning, then a traceback).
COMPOUND_MAX_BATCH_MEAN = 1e6


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
    mean_ok = 1 <= batch_mean <= COMPOUND_MAX_BATCH_MEAN
    require("compound", "batch-mean", batch_mean, mean_ok, f"in [1, {COMPOUND_MAX_BATCH_MEAN:,.0f}] requests")
    # gamma's cv range: below 0.001 the sizes are Poisson to 0.1% (that is batch-cv 0), and
    # below ~1e-154 cv^2 is 0 (1/cv^2 divided by zero); past ~1e154 the shape 1/cv^2 is 0.
    low, high = GAMMA_CV_RANGE
    cv_ok = batch_cv == 0 or low <= batch_cv <= high
    require("compound", "batch-cv", batch_cv, cv_ok, f"0 (Poisson sizes) or in [{low:g}, {high:g}]")
    alpha_ok = batch_alpha == 0 or 1 < batch_alpha <= PARETO_ALPHA_MAX
    require("compound", "batch-alpha", batch_alpha, alpha_ok, f"0 (off) or in (1, {PARETO_ALPHA_MAX:g}]")
    require("compound", "spread-s", spread_s, spread_s >= 0, ">= 0 seconds")
    require_state_s("compound", "on-s", on_s)
    low, high = STATE_S_RANGE
    off_ok = off_s == 0 or low <= off_s <= high
    require("compound", "off-s", off_s, off_ok, f"0 (always on) or in [{low:g}, {high:g}] seconds")
    require_pareto_alpha("compound", "alpha", alpha)
    require("compound", "background", background, 0 <= background <= 1, "in [0, 1]")
    if off_s > 0 and background < 1:
        check_pareto_alternations("compound", duration_s, alpha, on_s, off_s)
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
        total = int(sizes.sum())
        if total > _SIZE_CAP:
            # A heavy tail (batch-cv near 100, batch-alpha near 1) can draw a batch of billions,
            # which np.repeat below would try to hold. Twice the limit on the expected count, so
            # a run near that limit is not refused for its noise.
            raise ConfigError(
                f"compound: the drawn batches hold {total:.3g} requests (batch-mean {batch_mean:g}, "
                f"batch-cv {batch_cv:g}, batch-alpha {batch_alpha:g}), more than the {_SIZE_CAP:,} "
                f"this tool holds in memory; lower --param batch-mean or batch-cv, or raise batch-alpha"
            )
        times = np.repeat(batch_start, sizes) + rng.random(int(sizes.sum())) * spread_s
        pieces.append(np.mod(times, duration_s))
    return np.sort(np.concatenate(pieces)) if pieces else np.empty(0, dtype=np.float64)


# The most requests the drawn batches may hold (and the cap on one batch's size before it is
# rounded to int64): twice the limit on the expected count.
_SIZE_CAP = 2 * MAX_REQUESTS


def _batch_sizes(rng: np.random.Generator, n: int, mean: float, cv: float, alpha: float) -> IntArray:
    if alpha > 0:
        # ceil of a classical Pareto of mean `mean - 0.5`: the rounding up adds 0.5 on average.
        x_min = max(mean - 0.5, 0.5) * (alpha - 1.0) / alpha
        # A size past _SIZE_CAP is refused by the caller; capping it first keeps a tail draw
        # of ~1e19 from overflowing int64.
        drawn = np.minimum((1.0 + rng.pareto(alpha, n)) * x_min, _SIZE_CAP)
        pareto: IntArray = np.ceil(drawn).astype(np.int64)
        return pareto
    extra = mean - 1.0
    if cv > 0 and extra > 0:
        shape = 1.0 / (cv * cv)
        level = np.minimum(rng.gamma(shape, extra / shape, n), _SIZE_CAP)  # Poisson fails near 1e19
    else:
        level = np.full(n, extra)
    sizes: IntArray = 1 + rng.poisson(level)
    return sizes
