"""`dart`: the queue-aware allocator, a drift-plus-penalty decision (docs/allocator.md).

Every control period it weighs three queues against the training it could do:
- the real inference backlogs Q_k (requests waiting per task);
- the virtual training-deficit queue Z (samples owed to the current FL round: how far
  training lags the pace that meets the round's target by its deadline);
- the virtual miss-debt queue H (training-caused misses beyond the budget delta of all
  arrivals, `MissDebt`). H prices the misses a plan foresees, the misses each class of step
  sizes has brought cut the step to what the budget affords (`StepRisk`), and at H >= H_max
  no voluntary step runs, so the fraction of requests that miss because of training is at
  most delta plus a slack that vanishes as the arrivals grow, on any arrival trace
  (docs/allocator.md, "The promise").
One knob, V, prices a trained sample in SLO misses (V = 0.05: one miss is worth 20 samples).
The step is planned against the recent rate and, as far as the miss debt calls for
(`MissDebt.caution`), the surprise work the device has learnt to expect within a step
(`SurpriseEnvelope`). The decision is closed form plus a scan over five
candidate step sizes and at most six step classes: O(K).

Numbered steps in `decide` follow the derivation in docs/allocator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.policies.burst import SurpriseEnvelope
from dartfl.policies.core_split import BURST_S, CoreSplit, CoreSplitConfig
from dartfl.policies.miss_debt import MissDebt, StepRisk
from dartfl.policies.shares import LOSS_WEIGHTINGS, TASK_SHARES, demand_shares, loss_weights, uniform_shares
from dartfl.registry import Knob
from dartfl.types import Allocation, Observation

__all__ = ["DART_KNOBS", "DartConfig", "DartPolicy", "training_deficit"]


@dataclass(frozen=True)
class DartConfig:
    """DART's knobs. `v` is the trade-off; the rest rarely need changing."""

    v: float = 0.05  # worth of one trained sample in SLO misses (0.05: a miss costs 20 samples)
    miss_budget: float = 0.005  # delta: long-run fraction of requests training may make miss
    debt: float = 1.0  # H_max = debt x sqrt(arrivals so far): the miss debt that stops training
    slack_margin: float = 0.05  # gamma: SLO fraction kept in reserve (< 0: plan past the SLO)
    burst_memory_s: float = 10.0  # how long the step size remembers a past burst's rate
    burst_weight: float = 0.5  # fraction of a remembered burst rate the step size plans for
    rate_window: int = 4  # periods of recent per-period counts the step size plans for (max)
    surprise_quantile: float = 0.95  # p: the level of unforecast work a step is planned for
    surprise_memory_s: float = 120.0  # how long a learnt surprise level lasts without a repeat
    share_floor: float = 0.05  # epsilon: least training share any task gets
    # `demand`: shares follow the device's demand; `uniform`: every task alike, for fleets with
    # label-skewed data, where demand shares bias each head (docs/experiments.md).
    task_shares: str = "demand"
    loss_weighting: str = "demand"
    # `on`: on a device of several cores, choose every period how many serve inference
    # (dartfl/policies/core_split.py); `off`: time-share all of them, as on one core.
    core_split: str = "on"
    # Seconds over which the split reads a steady burst rate's noise (0: one control period).
    split_window_s: float = BURST_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.v) and self.v >= 0):
            raise ConfigError(f"dart knob v must be a finite number >= 0, got {self.v}")
        if not 0.0 <= self.miss_budget < 1.0:
            raise ConfigError(f"dart miss budget must lie in [0, 1), got {self.miss_budget}")
        if not (math.isfinite(self.debt) and self.debt > 0):
            raise ConfigError(f"dart debt must be a finite number > 0, got {self.debt}")
        if not -1.0 < self.slack_margin < 1.0:
            raise ConfigError(f"dart slack margin must lie in (-1, 1), got {self.slack_margin}")
        if not (math.isfinite(self.burst_memory_s) and self.burst_memory_s >= 0):
            raise ConfigError(f"dart burst memory must be a finite number >= 0 s, got {self.burst_memory_s}")
        if not 0.0 <= self.burst_weight <= 1.0:
            raise ConfigError(f"dart burst weight must lie in [0, 1], got {self.burst_weight}")
        if not (isinstance(self.rate_window, int) and self.rate_window >= 1):
            raise ConfigError(f"dart rate window must be an integer >= 1, got {self.rate_window!r}")
        if not 0.5 <= self.surprise_quantile < 1.0:
            raise ConfigError(f"dart surprise quantile must lie in [0.5, 1), got {self.surprise_quantile}")
        if not (math.isfinite(self.surprise_memory_s) and self.surprise_memory_s >= 0):
            raise ConfigError(
                f"dart surprise memory must be a finite number >= 0 s (0: plan on rates only), "
                f"got {self.surprise_memory_s}"
            )
        if not 0.0 < self.share_floor <= 1.0:
            raise ConfigError(f"dart share floor must lie in (0, 1], got {self.share_floor}")
        if self.task_shares not in TASK_SHARES:
            raise ConfigError(
                f"unknown dart task shares {self.task_shares!r}; valid: {', '.join(TASK_SHARES)}"
            )
        if self.core_split not in ("on", "off"):
            raise ConfigError(f"dart split must be on or off, got {self.core_split!r}")
        if not (math.isfinite(self.split_window_s) and self.split_window_s >= 0):
            raise ConfigError(
                f"dart split window must be a finite number of seconds >= 0 (0: one period), "
                f"got {self.split_window_s}"
            )
        if self.loss_weighting not in LOSS_WEIGHTINGS:
            raise ConfigError(
                f"unknown loss weighting {self.loss_weighting!r}; valid: {', '.join(LOSS_WEIGHTINGS)}"
            )


