"""`dart`: the queue-aware allocator, a drift-plus-penalty decision (docs/allocator.md).

Every control period it weighs three queues against the training it could do:
- the real inference backlogs Q_k (requests waiting per task);
- the virtual training-deficit queue Z (samples owed to the current FL round: how far
  training lags the pace that meets the round's target by its deadline);
- the virtual SLO-miss queue H (misses beyond the budget delta of all arrivals).
One knob, V, prices a trained sample in SLO misses (V = 0.05: one miss is worth 20 samples). The decision is closed form
plus a scan over at most five candidate step sizes, so it is O(K) and allocation-light.

Numbered steps in `decide` follow the derivation in docs/allocator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.policies.shares import LOSS_WEIGHTINGS, demand_shares, loss_weights
from dartfl.types import Allocation, Observation

__all__ = ["DartConfig", "DartPolicy"]


@dataclass(frozen=True)
class DartConfig:
    """DART's knobs. `v` is the trade-off; the rest rarely need changing."""

    v: float = 0.05  # worth of one trained sample in SLO misses (0.05: a miss costs 20 samples)
    miss_budget: float = 0.002  # delta: long-run fraction of requests DART may add as misses
    slack_margin: float = 0.1  # gamma: fraction of the SLO kept in reserve for estimate error
    share_floor: float = 0.05  # epsilon: least training share any task gets
    loss_weighting: str = "demand"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.v) and self.v >= 0):
            raise ConfigError(f"dart knob v must be a finite number >= 0, got {self.v}")
        if not 0.0 <= self.miss_budget < 1.0:
            raise ConfigError(f"dart miss budget must lie in [0, 1), got {self.miss_budget}")
        if not 0.0 <= self.slack_margin < 1.0:
            raise ConfigError(f"dart slack margin must lie in [0, 1), got {self.slack_margin}")
        if not 0.0 < self.share_floor <= 1.0:
            raise ConfigError(f"dart share floor must lie in (0, 1], got {self.share_floor}")
        if self.loss_weighting not in LOSS_WEIGHTINGS:
            raise ConfigError(
                f"unknown loss weighting {self.loss_weighting!r}; valid: {', '.join(LOSS_WEIGHTINGS)}"
            )


def training_deficit(obs: Observation) -> float:
    """Z: samples the round is behind the straight-line pace to its target (0 if none owed)."""
    target = obs.round_target_samples
    if target <= 0:
        return 0.0
    span = obs.round_deadline_s - obs.round_start_s
    if not math.isfinite(span) or span <= 0:
        return 0.0
    progress = min(1.0, max(0.0, (obs.now_s - obs.round_start_s) / span))
    return max(0.0, target * progress - obs.round_trained_samples)


