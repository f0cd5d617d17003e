"""`dart`: the queue-aware allocator, a drift-plus-penalty decision (docs/allocator.md).

Every control period it weighs three queues against the training it could do:
- the real inference backlogs Q_k (requests waiting per task);
- the virtual training-deficit queue Z (samples owed to the current FL round: how far
  training lags the pace that meets the round's target by its deadline);
- the virtual SLO-miss queue H (misses beyond the budget delta of all arrivals).
One knob, V, prices a trained sample in SLO misses (V = 0.05: one miss is worth 20 samples).
The decision is closed form plus a scan over at most four candidate step sizes: O(K).

Numbered steps in `decide` follow the derivation in docs/allocator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.policies.core_split import CoreSplit
from dartfl.policies.shares import LOSS_WEIGHTINGS, TASK_SHARES, demand_shares, loss_weights, uniform_shares
from dartfl.registry import Knob
from dartfl.types import Allocation, Observation

__all__ = ["DART_KNOBS", "DartConfig", "DartPolicy", "training_deficit"]


@dataclass(frozen=True)
class DartConfig:
    """DART's knobs. `v` is the trade-off; the rest rarely need changing."""

    v: float = 0.05  # worth of one trained sample in SLO misses (0.05: a miss costs 20 samples)
    miss_budget: float = 0.002  # delta: long-run fraction of requests DART may add as misses
    slack_margin: float = 0.05  # gamma: SLO fraction kept in reserve (< 0: plan past the SLO)
    burst_memory_s: float = 10.0  # how long the step size remembers a past burst's rate
    burst_weight: float = 0.5  # fraction of a remembered burst rate the step size plans for
    rate_window: int = 4  # periods of recent per-period counts the step size plans for (max)
    share_floor: float = 0.05  # epsilon: least training share any task gets
    # `demand`: shares follow the device's demand; `uniform`: every task alike, for fleets with
    # label-skewed data, where demand shares bias each head (docs/experiments.md).
    task_shares: str = "demand"
    loss_weighting: str = "demand"
    # `on`: on a device of several cores, choose every period how many serve inference
    # (dartfl/policies/core_split.py); `off`: time-share all of them, as on one core.
    core_split: str = "on"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.v) and self.v >= 0):
            raise ConfigError(f"dart knob v must be a finite number >= 0, got {self.v}")
        if not 0.0 <= self.miss_budget < 1.0:
            raise ConfigError(f"dart miss budget must lie in [0, 1), got {self.miss_budget}")
        if not -1.0 < self.slack_margin < 1.0:
            raise ConfigError(f"dart slack margin must lie in (-1, 1), got {self.slack_margin}")
        if not (math.isfinite(self.burst_memory_s) and self.burst_memory_s >= 0):
            raise ConfigError(f"dart burst memory must be a finite number >= 0 s, got {self.burst_memory_s}")
        if not 0.0 <= self.burst_weight <= 1.0:
            raise ConfigError(f"dart burst weight must lie in [0, 1], got {self.burst_weight}")
        if not (isinstance(self.rate_window, int) and self.rate_window >= 1):
            raise ConfigError(f"dart rate window must be an integer >= 1, got {self.rate_window!r}")
        if not 0.0 < self.share_floor <= 1.0:
            raise ConfigError(f"dart share floor must lie in (0, 1], got {self.share_floor}")
        if self.task_shares not in TASK_SHARES:
            raise ConfigError(
                f"unknown dart task shares {self.task_shares!r}; valid: {', '.join(TASK_SHARES)}"
            )
        if self.core_split not in ("on", "off"):
            raise ConfigError(f"dart split must be on or off, got {self.core_split!r}")
        if self.loss_weighting not in LOSS_WEIGHTINGS:
            raise ConfigError(
                f"unknown loss weighting {self.loss_weighting!r}; valid: {', '.join(LOSS_WEIGHTINGS)}"
            )


# The spec keys of `dart:key=value,...` (dartfl.registry); DartConfig checks the values.
DART_KNOBS = (
    Knob("v", float, "worth of one trained sample in SLO misses"),
    Knob("margin", float, "SLO fraction kept in reserve", field="slack_margin"),
    Knob("budget", float, "long-run fraction of requests DART may add as misses", field="miss_budget"),
    Knob("memory", float, "seconds a past burst's rate is remembered", field="burst_memory_s"),
    Knob("shares", str, "training shares: demand or uniform", field="task_shares"),
    Knob("split", str, "split a multi-core device's cores: on or off", field="core_split"),
)


# The pace line reaches the round's target at this fraction of the round, so that a device
# that trains only when behind the line still finishes before the deadline.
PACE_LEAD = 0.9


