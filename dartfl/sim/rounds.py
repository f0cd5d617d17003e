"""FL rounds in both simulators: round i runs over [i r, (i + 1) r) and closes at its end.

Every round that ends at or before the horizon closes, the last one included, whatever the
control period: the count is floor(horizon / r), not the number of control ticks that happened
to land after a deadline. Ends are computed as (i + 1) * r, never by summing r, and compared with
a tolerance, so 0.1 s ticks and a 60 s round give the same rounds as 0.25 s ticks.
"""

from __future__ import annotations

import math

__all__ = ["ROUND_TOLERANCE_S", "next_round_end", "rounds_ended_by"]

ROUND_TOLERANCE_S = 1e-9  # an end within this of a time counts as reached (float products)


def rounds_ended_by(t_s: float, round_s: float, horizon_s: float) -> int:
    """How many rounds have ended by `t_s`; none ends after the horizon."""
    until = min(t_s, horizon_s) + ROUND_TOLERANCE_S
    return max(0, math.floor(until / round_s))


def next_round_end(closed: int, round_s: float, horizon_s: float) -> float:
    """When the round after the `closed` ones ends; inf if that is past the horizon."""
    end = (closed + 1) * round_s
    return end if end <= horizon_s + ROUND_TOLERANCE_S else math.inf