class DartPolicy(Policy):
    def __init__(self, config: DartConfig | None = None) -> None:
        self.config = config or DartConfig()
        self.name = "dart" if self.config.v == DartConfig().v else f"dart:{self.config.v:g}"
        self.miss_queue = 0.0  # H, in requests

    def reset(self) -> None:
        self.miss_queue = 0.0

    def update(self, obs: Observation) -> None:
        """H <- max(H + misses - delta * arrivals, 0): the miss budget as a virtual queue."""
        excess = sum(obs.slo_misses_since_last) - self.config.miss_budget * sum(obs.arrivals_since_last)
        self.miss_queue = max(0.0, self.miss_queue + excess)

    def decide(self, obs: Observation) -> Allocation:
        cfg = self.config
        tau = obs.period_s
        a_t, c_t, m_max = obs.microbatch_fixed_s, obs.per_sample_s, obs.max_microbatch
        b_max = obs.max_batch
        backlog, fixed, per = obs.backlog, obs.batch_fixed_s, obs.per_request_s

        # 1. Burst-robust arrival rates: the estimate, or last period's count if that is higher.
        lam = [max(r, n / tau) for r, n in zip(obs.arrival_rate_per_s, obs.arrivals_since_last, strict=True)]
        lam_total = sum(lam)
        lam_cost = 0.0  # sum_k c_k lambda_k: device seconds per second that arrivals add
        active_fixed = 0.0  # sum of a_k over tasks that will need a batch after a step
        slo_min = math.inf
        for k, rate in enumerate(lam):
            if rate > 0.0 or backlog[k] > 0:
                lam_cost += per[k] * rate
                active_fixed += fixed[k]
                slo_min = min(slo_min, obs.slo_s[k])
        if slo_min == math.inf:
            slo_min = min(obs.slo_s)
        budget_s = slo_min * (1.0 - cfg.slack_margin)

        # 2. SLO-safe step length when the backlog is served first: a request arriving as the
        #    step starts waits s, then one batch per active task holding what arrived meanwhile.
        s_safe = (budget_s - active_fixed) / (1.0 + lam_cost)

        # 3. Choose the step size m maximising (Z + V) * r_T(m) - (1 + H) * r_M(m).
        deficit = training_deficit(obs)
        gain = deficit + cfg.v
        miss_cost = (1.0 + self.miss_queue) * lam_total
        m = self._best_microbatch(a_t, c_t, m_max, s_safe, gain, miss_cost)

        # 4. Inference share by max-weight against the deficit only: below capacity the total
        #    training time is fixed by work conservation, so taking time from waiting requests
        #    gains nothing but timing, which only owed work (Z > 0) is worth. Task k outranks
        #    training when its backlog per second of service, Q_k / c_k(b), beats Z * r_T(m).
        share = 1.0
        if m > 0 and deficit > 0.0:
            train_weight = deficit * m / (a_t + c_t * m)
            needed = 0.0
            all_outrank = True
            for k, rate in enumerate(lam):
                expected = max(1.0, backlog[k] + rate * tau) if rate > 0.0 or backlog[k] else 0.0
                if expected == 0.0:
                    continue
                cost = per[k] + fixed[k] / min(b_max, expected)
                if max(1, backlog[k]) / cost >= train_weight:
                    needed += expected * cost / tau
                else:
                    all_outrank = False
            if not all_outrank:
                share = min(1.0, needed)
                # Requests now wait behind steps: size the step for the oldest one's slack.
                oldest = max(obs.oldest_age_s)
                queued = sum(fixed[k] + per[k] * backlog[k] for k in range(len(backlog)) if backlog[k])
                s_wait = (budget_s - oldest - queued - active_fixed) / (1.0 + lam_cost)
                m = max(1, min(m, self._safe_microbatch(a_t, c_t, m_max, s_wait)))

        # 5. Inference batch cap: shrink it only when that lets the most urgent head meet its SLO,
        #    never below the batch that keeps up with the arrival rate.
        batch = self._batch_cap(obs, lam, b_max)

        # 6. Training shares follow demand with a floor; loss weights follow the shares.
        shares = demand_shares(obs.arrival_rate_per_s, backlog, tau, cfg.share_floor)
        return Allocation(share, shares, loss_weights(cfg.loss_weighting, shares), m, batch)

    @staticmethod
    def _safe_microbatch(a_t: float, c_t: float, m_max: int, s_safe: float) -> int:
        if s_safe <= a_t:
            return 0
        return min(m_max, int((s_safe - a_t) / c_t))

    def _best_microbatch(
        self, a_t: float, c_t: float, m_max: int, s_safe: float, gain: float, miss_cost: float
    ) -> int:
        m_safe = self._safe_microbatch(a_t, c_t, m_max, s_safe)
        if m_safe >= m_max:
            return m_max
        best_m, best_j = 0, 0.0
        if m_safe > 0:
            best_m, best_j = m_safe, gain * m_safe / (a_t + c_t * m_safe)
        span = m_max - m_safe
        # Steps longer than s_safe trade misses for efficiency; scan a coarse grid above m_safe.
        for m in (m_safe + max(1, span // 4), m_safe + max(1, span // 2), m_max):
            s = a_t + c_t * m
            j = (gain * m - miss_cost * max(0.0, s - s_safe)) / s
            if j > best_j:
                best_m, best_j = m, j
        return best_m

    @staticmethod
    def _batch_cap(obs: Observation, lam: list[float], b_max: int) -> int:
        urgent_slack = math.inf
        urgent = -1
        for k, q in enumerate(obs.backlog):
            if q > 0:
                slack = obs.slo_s[k] - obs.oldest_age_s[k]
                if slack < urgent_slack:
                    urgent_slack, urgent = slack, k
        if urgent < 0:
            return b_max
        a, c = obs.batch_fixed_s[urgent], obs.per_request_s[urgent]
        fits = int((urgent_slack - a) / c) if urgent_slack > a else 0
        if fits < 1 or fits >= obs.backlog[urgent]:
            return b_max  # the head is lost anyway, or the whole queue fits: maximise throughput
        rate = lam[urgent]
        keep_up = b_max if rate * c >= 1.0 else math.ceil(rate * a / (1.0 - rate * c))
        return max(1, min(b_max, max(fits, keep_up)))
