"""The closed forms the fleet's period model is built from, numpy over the device axis.

How long work takes at a rate, how many batches Poisson arrivals fill, where in a round of
batches a task's turn ends (`turn_fraction`), how the rounds of a drain grow
(`drain_rounds`, `growing_rounds_latency`), the round length at which greedy batching keeps a
device busy for good (`busy_round`), and the CDF of a blurred uniform wait
(`BlurredUniform`). Each is a pure function; `dartfl.sim.fleet_period` composes them.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.sim.fleet_types import FloatArray

__all__ = [
    "BlurredUniform",
    "busy_round",
    "div_or_zero",
    "drain_rounds",
    "growing_rounds_latency",
    "round_work",
    "time_to",
    "turn_fraction",
]

_RHO_MAX = 1e9  # growth of the drain rounds when inference gets (almost) no share


def div_or_zero(num: FloatArray, den: FloatArray) -> FloatArray:
    """num / den, and 0 where den <= 0 (under the caller's errstate)."""
    out: FloatArray = np.where(den > 0, num / den, 0.0)
    return out


def time_to(work: FloatArray, rate: FloatArray) -> FloatArray:
    """Time to do `work` at `rate`: inf when there is work and no positive rate."""
    out: FloatArray = np.where(rate > 0, work / rate, np.where(work > 0, math.inf, 0.0))
    return out


def _batches(n: FloatArray, batch: FloatArray) -> FloatArray:
    """Expected batches to serve Poisson(n) requests of one task at once, at most `batch` each."""
    out: FloatArray = np.maximum(-np.expm1(-n), n / batch)
    return out


_SQRT3 = math.sqrt(3.0)


class BlurredUniform:
    """U + Z for U uniform on [lo, hi] and Z a zero-mean noise of deviation sd; `cdf(y)` is
    P(U + Z <= y).

    Z is taken uniform too (on +-sqrt(3) sd), which keeps the result a closed form of plain
    arithmetic (the CDF of a sum of two uniforms is piecewise quadratic):
    F(y) = [r(y - lo + h) - r(y - hi + h) - r(y - lo - h) + r(y - hi - h)] / (4 w h), r(t) = max(t, 0)^2.
    The terms that do not depend on y are kept: the period model asks for each phase's CDF at
    the SLO and, where that misses, past it by a training delay.
    """

    __slots__ = ("h", "lo", "scale", "top", "w")

    def __init__(self, lo: FloatArray, hi: FloatArray, sd: FloatArray) -> None:
        self.lo = lo
        self.h = np.maximum(_SQRT3 * sd, 1e-7)
        self.w = np.maximum(hi - lo, 1e-7)
        self.top = hi + self.h
        self.scale = 0.25 / (self.w * self.h)

    def cdf(self, y: FloatArray) -> FloatArray:
        h = self.h
        a = y - self.lo
        b = a - self.w
        ramps = np.maximum(a + h, 0.0)  # in place from here: the fleet calls this a lot
        ramps *= ramps
        term = np.maximum(b + h, 0.0)
        ramps -= term * term
        term = np.maximum(a - h, 0.0)
        ramps -= term * term
        term = np.maximum(b - h, 0.0)
        ramps += term * term
        ramps *= self.scale
        np.clip(ramps, 0.0, 1.0, out=ramps)
        # Past the top, the differences of large squares have lost their digits: it is 1 there.
        out: FloatArray = np.where(y >= self.top, 1.0, ramps)
        return out


def turn_fraction(queued: FloatArray, fixed: FloatArray, per: FloatArray) -> tuple[FloatArray, FloatArray]:
    """kappa_k and its spread: the part of a round of batches that ends with task k's batch.

    A round serves one batch per waiting task, oldest head first (EDF with equal SLOs). Task j's
    head is older than task k's with probability p = n_j / (n_j + n_k) for Poisson arrivals, so
    task k's batch ends after its own work plus, for each other task, its work with probability
    p: mean kappa_k, variance sum_j p (1 - p) w_j^2 (in units of the round).
    """
    work = fixed * (queued > 0) + per * queued  # (tasks, devices)
    pair = queued[None, :, :] + queued[:, None, :]  # [k, j]: n_k + n_j
    before = np.where(pair > 0, queued[None, :, :] / np.where(pair > 0, pair, 1.0), 0.0)  # P(j before k)
    k_tasks = queued.shape[0]
    diag = np.arange(k_tasks)
    before[diag, diag] = 0.0
    total = work.sum(axis=0)
    turn = work + (before * work[None, :, :]).sum(axis=1)
    spread = (before * (1.0 - before) * (work * work)[None, :, :]).sum(axis=1)
    return div_or_zero(turn, total), np.sqrt(div_or_zero(spread, total * total))


def drain_rounds(
    work0: FloatArray, lam1: FloatArray, share: FloatArray, t1: FloatArray, cap: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The rounds of batches of a drain at `share`: u0, u1, u2, their growth rho and l_end.

    Round 0 serves the queue's work `work0`; what arrives meanwhile (work lam1 per second)
    forms round 1, rho = lam1 / share times as long, and so on. Round i starts at
    S_i = u0 (rho^i - 1) / (rho - 1) and lasts u0 rho^i = u0 + (rho - 1) S_i: the round that
    starts at time t lasts u0 + (rho - 1) t. Averaged over the round, u0 + (rho - 1) t is
    (rho + 1) / 2 times the round's length, so the round under way at t lasts about
    2 (u0 + (rho - 1) t) / (rho + 1): l_end, at the drain's end t1, once rounds grow.
    Every length is capped at `cap`, the longest a wait can last, so a share of 0 gives
    finite lengths, never inf - inf = NaN.
    """
    rho = np.minimum(time_to(lam1, share), _RHO_MAX)
    u0 = np.minimum(time_to(work0, share), cap)
    u1 = np.minimum(rho * u0, cap)
    u2 = np.minimum(rho * u1, cap)
    l_end = np.minimum(np.maximum(u2, 2.0 * (u0 + (rho - 1.0) * t1) / (rho + 1.0)), cap)
    return u0, u1, u2, rho, l_end


def growing_rounds_latency(
    l_start: FloatArray, l_end: FloatArray, turn: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """A uniform [lo, hi] with the mean and variance of the wait in rounds that grow.

    An arrival in a round of length L waits the rest of it, then its turn of the next round
    (`turn` = kappa rho of L): L V with V uniform on [turn, 1 + turn]. Rounds grow linearly in
    time, so L is uniform on [l_start, l_end]. With l_end = l_start this is exactly
    [turn L, (1 + turn) L], the wait in rounds of one length.
    """
    mean_l = (l_start + l_end) / 2.0
    mean_v = turn + 0.5
    # Var(L V) = Var(L) E[V^2] + E[L]^2 Var(V), both uniforms of variance width^2 / 12.
    var = (np.square(l_end - l_start) * (mean_v * mean_v + 1.0 / 12.0) + mean_l * mean_l) / 12.0
    mean = mean_l * mean_v
    half = np.sqrt(3.0 * var)
    return np.maximum(mean - half, 0.0), mean + half


def round_work(n: FloatArray, fixed: FloatArray, per: FloatArray, batch: FloatArray) -> FloatArray:
    """Device time of one round: a batch for every task with requests, n_k of them expected."""
    out: FloatArray = (fixed * _batches(n, batch) + per * n).sum(axis=0)
    return out


def busy_round(lam: FloatArray, fixed: FloatArray, per: FloatArray, batch: FloatArray) -> FloatArray:
    """R*: the round length at which greedy batching keeps the device busy for good (0: none).

    Round after round, each batch holds what arrived during the previous round, so a busy device
    settles where R = sum_k a_k beta(lam_k R) + c_k lam_k R. That has a root R > 0 only when
    serving every request alone would overload the device (sum lam (a + c) > 1): then the queue
    stays at about lam R* and empties only after a round in which nothing arrived (the fleet
    period model's `floor_wait`). Newton from the
    full-batch bound converges from above (the right-hand side is concave in R).
    """
    alone = (lam * (fixed + per)).sum(axis=0)
    out: FloatArray = np.zeros(alone.shape)
    some = np.flatnonzero(alone > 1.0)
    if some.size == 0:
        return out
    lam, fixed, per, batch = lam[:, some], fixed[:, some], per[:, some], batch[some]
    full = (lam * (per + fixed / batch)).sum(axis=0)
    r = np.where(full < 1.0, fixed.sum(axis=0) / np.maximum(1.0 - full, 1e-12), 0.0)
    for _ in range(6):
        n = lam * r
        g = round_work(n, fixed, per, batch) - r
        slope = (lam * (fixed * np.where(n < batch, np.exp(-n), 1.0 / batch) + per)).sum(axis=0) - 1.0
        r = np.maximum(r - g / np.minimum(slope, -1e-9), 0.0)
    out[some] = np.where(full < 1.0, r, 0.0)  # past capacity at full batches: no fixed point
    return out
