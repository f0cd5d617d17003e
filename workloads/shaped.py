"""Poisson processes with a deterministic rate shape: diurnal, step and flash crowd.

Each shape is scaled so its mean over [0, duration_s) is exactly the requested rate, so the
expected count is rate x duration whatever the period, step time or spike position.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.errors import ConfigError
from workloads._common import FloatArray, check_horizon, require
from workloads.renewal import uniform_times

__all__ = [
    "DIURNAL_PERIOD_S_RANGE",
    "FLASH_CROWD_MAX_DECAY_S",
    "STEP_FACTOR_RANGE",
    "diurnal_times",
    "flash_crowd_times",
    "step_times",
]

# The diurnal periods accepted, in seconds. Under 1 ms a cycle is shorter than the gap between
# requests at up to 1,000 req/s (the shape averages out: Poisson in effect), and under ~1e-308
# 2 pi / period is inf (a math domain error). Over 10^9 s (32 years) any run is a sliver of one
# cycle, and near 1e308 the angle underflows and the rate with it.
DIURNAL_PERIOD_S_RANGE = (1e-3, 1e9)

# step's factor range (rate after / rate before), as mmpp's burst: a million either way. Past
# it one side carries under a millionth of the requests; at 1e308, at + factor (T - at) is inf
# and the run drew nothing, and at 1e-320 with at-s 0 the base rate was inf (a traceback).
# flash-crowd's factor shares the top: at 1e308 its spike mass was inf, the base rate NaN.
STEP_FACTOR_RANGE = (1e-6, 1e6)

# flash-crowd's longest decay. A decay of 32 years over any run is a step, not a spike; near
# 1e308, (factor - 1) x decay-s overflows and the base rate is NaN (a traceback).
FLASH_CROWD_MAX_DECAY_S = 1e9


def diurnal_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    period_s: float = 300.0,
    amplitude: float = 0.8,
    phase_s: float = 0.0,
) -> FloatArray:
    """Sinusoidal rate lambda(t) = c (1 - amplitude cos(2 pi (t + phase_s) / period_s)), by thinning.

    With phase_s = 0 the run starts at the trough and peaks at period_s / 2; the default
    period is a compressed "day" so a short run sees whole cycles.
    """
    check_horizon("diurnal", duration_s, rate_per_s)
    low, high = DIURNAL_PERIOD_S_RANGE
    require("diurnal", "period-s", period_s, low <= period_s <= high, f"in [{low:g}, {high:g}] seconds")
    require("diurnal", "amplitude", amplitude, 0 <= amplitude <= 1, "in [0, 1]")
    require("diurnal", "phase-s", phase_s, True, "a finite number of seconds")
    omega = 2.0 * math.pi / period_s
    # The rate is periodic: a phase of whole periods changes nothing, but omega x 1e20 s had
    # lost every digit of the angle (and the rate its mean). fmod is exact, and the identity
    # below a period.
    phase = math.fmod(phase_s, period_s)
    lo, hi = omega * phase, omega * (duration_s + phase)
    # The shape is written (1 - A) + 2 A sin^2(theta / 2), not 1 - A cos(theta): the same
    # function, but without the cancellation that made it (and its integral) 0, or negative,
    # for amplitude 1 when the horizon is a sliver of a period (a ZeroDivisionError).
    mean_shape = (1.0 - amplitude) + amplitude * _mean_one_minus_cos(lo, omega * duration_s / 2.0)
    # Thinning (Lewis-Shedler): candidates at the shape's maximum on the horizon, each kept
    # with probability shape(t) / maximum. Bounding by the horizon's own maximum, not 1 + A,
    # keeps a short run near a trough from drawing millions of candidates.
    peak = _max_shape(lo, hi, amplitude)
    if not (mean_shape > 0 and peak > 0):
        raise ConfigError(
            f"diurnal: --duration-s {duration_s:g} is too small a part of period-s {period_s:g} at "
            f"amplitude {amplitude:g}: the rate underflows to 0; raise --duration-s or lower "
            f"--param amplitude or --param period-s"
        )
    candidates = uniform_times(rng, 0.0, duration_s, rate_per_s / mean_shape * peak)
    half_angle = np.sin(0.5 * omega * (candidates + phase))
    shape = (1.0 - amplitude) + 2.0 * amplitude * half_angle * half_angle
    keep = rng.random(candidates.size) * peak < shape
    return candidates[keep]


def _mean_one_minus_cos(lo: float, half_width: float) -> float:
    """The mean of 1 - cos(theta) over [lo, lo + 2 half_width], free of cancellation.

    It is 1 - cos(m) sinc(w) with m the midpoint and w the half width, written
    2 sin^2(m / 2) + cos(m) (1 - sinc(w)); the two terms never cancel (when cos(m) < 0 the
    first is >= 1), and 1 - sinc(w) comes from its series for small w.
    """
    mid = lo + half_width
    w2 = half_width * half_width
    if half_width < 1e-2:
        one_minus_sinc = w2 / 6.0 * (1.0 - w2 / 20.0 * (1.0 - w2 / 42.0))
    else:
        one_minus_sinc = 1.0 - math.sin(half_width) / half_width
    return 2.0 * math.sin(mid / 2.0) ** 2 + math.cos(mid) * one_minus_sinc


def _max_shape(lo: float, hi: float, amplitude: float) -> float:
    """max of (1 - A) + 2 A sin^2(theta / 2), that is 1 - A cos(theta), for theta in [lo, hi]."""
    next_peak = math.pi + 2.0 * math.pi * math.ceil((lo - math.pi) / (2.0 * math.pi))
    if next_peak <= hi:
        return 1.0 + amplitude
    edge = max(math.sin(lo / 2.0) ** 2, math.sin(hi / 2.0) ** 2)
    return (1.0 - amplitude) + 2.0 * amplitude * edge


def step_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    factor: float = 4.0,
    at_s: float | None = None,
) -> FloatArray:
    """Rate c before at_s and factor x c from at_s on (factor < 1 steps down). Exact, no thinning.

    at_s defaults to half the duration.
    """
    check_horizon("step", duration_s, rate_per_s)
    at = duration_s / 2.0 if at_s is None else at_s
    low, high = STEP_FACTOR_RANGE
    factor_ok = low <= factor <= high
    require("step", "factor", factor, factor_ok, f"in [{low:g}, {high:,.0f}] (rate after / rate before)")
    require("step", "at-s", at, 0 <= at <= duration_s, f"in [0, {duration_s:g}] (the --duration-s)")
    base = rate_per_s * duration_s / (at + factor * (duration_s - at))
    before = uniform_times(rng, 0.0, at, base)
    after = uniform_times(rng, at, duration_s, base * factor)
    return np.concatenate((before, after))


def flash_crowd_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    factor: float = 8.0,
    at_s: float | None = None,
    decay_s: float = 60.0,
) -> FloatArray:
    """Baseline c, then at at_s a jump to factor x c that decays back: c (1 + (factor-1) e^{-(t-at)/decay}).

    Exact: the baseline is a homogeneous Poisson process and the spike's excess an independent
    one whose exponential intensity is inverted in closed form. at_s defaults to a third of the
    duration.
    """
    check_horizon("flash-crowd", duration_s, rate_per_s)
    at = duration_s / 3.0 if at_s is None else at_s
    factor_ok = 1 <= factor <= STEP_FACTOR_RANGE[1]
    factor_range = f"in [1, {STEP_FACTOR_RANGE[1]:,.0f}] (peak rate / baseline rate)"
    require("flash-crowd", "factor", factor, factor_ok, factor_range)
    require("flash-crowd", "at-s", at, 0 <= at <= duration_s, f"in [0, {duration_s:g}] (the --duration-s)")
    decay_ok = 0 < decay_s <= FLASH_CROWD_MAX_DECAY_S
    require("flash-crowd", "decay-s", decay_s, decay_ok, f"in (0, {FLASH_CROWD_MAX_DECAY_S:g}] seconds")
    # Fraction of the spike's full mass that falls before the horizon ends.
    inside = -math.expm1(-(duration_s - at) / decay_s)
    excess_mass = (factor - 1.0) * decay_s * inside  # in units of the baseline rate x seconds
    base = rate_per_s * duration_s / (duration_s + excess_mass)
    baseline = uniform_times(rng, 0.0, duration_s, base)
    n = int(rng.poisson(base * excess_mass))
    spike = at - decay_s * np.log1p(-rng.random(n) * inside)
    # Rounding can land a spike arrival exactly on the horizon; keep [0, duration_s).
    spike = spike[spike < duration_s]
    return np.sort(np.concatenate((baseline, spike)))