# The spec keys of `dart:key=value,...` (dartfl.registry); DartConfig checks the values.
DART_KNOBS = (
    Knob("v", float, "worth of one trained sample in SLO misses"),
    Knob("margin", float, "SLO fraction kept in reserve", field="slack_margin"),
    Knob("budget", float, "long-run fraction of requests DART may add as misses", field="miss_budget"),
    Knob("debt", float, "H_max / sqrt(arrivals): the miss debt that stops training"),
    Knob("memory", float, "seconds a past burst's rate is remembered", field="burst_memory_s"),
    Knob("shares", str, "training shares: demand or uniform", field="task_shares"),
    Knob("split", str, "split a multi-core device's cores: on or off", field="core_split"),
    Knob(
        "split-window",
        float,
        "seconds over which the core split reads a steady burst rate's noise (0: one period)",
        field="split_window_s",
    ),
)


# The pace line reaches the round's target at this fraction of the round, so that a device
# that trains only when behind the line still finishes before the deadline.
PACE_LEAD = 0.9
# The idle fraction a step's miss rate is scaled by never falls below this (a busy device
# still trains in its gaps).
IDLE_FLOOR = 0.05


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
        self.debt = MissDebt(self.config.miss_budget, self.config.debt)  # H and its limit
        self.risk = StepRisk()  # what steps of each size have cost
        self.peak_rates: list[float] = []  # per task, decaying with burst_memory_s
        self.recent_max: list[int] = []  # per task: most arrivals in one of the last periods
        self._ring: list[list[int]] = []  # last `rate_window` per-period counts, per task
        self._ring_pos = 0
        self._decay = 0.0
        self._decay_period_s = -1.0
        self.cores = CoreSplit(CoreSplitConfig(noise_window_s=self.config.split_window_s))
        self.envelope = SurpriseEnvelope(self.config.surprise_quantile, 0.0)
        # The step size `decide` chose last, the one thing it remembers: `update` prices the
        # exposure of the steps that ran with it.
        self._last_m = 0
        self._last_step_s = 0.0

    @property
    def miss_queue(self) -> float:
        """H, the miss debt in requests."""
        return self.debt.queue

    @miss_queue.setter
    def miss_queue(self, value: float) -> None:
        self.debt.queue = value

    def reset(self) -> None:
        self.cores.reset()
        self.debt.reset()
        self.risk.reset()
        self._last_m = 0
        self._last_step_s = 0.0
        self.peak_rates = []
        self.recent_max = []
        self._ring = []
        self._ring_pos = 0
        self.envelope.reset()

    def update(self, obs: Observation) -> None:
        """Fold in the last period: the miss debt H, the remembered rates, the surprise envelope."""
        cfg = self.config
        tau = obs.period_s
        # H <- max(H + M - delta * A, 0), with M the misses training caused (docs/allocator.md,
        # "What counts as a training-caused miss"), or every miss if the executor cannot tell.
        misses = sum(obs.training_misses_since_last or obs.slo_misses_since_last)
        self.risk.update(
            misses,
            tau,
            obs.round_start_s,
            obs.round_trained_samples,
            self._last_m,
            self._last_step_s,
        )
        if tau != self._decay_period_s:
            memory = cfg.burst_memory_s
            self._decay = math.exp(-tau / memory) if memory > 0 else 0.0
            self._decay_period_s = tau
            self.envelope.set_memory(cfg.surprise_memory_s / tau)
        if len(self.peak_rates) != obs.num_tasks:
            self.peak_rates = [0.0] * obs.num_tasks
            self.recent_max = [0] * obs.num_tasks
            self._ring = [[0] * cfg.rate_window for _ in range(obs.num_tasks)]
            self._ring_pos = 0
            self.envelope.reset()
        decay, g, pos = self._decay, cfg.burst_weight, self._ring_pos
        peaks, recent, per = self.peak_rates, self.recent_max, obs.per_request_s
        work = forecast = 0.0
        for k, (rate, n) in enumerate(zip(obs.arrival_rate_per_s, obs.arrivals_since_last, strict=True)):
            peak = max(rate, peaks[k] * decay)
            peaks[k] = peak
            ring = self._ring[k]
            ring[pos] = n
            most = max(ring)
            recent[k] = most
            work += per[k] * n
            # The work rate step 1 of `decide` plans for from here on: the envelope's forecast.
            forecast += per[k] * max(rate, g * peak, most / tau)
        self._ring_pos = (pos + 1) % cfg.rate_window
        self.envelope.update(work, forecast, tau)
        self.debt.update(misses, sum(obs.arrivals_since_last), work, tau)
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
        #    per active task holding what arrived meanwhile, the forecast Lambda_c s plus the
        #    surprise e(s) the device has learnt to expect: s (1 + Lambda_c) + w e(s) + A <=
        #    budget, with w the caution the miss debt calls for (`MissDebt.caution`).
        envelope, caution = self.envelope, self.debt.caution()
        s_safe = envelope.safe_step_s(budget_s - active_fixed, 1.0 + lam_cost, tau, caution)

        # 3. Step size m maximising (Z + V) r_T(m) - pi r_M(m) per second of training: r_M the
        #    misses the plan foresees, priced pi = 1 / (1 - H / H_max). A voluntary step is then
        #    cut to the largest whose class has cost no more misses per second than the budget
        #    allows (`StepRisk.affordable`), and none runs at H >= H_max: the promise. Owed
        #    training pays the base price only, so a round's deadline is met even past the
        #    miss budget.
        deficit = training_deficit(obs)
        gain = deficit + cfg.v
        price = 1.0 if deficit > 0.0 else self.debt.price()
        if lam_cost >= 1.0 and deficit > 0.0:  # overloaded: owed work in the smallest steps
            m = 1
        elif price == math.inf:
            m = 0
        else:
            plan = (s_safe, budget_s, lam_cost, active_fixed, lam_total, caution)
            m = _best_microbatch(obs, envelope, *plan, gain, price)
            if m > 0 and deficit <= 0.0:
                idle = max(IDLE_FLOOR, 1.0 - self.debt.long_run.load)
                m = self.risk.affordable(m, a_t, c_t, self.debt.allowance_per_s(), idle)

        self._last_m, self._last_step_s = m, a_t + c_t * m

        # 4. Inference share. Below capacity, work conservation fixes the total training time,
        #    so taking time from waiting requests only moves training earlier, which is worth
        #    something only to owed work: strict priority unless Z > 0. Then max-weight in
        #    device-seconds: task k outranks training while its queued work Q_k c_k(b) is at
        #    least the owed training work Z s(m) / m; the others wait.
        #    The owed work is priced per sample at the cheapest step, s(m_max) / m_max, not at
        #    s(m) / m: m itself falls as demand grows, and the share must not.
        share = 1.0
        if deficit > 0.0:
            share = _deficit_share(obs, lam, deficit * (a_t / m_max + c_t))

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
        if obs.split is None or cfg.core_split == "off" or price == math.inf:
            return alloc  # past the debt limit no voluntary training runs, on either lane
        # 7. A device of several cores: how many serve (core_split.py). Each serving lane is
        #    decided by this same rule on the lane's costs (its observation has no split). A
        #    split's misses are training's (docs/allocator.md), so the debt prices them too.
        peak = [max(r, p) for r, p in zip(lam, peaks, strict=True)]
        split_price = max(price, 1.0 + self.debt.queue) if deficit <= 0.0 else 1.0
        chosen = self.cores.choose(
            obs, alloc, self.decide, lam, peak, split_price / max(gain, 1e-9), budget_s
        )
        self._last_m = chosen.microbatch  # the lane's own decision set its step's length
        return chosen


