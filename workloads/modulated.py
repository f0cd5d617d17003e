"""Modulated Poisson processes: a 2-state MMPP and Pareto ON/OFF.

Both draw an alternating path of "quiet" (state 0) and "busy" (state 1) periods first, then
Poisson arrivals inside each period at a rate proportional to the period's level. The levels
are scaled on the drawn path so the expected number of arrivals is exactly rate x duration:
over a short horizon a heavy-tailed path can otherwise miss the requested mean rate by a
factor of two, and the experiments sweep load, not luck.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from workloads._common import FloatArray, IntArray, check_horizon, require

__all__ = ["MMPP_MAX_BURST", "mmpp_times", "pareto_onoff_times"]

log = logging.getLogger(__name__)

# Largest mmpp burst ratio. Past it the low state carries under a millionth of the requests, so
# the process is an ON/OFF source (pareto-onoff models that); far past it the level x length
# products overflow and the run draws nothing.
MMPP_MAX_BURST = 1e6


def mmpp_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    burst: float = 10.0,
    high_s: float = 5.0,
    low_s: float = 20.0,
) -> FloatArray:
    """Two-state Markov-modulated Poisson process.

    The state stays low for Exp(mean low_s) seconds, then high for Exp(mean high_s), and so on;
    the high-state rate is `burst` times the low-state rate. The start state is drawn from the
    stationary distribution, P(high) = high_s / (high_s + low_s).
    """
    check_horizon("mmpp", duration_s, rate_per_s)
    require(
        "mmpp",
        "burst",
        burst,
        1 <= burst <= MMPP_MAX_BURST,
        f"in [1, {MMPP_MAX_BURST:,.0f}] (high rate / low rate)",
    )
    require("mmpp", "high-s", high_s, high_s > 0, "> 0 seconds")
    require("mmpp", "low-s", low_s, low_s > 0, "> 0 seconds")
    means = np.array([low_s, high_s])
    first = int(rng.random() < high_s / (high_s + low_s))
    starts, ends, states = _alternating_path(
        duration_s, first, low_s + high_s, lambda s: rng.exponential(1.0, s.size) * means[s]
    )
    levels = np.where(states == 1, burst, 1.0)
    return _modulated_poisson("mmpp", rng, duration_s, rate_per_s, starts, ends, levels)


def pareto_onoff_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    alpha: float = 1.5,
    on_s: float = 5.0,
    off_s: float = 15.0,
    off_frac: float = 0.0,
) -> FloatArray:
    """ON/OFF source with Pareto(alpha) period lengths of mean on_s and off_s.

    Arrivals come in ON periods; OFF periods are silent (off_frac = 0) or carry a base rate of
    off_frac x the ON rate. For 1 < alpha < 2 the periods have a finite mean but infinite
    variance, which gives the long-range dependence of real bursty traffic. The source starts
    with a fresh ON period, so a run never opens with an arbitrarily long silence.
    """
    check_horizon("pareto-onoff", duration_s, rate_per_s)
    require("pareto-onoff", "alpha", alpha, alpha > 1, "> 1 (the mean period must be finite)")
    require("pareto-onoff", "on-s", on_s, on_s > 0, "> 0 seconds")
    require("pareto-onoff", "off-s", off_s, off_s > 0, "> 0 seconds")
    require("pareto-onoff", "off-frac", off_frac, 0 <= off_frac <= 1, "in [0, 1]")
    starts, ends, states = _pareto_onoff_path(rng, duration_s, alpha, on_s, off_s)
    levels = np.where(states == 1, 1.0, off_frac)
    return _modulated_poisson("pareto-onoff", rng, duration_s, rate_per_s, starts, ends, levels)


def _pareto_onoff_path(
    rng: np.random.Generator, duration_s: float, alpha: float, on_s: float, off_s: float
) -> tuple[FloatArray, FloatArray, IntArray]:
    """ON (state 1) and OFF (state 0) periods over [0, duration_s), starting ON, with classical
    Pareto(alpha) lengths of means on_s and off_s."""
    # Classical Pareto(alpha, x_m) has mean alpha x_m / (alpha - 1); numpy draws its Lomax shift.
    x_min = np.array([off_s, on_s]) * (alpha - 1.0) / alpha
    return _alternating_path(
        duration_s, 1, on_s + off_s, lambda s: (1.0 + rng.pareto(alpha, s.size)) * x_min[s]
    )


def _alternating_path(
    duration_s: float,
    first_state: int,
    mean_cycle_s: float,
    draw: Callable[[IntArray], FloatArray],
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Periods alternating between states 0 and 1 that cover [0, duration_s), clipped at the end.

    `draw(states)` returns one period length per state given.
    """
    block = int(2.4 * duration_s / mean_cycle_s) + 16
    starts: list[FloatArray] = []
    ends: list[FloatArray] = []
    states: list[IntArray] = []
    t, parity = 0.0, first_state
    while t < duration_s:
        s = ((parity + np.arange(block)) % 2).astype(np.int64)
        stop = t + np.cumsum(draw(s))
        starts.append(np.concatenate(([t], stop[:-1])))
        ends.append(stop)
        states.append(s)
        t, parity = float(stop[-1]), (parity + block) % 2
    start, end, state = np.concatenate(starts), np.concatenate(ends), np.concatenate(states)
    keep = start < duration_s
    return start[keep], np.minimum(end[keep], duration_s), state[keep]


def _modulated_poisson(
    name: str,
    rng: np.random.Generator,
    duration_s: float,
    rate_per_s: float,
    starts: FloatArray,
    ends: FloatArray,
    levels: FloatArray,
) -> FloatArray:
    """Poisson arrivals in each period at rate c x level, with c set so E[count] = rate x T."""
    lengths = ends - starts
    weight = float(np.dot(lengths, levels))
    if weight <= 0:
        log.warning("%s: the drawn path has no active period in %.1f s; no arrivals", name, duration_s)
        return np.empty(0, dtype=np.float64)
    scale = rate_per_s * duration_s / weight
    counts = rng.poisson(scale * levels * lengths)
    times = np.repeat(starts, counts) + rng.random(int(counts.sum())) * np.repeat(lengths, counts)
    return np.sort(times)
