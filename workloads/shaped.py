"""Poisson processes with a deterministic rate shape: diurnal, step and flash crowd.

Each shape is scaled so its mean over [0, duration_s) is exactly the requested rate, so the
expected count is rate x duration whatever the period, step time or spike position.
"""

from __future__ import annotations

import math

import numpy as np

from workloads._common import FloatArray, check_horizon, require
from workloads.renewal import uniform_times

__all__ = ["diurnal_times", "flash_crowd_times", "step_times"]


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
    require("diurnal", "period-s", period_s, period_s > 0, "> 0 seconds")
    require("diurnal", "amplitude", amplitude, 0 <= amplitude <= 1, "in [0, 1]")
    require("diurnal", "phase-s", phase_s, True, "a finite number of seconds")
    omega = 2.0 * math.pi / period_s
    lo, hi = omega * phase_s, omega * (duration_s + phase_s)
    integral = duration_s - amplitude * (math.sin(hi) - math.sin(lo)) / omega
    scale = rate_per_s * duration_s / integral
    # Thinning (Lewis-Shedler): candidates at the shape's maximum on the horizon, each kept
    # with probability shape(t) / maximum. Bounding by the horizon's own maximum, not 1 + A,
    # keeps a short run near a trough from drawing millions of candidates.
    peak = _max_one_minus_cos(lo, hi, amplitude)
    candidates = uniform_times(rng, 0.0, duration_s, scale * peak)
    shape = 1.0 - amplitude * np.cos(omega * (candidates + phase_s))
    keep = rng.random(candidates.size) * peak < shape
    return candidates[keep]


def _max_one_minus_cos(lo: float, hi: float, amplitude: float) -> float:
    """max of 1 - A cos(theta) for theta in [lo, hi]."""
    next_peak = math.pi + 2.0 * math.pi * math.ceil((lo - math.pi) / (2.0 * math.pi))
    if next_peak <= hi:
        return 1.0 + amplitude
    return 1.0 - amplitude * min(math.cos(lo), math.cos(hi))


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
    require("step", "factor", factor, factor > 0, "> 0 (rate after / rate before)")
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
    require("flash-crowd", "factor", factor, factor >= 1, ">= 1 (peak rate / baseline rate)")
    require("flash-crowd", "at-s", at, 0 <= at <= duration_s, f"in [0, {duration_s:g}] (the --duration-s)")
    require("flash-crowd", "decay-s", decay_s, decay_s > 0, "> 0 seconds")
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