def training_deficit(obs: Observation) -> float:
    """Z: samples the round is behind the straight-line pace to its target (0 if none owed)."""
    target = obs.round_target_samples
    if target <= 0:
        return 0.0
    span = obs.round_deadline_s - obs.round_start_s
    if not math.isfinite(span) or span <= 0:
        return 0.0
    progress = min(1.0, max(0.0, (obs.now_s - obs.round_start_s) / (PACE_LEAD * span)))
    return max(0.0, target * progress - obs.round_trained_samples)


class DartPolicy(Policy):
    def __init__(self, config: DartConfig | None = None) -> None:
        self.config = config or DartConfig()
        self.name = "dart" if self.config.v == DartConfig().v else f"dart:{self.config.v:g}"
        self.miss_queue = 0.0  # H, in requests
        self.peak_rates: list[float] = []  # per task, decaying with burst_memory_s
        self.recent_max: list[int] = []  # per task: most arrivals in one of the last periods
        self._ring: list[list[int]] = []  # last `rate_window` per-period counts, per task
        self._ring_pos = 0
        self._decay = 0.0
        self._decay_period_s = -1.0
        self.cores = CoreSplit()

    def reset(self) -> None:
        self.cores.reset()
        self.miss_queue = 0.0
        self.peak_rates = []
        self.recent_max = []
        self._ring = []
        self._ring_pos = 0

    def update(self, obs: Observation) -> None:
        """Fold in the last period: the miss budget queue H and the remembered burst rates."""
        # H <- max(H + misses - delta * arrivals, 0), counting the misses training caused
        # (those that waited behind a step) where the executor can tell them apart.
        misses = obs.training_misses_since_last or obs.slo_misses_since_last
        excess = sum(misses) - self.config.miss_budget * sum(obs.arrivals_since_last)
        self.miss_queue = max(0.0, self.miss_queue + excess)
        if obs.period_s != self._decay_period_s:
            memory = self.config.burst_memory_s
            self._decay = math.exp(-obs.period_s / memory) if memory > 0 else 0.0
            self._decay_period_s = obs.period_s
        if len(self.peak_rates) != obs.num_tasks:
            self.peak_rates = [0.0] * obs.num_tasks
            self.recent_max = [0] * obs.num_tasks
            self._ring = [[0] * self.config.rate_window for _ in range(obs.num_tasks)]
            self._ring_pos = 0
        decay = self._decay
        for k, rate in enumerate(obs.arrival_rate_per_s):
            self.peak_rates[k] = max(rate, self.peak_rates[k] * decay)
        pos = self._ring_pos
        for k, n in enumerate(obs.arrivals_since_last):
            ring = self._ring[k]
            ring[pos] = n
            self.recent_max[k] = max(ring)
        self._ring_pos = (pos + 1) % self.config.rate_window
        self.cores.update(obs, decay)  # the busiest period a split must carry (core_split.py)

    def decide(self, obs: Observation) -> Allocation:
        cfg = self.config
        tau = obs.period_s
        a_t, c_t, m_max = obs.microbatch_fixed_s, obs.per_sample_s, obs.max_microbatch
        backlog, fixed, per = obs.backlog, obs.batch_fixed_s, obs.per_request_s
        fresh = len(self.peak_rates) != obs.num_tasks
        peaks = obs.arrival_rate_per_s if fresh else self.peak_rates
        recent = obs.arrivals_since_last if fresh else self.recent_max
        g = cfg.burst_weight

        # 1. Arrival rates to plan for, the largest of: the smoothed estimate; the busiest of
        #    the last few periods (bursty arrivals are autocorrelated, so the near past predicts
        #    the next steps better than a long average); this period's count (a burst is
        #    starting); and part of a burst rate seen in the last seconds, which may come back
        #    while a long step runs (on/off sources).
        lam = [
            max(r, g * p, max(n, c) / tau)
            for r, p, n, c in zip(obs.arrival_rate_per_s, peaks, recent, obs.arrivals_since_last, strict=True)
        ]
        lam_total = 0.0
        lam_cost = 0.0  # Lambda_c = sum_k c_k lambda_k: device seconds per second arrivals need
        active_fixed = 0.0  # A = sum of a_k over active tasks: one batch each after a step
        slo_min = math.inf
        for k, rate in enumerate(lam):
            if rate > 0.0 or backlog[k] > 0:
                lam_total += rate
                lam_cost += per[k] * rate
                active_fixed += fixed[k]
                slo_min = min(slo_min, obs.slo_s[k])
        if slo_min == math.inf:
            slo_min = min(obs.slo_s)
        budget_s = slo_min * (1.0 - cfg.slack_margin)

        # 2. The SLO-safe step: a request arriving as a step of s starts waits s, then one batch
        #    per active task holding what arrived meanwhile: s (1 + Lambda_c) + A <= budget.
        s_safe = (budget_s - active_fixed) / (1.0 + lam_cost)

        # 3. Step size m maximising (Z + V) r_T(m) - (1 + H) r_M(m) per second of training.
        deficit = training_deficit(obs)
        gain = deficit + cfg.v
        # H prices the misses of voluntary training (the V part of the gain). Owed training
        # pays the base price only, so a round's deadline is met even past the miss budget.
        miss_price = 1.0 if deficit > 0.0 else 1.0 + self.miss_queue
        if lam_cost >= 1.0:  # overloaded: every step costs misses; train only what is owed
            m = 1 if deficit > 0.0 else 0
        else:
            m = _best_microbatch(
                a_t,
                c_t,
                m_max,
                s_safe,
                budget_s,
                lam_cost,
                active_fixed,
                lam_total,
                gain,
                miss_price,
            )

        # 4. Inference share. Below capacity, work conservation fixes the total training time,
        #    so taking time from waiting requests only moves training earlier, which is worth
        #    something only to owed work: strict priority unless Z > 0. Then max-weight in
        #    device-seconds: task k outranks training while its queued work Q_k c_k(b) is at
        #    least the owed training work Z s(m) / m; the others wait.
        share = 1.0
        if m > 0 and deficit > 0.0:
            share = _deficit_share(obs, lam, deficit * (a_t + c_t * m) / m)

        # 5. Inference batch cap: shrink it only when that lets the most urgent head meet its
        #    SLO, never below the batch that keeps up with the arrival rate.
        #    Never while the last period's arrivals needed half the device or more: then
        #    throughput rules, and a smaller batch only makes the whole queue later.
        last_load = 0.0
        for n, c in zip(obs.arrivals_since_last, per, strict=True):
            last_load += n * c
        batch = _batch_cap(obs, lam) if last_load < 0.5 * tau else obs.max_batch

        # 6. Training shares follow demand with a floor; loss weights follow the shares.
        if cfg.task_shares == "demand":
            shares = demand_shares(obs.arrival_rate_per_s, backlog, tau, cfg.share_floor)
        else:
            shares = uniform_shares(len(backlog))
        alloc = Allocation(share, shares, loss_weights(cfg.loss_weighting, shares), m, batch)
        if obs.split is None or cfg.core_split == "off":
            return alloc
        # 7. A device of several cores: how many serve (core_split.py). Each serving lane is
        #    decided by this same rule on the lane's costs (its observation has no split).
        peak = [max(r, p) for r, p in zip(lam, peaks, strict=True)]
        return self.cores.choose(obs, alloc, self.decide, lam, peak, miss_price / max(gain, 1e-9), budget_s)


