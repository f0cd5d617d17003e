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

from dartfl.errors import ConfigError
from workloads._common import FloatArray, IntArray, check_horizon, require

__all__ = [
    "MAX_ALTERNATIONS",
    "MMPP_MAX_BURST",
    "PARETO_ALPHA_MAX",
    "STATE_S_RANGE",
    "check_alternations",
    "mmpp_times",
    "pareto_onoff_times",
]

log = logging.getLogger(__name__)

# Largest mmpp burst ratio. Past it the low state carries under a millionth of the requests, so
# the process is an ON/OFF source (pareto-onoff models that); far past it the level x length
# products overflow and the run draws nothing.
MMPP_MAX_BURST = 1e6

# Mean state (mmpp) and period (pareto-onoff, compound) lengths accepted, in seconds. Below 1 ms
# a state holds under one request at any rate up to 1,000 req/s, so the modulation is invisible
# (the run is Poisson at the mean rate) while the path needs 2 x duration / (mean cycle) state
# changes: 1.2 million for a 600-s run at 1 ms, 10^303 at 1e-300 s (numpy's "Maximum allowed
# size exceeded"). Above 10^9 s (32 years) a state outlasts any run; far above, the drawn
# lengths overflow to inf (a numpy warning).
STATE_S_RANGE = (1e-3, 1e9)

# Most state changes one path may hold: its arrays are a few hundred MB at this size, and a
# longer --duration-s with short states is a typo more often than a plan.
MAX_ALTERNATIONS = 10_000_000

# Largest Pareto shape accepted (pareto-onoff's and compound's alpha, compound's batch-alpha).
# At 1,000 every period is within 0.1% of its mean (x_min = mean (alpha - 1) / alpha), a fixed
# length in effect; near 1e308, (alpha - 1) x mean overflows.
PARETO_ALPHA_MAX = 1e3


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
    require_state_s("mmpp", "high-s", high_s)
    require_state_s("mmpp", "low-s", low_s)
    lengths = f"high-s {high_s:g} and low-s {low_s:g}"
    check_alternations("mmpp", duration_s, high_s + low_s, lengths, "raise --param high-s or --param low-s")
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
    require_pareto_alpha("pareto-onoff", "alpha", alpha)
    require_state_s("pareto-onoff", "on-s", on_s)
    require_state_s("pareto-onoff", "off-s", off_s)
    require("pareto-onoff", "off-frac", off_frac, 0 <= off_frac <= 1, "in [0, 1]")
    check_pareto_alternations("pareto-onoff", duration_s, alpha, on_s, off_s)
    starts, ends, states = _pareto_onoff_path(rng, duration_s, alpha, on_s, off_s)
    levels = np.where(states == 1, 1.0, off_frac)
    return _modulated_poisson("pareto-onoff", rng, duration_s, rate_per_s, starts, ends, levels)


def require_state_s(generator: str, param: str, value: float) -> None:
    """A mean state or period length, in STATE_S_RANGE."""
    low, high = STATE_S_RANGE
    require(generator, param, value, low <= value <= high, f"in [{low:g}, {high:g}] seconds")


def require_pareto_alpha(generator: str, param: str, value: float) -> None:
    """A Pareto shape: > 1 for a finite mean, at most PARETO_ALPHA_MAX."""
    expected = f"in (1, {PARETO_ALPHA_MAX:g}] (the mean must be finite)"
    require(generator, param, value, 1 < value <= PARETO_ALPHA_MAX, expected)


def check_alternations(
    generator: str, duration_s: float, cycle_s: float, lengths: str, remedy: str, *, bound: str = "about"
) -> None:
    """Refuse a path of more than MAX_ALTERNATIONS state changes, 2 x duration / cycle_s, where
    cycle_s is an ON plus an OFF period (their means, or for Pareto their shortest lengths)."""
    changes = 2.0 * duration_s / cycle_s
    if changes > MAX_ALTERNATIONS:
        raise ConfigError(
            f"{generator}: {lengths} over --duration-s {duration_s:g} make {bound} {changes:.3g} state "
            f"changes, more than the {MAX_ALTERNATIONS:,} this tool draws; {remedy}, or lower --duration-s"
        )


def check_pareto_alternations(
    generator: str, duration_s: float, alpha: float, on_s: float, off_s: float
) -> None:
    """check_alternations for Pareto periods: no period is shorter than its x_min, so the count
    is bounded by the x_min cycle (alpha near 1 makes x_min, and so the bound, tiny)."""
    fraction = (alpha - 1.0) / alpha
    lengths = (
        f"on-s {on_s:g} and off-s {off_s:g} at alpha {alpha!r} (periods down to {fraction:.3g} x the mean)"
    )
    check_alternations(
        generator,
        duration_s,
        (on_s + off_s) * fraction,
        lengths,
        "raise --param alpha, on-s or off-s",
        bound="up to",
    )


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
