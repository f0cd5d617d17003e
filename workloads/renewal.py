"""Renewal arrival processes: Poisson and Gamma inter-arrival times.

Both are stationary from t = 0: the Gamma process starts with the equilibrium residual of an
interval (not a fresh one), so the first seconds are as bursty as the rest.
"""

from __future__ import annotations

import math

import numpy as np

from workloads._common import FloatArray, check_horizon, require

__all__ = ["GAMMA_CV_RANGE", "gamma_times", "poisson_times"]

# The cv values gamma_times accepts. Below 0.001 the gaps differ by under 0.1%: a clock, not a
# workload (and below ~1e-154, 1/cv^2 overflows). Above 100 the first gap alone averages
# cv^2 / rate seconds (over 3 hours at 1 req/s), so a run mostly draws nothing or one burst.
GAMMA_CV_RANGE = (1e-3, 100.0)


def poisson_times(duration_s: float, rate_per_s: float, rng: np.random.Generator) -> FloatArray:
    """Homogeneous Poisson arrivals on [0, duration_s): N ~ Poisson(rate * T), times uniform."""
    check_horizon("poisson", duration_s, rate_per_s)
    return uniform_times(rng, 0.0, duration_s, rate_per_s)


def uniform_times(rng: np.random.Generator, start_s: float, end_s: float, rate_per_s: float) -> FloatArray:
    """A homogeneous Poisson process on [start_s, end_s), sorted."""
    n = int(rng.poisson(rate_per_s * (end_s - start_s)))
    return np.sort(rng.uniform(start_s, end_s, n))


def gamma_times(
    duration_s: float, rate_per_s: float, rng: np.random.Generator, *, cv: float = 3.0
) -> FloatArray:
    """Arrivals whose inter-arrival times are Gamma with mean 1/rate and coefficient of variation cv.

    Shape k = 1/cv^2, scale 1/(rate k). cv > 1 clusters arrivals (many tiny gaps, a few
    long silences); cv = 1 is Poisson; cv < 1 is more regular than Poisson.
    """
    check_horizon("gamma", duration_s, rate_per_s)
    low, high = GAMMA_CV_RANGE
    require("gamma", "cv", cv, low <= cv <= high, f"in [{low:g}, {high:g}]")
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    # Stationary start: the interval covering t = 0 is length-biased, Gamma(k + 1), and time 0
    # falls uniformly inside it, so the first arrival comes after U * length.
    first = float(rng.random() * rng.gamma(shape + 1.0, scale))
    expected = duration_s * rate_per_s
    chunk = int(expected + 6.0 * cv * math.sqrt(expected) + 64)
    pieces = [np.array([first])]
    end = first
    while end < duration_s:
        times = end + np.cumsum(rng.gamma(shape, scale, chunk))
        pieces.append(times)
        end = float(times[-1])
        chunk = max(64, chunk // 4)  # rarely needed: top up in smaller steps
    times = np.concatenate(pieces)
    return times[: int(np.searchsorted(times, duration_s, side="left"))]