def _best_microbatch(
    obs: Observation,
    envelope: SurpriseEnvelope,
    s_safe: float,
    budget_s: float,
    lam_cost: float,
    active_fixed: float,
    lam_total: float,
    caution: float,
    gain: float,
    price: float,
) -> int:
    """argmax over {0, m_safe, a coarse grid above it} of the per-second objective.

    r_T(m) = m / s(m) samples per second of training; r_M(m) = the arrivals per second that
    land early enough in a step to finish past the budget:
    lambda * excess / (s (1 + Lambda_c) + e(s)).
    """
    a_t, c_t, m_max, tau = obs.microbatch_fixed_s, obs.per_sample_s, obs.max_microbatch, obs.period_s
    m_safe = 0 if s_safe <= a_t else min(m_max, int((s_safe - a_t) / c_t))
    if m_safe >= m_max:
        return m_max
    best_m, best_j = 0, 0.0
    if m_safe > 0:
        best_m, best_j = m_safe, gain * m_safe / (a_t + c_t * m_safe)
    span = m_max - m_safe
    for m in (m_safe + max(1, span // 4), m_safe + max(1, span // 2), m_max):
        step = a_t + c_t * m
        stretched = step * (1.0 + lam_cost) + envelope.surprise_s(step, tau, caution)
        late = min(1.0, (stretched + active_fixed - budget_s) / stretched)
        j = gain * m / step - price * lam_total * max(0.0, late)
        if j > best_j:
            best_m, best_j = m, j
    return best_m


def _deficit_share(obs: Observation, lam: list[float], owed_work_s: float) -> float:
    """The inference share when the round is behind: only the tasks that outrank training."""
    backlog, fixed, per, tau = obs.backlog, obs.batch_fixed_s, obs.per_request_s, obs.period_s
    needed = 0.0
    all_outrank = True
    single_outranks = True  # would one request of every task outrank training?
    present = False
    for k, rate in enumerate(lam):
        if rate <= 0.0 and not backlog[k]:
            single_outranks = single_outranks and per[k] + fixed[k] >= owed_work_s
            continue
        present = True
        expected = max(1.0, backlog[k] + rate * tau)
        cost = per[k] + fixed[k] / min(obs.max_batch, expected)
        if max(1, backlog[k]) * cost >= owed_work_s:
            needed += expected * cost / tau
        else:
            all_outrank = False
    if not present:
        # Nothing waits or is expected: the share is what a first arrival would get, so that
        # more demand never lowers it (the share is monotone in backlog and rates).
        return 1.0 if single_outranks else 0.0
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
