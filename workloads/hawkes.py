"""Self-exciting (Hawkes) arrivals: sessions whose requests trigger follow-up requests.

Intensity lambda(t) = mu + sum_{t_i < t} (branching / kernel_s) exp(-(t - t_i) / kernel_s).
Simulated with the cluster (branching) representation, one vectorised step per generation:
immigrants arrive as Poisson(mu); each arrival has Poisson(branching) children, each delayed
by Exp(kernel_s). The stationary mean rate is mu / (1 - branching), so mu is set from it.
"""

from __future__ import annotations

import numpy as np

from dartfl.errors import ConfigError
from workloads._common import MAX_REQUESTS, FloatArray, check_horizon, require

__all__ = ["HAWKES_MAX_KERNEL_S", "hawkes_times"]

HAWKES_MAX_KERNEL_S = 1e9

# Immigrants start this many relaxation times (kernel_s / (1 - branching)) before t = 0, so the
# run begins in steady state: the missing rate at t = 0 is a fraction e^-10 of the mean.
_BURN_IN_RELAXATIONS = 10.0


def hawkes_times(
    duration_s: float,
    rate_per_s: float,
    rng: np.random.Generator,
    *,
    branching: float = 0.9,
    kernel_s: float = 0.5,
) -> FloatArray:
    """Hawkes process with an exponential kernel; mean cluster size 1 / (1 - branching)."""
    check_horizon("hawkes", duration_s, rate_per_s)
    require("hawkes", "branching", branching, 0 <= branching < 1, "in [0, 1) (a stable process)")
    # A follow-up 10^9 s (32 years) on is no session burst; near 1e308 the burn-in below was
    # inf, and its refusal read "needs a inf-s burn-in ... about inf simulated requests".
    require(
        "hawkes",
        "kernel-s",
        kernel_s,
        0 < kernel_s <= HAWKES_MAX_KERNEL_S,
        f"in (0, {HAWKES_MAX_KERNEL_S:g}] seconds",
    )
    immigrant_rate = rate_per_s * (1.0 - branching)
    burn_in = _BURN_IN_RELAXATIONS * kernel_s / (1.0 - branching)
    simulated = rate_per_s * (burn_in + duration_s)  # the burn-in's events are made, then dropped
    if simulated > MAX_REQUESTS:
        raise ConfigError(
            f"hawkes: branching {branching:g} with kernel-s {kernel_s:g} needs a {burn_in:.3g}-s burn-in "
            f"to start in steady state, about {simulated:.3g} simulated requests at {rate_per_s:g} req/s, "
            f"more than the {MAX_REQUESTS:,} this tool holds; lower --param branching or --param kernel-s"
        )
    n = int(rng.poisson(immigrant_rate * (burn_in + duration_s)))
    generation = rng.uniform(-burn_in, duration_s, n)
    kept = [generation]
    while generation.size:
        children = rng.poisson(branching, generation.size)
        parents = np.repeat(generation, children)
        generation = parents + rng.exponential(kernel_s, parents.size)
        # A child past the horizon only has later descendants: drop the whole subtree.
        generation = generation[generation < duration_s]
        kept.append(generation)
    times = np.concatenate(kept)
    return np.sort(times[times >= 0.0])
