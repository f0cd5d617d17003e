"""The misses a serving lane risks: what it must carry, and who waits too long behind it.

Step 1 and step 4 of DART's core split (`dartfl.policies.core_split`, docs/allocator.md
"Splitting the cores"): `lane_demand` sums what the arrivals and the backlog ask of a lane at
some per-task prices; `late_per_s`, `backlog_late` and `held_late` turn that into the requests
per second a lane, its backlog, or a time-shared lane's training steps make late. Every
serving lane's prices are one set of prices scaled, so one `LaneDemand` serves all splits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dartfl.types import Observation

__all__ = ["BURST_S", "LaneDemand", "backlog_late", "held_late", "lane_demand", "late_per_s"]

# How long a burst that overloads a serving lane is taken to last (step 4): the smoothing of
# the arrival rates (2 s) catches up with it by then, and the lane is judged at its rate.
BURST_S = 2.5


@dataclass(frozen=True, slots=True)
class LaneDemand:
    """What the serving lane must carry now, priced at some per-task costs (step 1)."""

    busy: float  # sum_i r_i c_i: the busy fraction of the arrivals (rho)
    active_s: float  # sum_i a_i over active tasks: A
    alone_s: float  # the rate-weighted time of a batch of one: how long one request is served
    each_s: float  # the rate-weighted per-request cost: how fast a queue drains in batches
    queued_s: float  # sum_i Q_i c_i: the backlog's work
    peak: float  # sum_i peak_i c_i: the busy fraction at the remembered burst rate
    now: float  # sum_i max(lambda_i, peak_i) c_i: the busy fraction a burst needs
    mean_per_s: float  # the plain mean per-request cost (prices a mix with no arrivals)


def lane_demand(
    obs: Observation,
    rates: Sequence[float],
    planned: Sequence[float],
    peak: Sequence[float],
    fixed: Sequence[float],
    per: Sequence[float],
) -> LaneDemand:
    busy = active = alone = each = queued = at_peak = now = 0.0
    for rate, q, a, c, top, plan in zip(rates, obs.backlog, fixed, per, peak, planned, strict=True):
        now += max(plan, top) * c
        if rate > 0.0 or q > 0:
            busy += rate * c
            active += a
            alone += rate * (a + c)
            each += rate * c
            queued += q * c
        at_peak += top * c
    arrivals = sum(rates)
    mean = sum(per) / len(per)
    if arrivals <= 0:
        return LaneDemand(busy, active, 0.0, 0.0, queued, at_peak, now, mean)
    return LaneDemand(busy, active, alone / arrivals, each / arrivals, queued, at_peak, now, mean)


def late_per_s(rho: float, d: LaneDemand, scale: float, arrivals: float, budget_s: float) -> float:
    """The arrivals per second a lane whose prices are `scale` times `d`'s serves late (step 4).

    Below capacity, a request's wait is near exponential in heavy traffic (Kingman): with
    Poisson arrivals and deterministic service, P(W > x) ~ rho exp(-2 (1 - rho) x / s). A
    queue drains in batches at s = the per-request cost, and a request is late when it
    waits more than B less a batch of one. Where a burst (DART's planning rates and the
    remembered peak) overloads the lane, rho' > 1, it falls behind by rho' - 1 seconds of
    work per second while the burst lasts, and arrivals are late once it is B behind: over
    a burst of BURST_S seconds, a share 1 - B / ((rho' - 1) BURST_S) of them. Overloaded at
    the smoothed rates, every arrival counts as late and the excess past capacity once more,
    so that more capacity is always worth more (continuous with rho -> 1)."""
    if rho >= 1.0:
        return arrivals * (2.0 - 1.0 / rho)
    late = 0.0
    if d.each_s > 0:
        slack = budget_s - d.alone_s * scale
        late = rho * math.exp(-2.0 * (1.0 - rho) * slack / (d.each_s * scale)) if slack > 0 else 1.0
    burst = d.now * scale
    if burst > 1.0:
        late = max(late, 1.0 - budget_s / ((burst - 1.0) * BURST_S))
    return arrivals * late


def backlog_late(
    rho: float, d: LaneDemand, scale: float, backlog: int, horizon_s: float, budget_s: float
) -> float:
    """The share of the backlog that cannot drain within B, spread over the horizon a move is
    judged on (all of it when the lane cannot keep up)."""
    if rho >= 1.0:
        return backlog / horizon_s
    drain = d.queued_s * scale / (1.0 - rho)
    return backlog * (drain - budget_s) / drain / horizon_s if drain > budget_s else 0.0


def held_late(m: int, step: tuple[float, float], d: LaneDemand, budget_s: float) -> float:
    """The share of arrivals during a step of m samples on a time-shared lane that finish
    late. One arriving with r of the step left waits r, then the batches of what arrived
    meanwhile, r (1 + rho) + A, and a queueing tail on top (Kingman, as in `late_per_s`):
    rho exp(-2 (1 - rho) (B - A - r (1 + rho)) / c), averaged over r uniform in [0, s]."""
    rho, c = d.busy, d.each_s
    if m <= 0 or c <= 0 or rho >= 1.0:
        return 0.0 if m <= 0 else 1.0
    held_s = step[0] + step[1] * m
    decay = 2.0 * (1.0 - rho) / c
    full, empty = budget_s - d.active_s - held_s * (1.0 + rho), budget_s - d.active_s
    if full <= 0:  # the arrivals in the step's first -full / (1 + rho) seconds are late for sure
        sure = min(1.0, -full / ((1.0 + rho) * held_s))
        return sure + (1.0 - sure) * rho * (1.0 - math.exp(-decay * empty)) / (decay * empty)
    return rho * (math.exp(-decay * full) - math.exp(-decay * empty)) / (decay * (1.0 + rho) * held_s)
