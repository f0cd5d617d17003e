"""FL rounds in both simulators: round i runs over [i r, (i + 1) r) and closes at its end.

Every round that ends at or before the horizon closes, the last one included, whatever the
control period: the count is floor(horizon / r), not the number of control ticks that happened
to land after a deadline. Ends are computed as (i + 1) * r, never by summing r, and compared with
a tolerance, so 0.1 s ticks and a 60 s round give the same rounds as 0.25 s ticks.
"""

from __future__ import annotations

import math

__all__ = ["ROUND_TOLERANCE_S", "RoundClock", "next_round_end", "rounds_ended_by"]

ROUND_TOLERANCE_S = 1e-9  # an end within this of a time counts as reached (float products)


def rounds_ended_by(t_s: float, round_s: float, horizon_s: float) -> int:
    """How many rounds have ended by `t_s`; none ends after the horizon."""
    until = min(t_s, horizon_s) + ROUND_TOLERANCE_S
    return max(0, math.floor(until / round_s))


def next_round_end(closed: int, round_s: float, horizon_s: float) -> float:
    """When the round after the `closed` ones ends; inf if that is past the horizon."""
    end = (closed + 1) * round_s
    return end if end <= horizon_s + ROUND_TOLERANCE_S else math.inf


class RoundClock:
    """The device's FL rounds: the current one's window, target and progress, and those closed.

    Periodic (a simulated device, a stand-alone agent): round i spans [origin + i r,
    origin + (i + 1) r) and closes at its end, up to the horizon. External (a federated agent):
    the server's rounds, opened by `begin` and closed by `end`; between them nothing is owed.
    """

    def __init__(
        self,
        round_s: float,
        target_samples: int,
        *,
        origin_s: float = 0.0,
        horizon_s: float = math.inf,
        periodic: bool = True,
    ) -> None:
        self.round_s = round_s
        self.target = target_samples if periodic else 0
        self.origin_s = origin_s
        self.horizon_s = horizon_s
        self.periodic = periodic
        self.start_s = origin_s
        self.trained = 0
        self.closed: list[int] = []  # samples trained in each closed round
        self.next_end_s = self._periodic_end() if periodic else math.inf

    @property
    def deadline_s(self) -> float:
        return self.start_s + self.round_s

    def _periodic_end(self) -> float:
        end = next_round_end(len(self.closed), self.round_s, self.horizon_s - self.origin_s)
        return self.origin_s + end

    def close_due(self, now_s: float) -> None:
        """Close every periodic round that has ended by `now_s` (with the steps done by then)."""
        if not self.periodic or now_s < self.next_end_s - ROUND_TOLERANCE_S:
            return
        ended = rounds_ended_by(now_s - self.origin_s, self.round_s, self.horizon_s - self.origin_s)
        while len(self.closed) < ended:
            self.closed.append(self.trained)
            self.trained = 0
        self.start_s = self.origin_s + len(self.closed) * self.round_s
        self.next_end_s = self._periodic_end()

    def begin(self, now_s: float, round_s: float, target_samples: int) -> None:
        """An external round starts now: it owes `target_samples` within `round_s`."""
        self.start_s, self.round_s, self.target, self.trained = now_s, round_s, target_samples, 0

    def end(self) -> int:
        """The external round is over: close it and return what it trained."""
        trained = self.trained
        self.closed.append(trained)
        self.target, self.trained = 0, 0
        return trained
