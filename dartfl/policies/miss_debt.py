"""DART's promise: the miss-debt virtual queue H, its limit H_max, and the step it allows.

H(t+1) = max(H(t) + M(t) - delta A(t), 0) counts the training-caused misses M beyond the
budget delta of the arrivals A. Voluntary training stops while H >= H_max, so H never exceeds
H_max by more than the misses of steps already under way, and on any trace the training-caused
misses are at most delta A + H_max + E (docs/allocator.md, "The promise").

H_max (`debt`, in requests) is fixed, so the promise's slack, (H_max + E) / A, falls as the
arrivals grow, whatever the run's length or the device's speed. Below H_max, `step_cap_s` sizes steps so
that training spends the budget rather than waiting for H to grow: a step of length s finds a
burst that starts during it half-way on average, and delays the work behind it by up to s, so
the training-caused misses per second of training grow as kappa s. The device measures its
miss rate y and its mean step length s-bar (both exponentially weighted), and allows
s-bar x allowance / y, with the allowance delta lambda (1 - H / H_max): the budget, less what
repays the debt.

Plain floats, O(1) per period.
"""

from __future__ import annotations

import math

__all__ = ["RATE_MEMORY_S", "RATE_WARMUP_S", "RISK_MEMORY_S", "MissDebt"]

# The long-run arrival rate (the budget's pace) forgets over RATE_MEMORY_S. Until that much
# time has been seen it is averaged over RATE_WARMUP_S at least, so a run that opens with a
# burst does not start with a large allowance.
RATE_MEMORY_S = 600.0
RATE_WARMUP_S = 10.0
# Unused budget is banked, up to the budget of this many seconds at the long-run rate: H may
# fall to -delta lambda CREDIT_S. Banking leaves the bound as it is (H(t) - H(0) still bounds the
# misses beyond the budget), and lets one unforeseeable burst be paid from savings instead of
# by minutes without training.
CREDIT_S = 600.0
# The miss rate and the step length the cap is measured from forget over this time: misses
# that stopped training are forgotten after a few minutes, and steps grow back.
RISK_MEMORY_S = 120.0


class MissDebt:
    """H, H_max and the measured miss rate per step length, updated once per control period."""

    __slots__ = (
        "_arrived",
        "_decay",
        "_exposure_s2",
        "_misses",
        "_period_s",
        "_risk_decay",
        "_round_start_s",
        "_round_trained",
        "_seen_s",
        "_time_s",
        "_training_s",
        "budget",
        "debt_limit",
        "queue",
        "rate_per_s",
    )

    def __init__(self, budget: float, debt_limit: float) -> None:
        self.budget = budget
        self.debt_limit = debt_limit  # H_max, requests
        self._period_s = -1.0
        self._decay = self._risk_decay = 1.0
        self.reset()

    def reset(self) -> None:
        self.queue = 0.0  # H, requests
        self.rate_per_s = 0.0  # the long-run arrival rate
        self._arrived = self._seen_s = 0.0  # exponentially weighted arrivals and seconds
        # Exponentially weighted over RISK_MEMORY_S: misses, seconds, training seconds and
        # training seconds x step length (the exposure).
        self._misses = self._time_s = self._training_s = self._exposure_s2 = 0.0
        self._round_start_s = math.nan
        self._round_trained = 0

    def update(
        self,
        misses: int,
        arrivals: int,
        period_s: float,
        round_start_s: float,
        round_trained: int,
        step_s: float,
        microbatch: int,
    ) -> None:
        """Fold in one period: `misses` training-caused misses and `arrivals` requests; the
        round's progress tells how many samples were trained, in steps of `microbatch`
        samples and `step_s` seconds (the last decision)."""
        h = self.queue + misses - self.budget * arrivals
        if period_s != self._period_s:
            self._period_s = period_s
            self._decay = math.exp(-period_s / RATE_MEMORY_S)
            self._risk_decay = math.exp(-period_s / RISK_MEMORY_S)
        d = self._decay
        self._arrived = self._arrived * d + arrivals
        self._seen_s = self._seen_s * d + period_s
        self.rate_per_s = self._arrived / max(self._seen_s, RATE_WARMUP_S)
        credit = self.budget * self.rate_per_s * CREDIT_S
        self.queue = h if h > -credit else -credit
        # Samples trained since the last period: the round's count, restarted by a new round.
        same_round = round_start_s == self._round_start_s
        trained = round_trained - self._round_trained if same_round else round_trained
        self._round_start_s, self._round_trained = round_start_s, round_trained
        training = trained * step_s / microbatch if microbatch > 0 and trained > 0 else 0.0
        r = self._risk_decay
        self._misses = self._misses * r + misses
        self._time_s = self._time_s * r + period_s
        self._training_s = self._training_s * r + training
        self._exposure_s2 = self._exposure_s2 * r + training * step_s

    def step_cap_s(self) -> float:
        """The longest voluntary step the budget allows now: 0 at H >= H_max, inf if no miss."""
        h = self.queue / self.debt_limit
        if h >= 1.0:
            return 0.0
        if self._misses <= 0.0 or self._training_s <= 0.0:
            return math.inf
        miss_rate = self._misses / max(self._time_s, RATE_WARMUP_S)
        mean_step_s = self._exposure_s2 / self._training_s
        allowance = self.budget * self.rate_per_s * (1.0 - h if h > 0.0 else 1.0)
        return mean_step_s * allowance / miss_rate
