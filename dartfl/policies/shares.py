"""Per-task training shares and loss weights: how training is split among tasks.

Shares follow demand (arrival rates plus backlog) with a floor so that no task's head is
starved of training; loss-weight schemes turn shares into weights with mean one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dartfl.errors import ConfigError

__all__ = ["LOSS_WEIGHTINGS", "TASK_SHARES", "demand_shares", "loss_weights", "uniform_shares"]

LOSS_WEIGHTINGS = ("uniform", "demand")
TASK_SHARES = ("demand", "uniform")  # how DART splits training among tasks


def uniform_shares(num_tasks: int) -> tuple[float, ...]:
    return (1.0 / num_tasks,) * num_tasks


def demand_shares(
    rates_per_s: Sequence[float], backlog: Sequence[int], period_s: float, floor: float
) -> tuple[float, ...]:
    """y_k = eps + (1 - K eps) * d_k / sum(d), with demand d_k = lambda_k + Q_k / period.

    A backlogged task counts as if its queue arrived within one period, so a burst shifts
    training towards the task that is in demand now. eps = min(floor, 1/K) keeps every share
    positive; with no demand at all the shares are uniform.
    """
    k = len(rates_per_s)
    eps = min(floor, 1.0 / k)
    demand = [r + q / period_s for r, q in zip(rates_per_s, backlog, strict=True)]
    total = sum(demand)
    if total <= 1e-12:  # no demand (or rates decayed to denormals): uniform, never NaN
        return (1.0 / k,) * k
    scale = (1.0 - k * eps) / total
    shares = [eps + d * scale for d in demand]
    # Renormalise away floating-point drift so the shares sum to exactly one.
    s = sum(shares)
    return tuple(y / s for y in shares)


def loss_weights(scheme: str, shares: Sequence[float]) -> tuple[float, ...]:
    """`uniform`: every task weighs 1. `demand`: w_k = K sqrt(y_k) / sum_j sqrt(y_j) (mean 1,
    positive since y_k > 0).

    The square root because the shares already scale how many samples of task k a step holds:
    weights proportional to y_k would make task k's gradient grow with y_k squared and starve
    the low-demand heads (measured in docs/experiments.md); sqrt makes it y_k^1.5.
    """
    k = len(shares)
    if scheme == "uniform":
        return (1.0,) * k
    if scheme == "demand":
        roots = [math.sqrt(y) for y in shares]
        total = sum(roots)
        return tuple(k * r / total for r in roots)
    raise ConfigError(f"unknown loss weighting {scheme!r}; valid: {', '.join(LOSS_WEIGHTINGS)}")