def _best_microbatch(
    a_t: float,
    c_t: float,
    m_max: int,
    s_safe: float,
    budget_s: float,
    lam_cost: float,
    active_fixed: float,
    lam_total: float,
    gain: float,
    miss_price: float,
) -> int:
    """argmax over {0, m_safe, a coarse grid above it} of the per-second objective.

    r_T(m) = m / s(m) samples per second of training; r_M(m) = the arrivals per second that
    land early enough in a step to finish past the budget: lambda * excess / (s (1 + Lambda_c)).
    """
    m_safe = 0 if s_safe <= a_t else min(m_max, int((s_safe - a_t) / c_t))
    if m_safe >= m_max:
        return m_max
    best_m, best_j = 0, 0.0
    if m_safe > 0:
        best_m, best_j = m_safe, gain * m_safe / (a_t + c_t * m_safe)
    span = m_max - m_safe
    for m in (m_safe + max(1, span // 4), m_safe + max(1, span // 2), m_max):
        step = a_t + c_t * m
        stretched = step * (1.0 + lam_cost)
        late = min(1.0, (stretched + active_fixed - budget_s) / stretched)
        j = gain * m / step - miss_price * lam_total * max(0.0, late)
        if j > best_j:
            best_m, best_j = m, j
    return best_m


def _deficit_share(obs: Observation, lam: list[float], owed_work_s: float) -> float:
    """The inference share when the round is behind: only the tasks that outrank training."""
    backlog, fixed, per, tau = obs.backlog, obs.batch_fixed_s, obs.per_request_s, obs.period_s
    needed = 0.0
    all_outrank = True
    for k, rate in enumerate(lam):
        if rate <= 0.0 and not backlog[k]:
            continue
        expected = max(1.0, backlog[k] + rate * tau)
        cost = per[k] + fixed[k] / min(obs.max_batch, expected)
        if max(1, backlog[k]) * cost >= owed_work_s:
            needed += expected * cost / tau
        else:
            all_outrank = False
    return 1.0 if all_outrank else min(1.0, needed)


def _batch_cap(obs: Observation, lam: list[float]) -> int:
    b_max = obs.max_batch
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
