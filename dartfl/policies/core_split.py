"""DART's core split: how many of a device's N cores serve inference, chosen every period.

docs/allocator.md ("Splitting the cores") derives it; the numbered steps match `choose`:

1. Every split k in 1..N-1 gives a serving lane of k cores, slowed by the training lane's
   interference, and a training lane of N - k; k = N is time sharing. For each, the load the
   serving lane carries at the smoothed rates is rho_k = sum_i r_i c_i(k), the load a burst
   brings is rho'_k (DART's planning rates at their upper two-sigma bound, read over a
   burst's length while the rate is steady and over one period at an onset; its remembered
   peak; and the busiest period of the burst memory, `CoreSplit.update`), and its backlog
   drains in
   D_k = sum_i Q_i c_i(k) / (1 - rho_k).
2. The serving lane is decided as DART decides a whole device (`lane_decision`, on the
   lane's costs): its share, batch cap and the step size m_k it trains in its idle time.
   Training there is a bonus on top of the training lane's, not worth a miss, so m_k is
   also capped where a step is safe against any rate the lane can serve at all: with
   Lambda_c -> 1 the safe step of docs/allocator.md is s <= (B - A) / 2.
3. The training lane trains in steps the serving lane can wait for: in a burst the serving
   lane falls behind by rho'_k - 1 seconds of work per second until the training lane
   hands its cores back (one step, one period, one switch), and the whole device then works
   the lag off R_k times faster than the lane (R_k: the device's speed over the lane's), so
   the step is capped where the delay, (rho'_k - 1) / R_k per second of it, reaches B. The
   burst is rho'_k, or at least one the whole device, time-shared, could still carry
   (rho_N = 1): time sharing survives it, so a split must too. Where not even a one-sample
   step fits (a tight SLO), steps are full: a cap would only waste their fixed cost.
4. Value per second, in trained samples: the training lane's rate, plus the serving lane's
   (1 - rho_k) of idle time at its step rate, less the misses the split risks, priced as
   DART prices a miss against a sample: the arrivals whose wait exceeds B less their own
   service (Kingman's heavy-traffic tail at rho_k); those a burst makes late (falling
   rho'_k - 1 behind for BURST_S seconds); all of them and the excess again when rho_k >= 1;
   the share of the backlog that cannot drain within B; and, time-shared, those its steps
   hold back (the k = N candidate trains in DART's step where that is worth it, else in the
   best of a half, a quarter... of it, or not at all), less what each way has cost here:
   a split its misses per second of split (`split_cost_per_s`), time sharing its
   training-caused misses per request, at the current rate (`shared_cost_per_request`).
5. The shared integer-split decision (`dartfl.unit_split`, as the datacenter mode's) moves k
   only if the gain clears the hysteresis band and repays the moved cores' switch time. It
   moves to fewer serving cores only once they would carry the burst (rho'_k < 1): up at
   once, down slowly, since on/off sources come back.

Two rules around the decision: the device time-shares until it has seen BURST_S seconds of
arrivals (a split planned on no history once lost a Jetson 49 requests in its first period),
and a split asks the executor to reclaim the training lane's cores at its next step boundary
once the serving lane falls behind (`Allocation.reclaim_when_behind`), not a period later.

The lane's miss model of steps 1 and 4 (demand, the queueing tail, the held-back arrivals)
is `dartfl.policies.lane_misses`.

O(K + N) per period plus one lane decision: every serving-lane price is the one-core price
scaled by (1 + f) / S(k), so the sums over tasks are taken once and scaled per split.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dartfl.errors import ConfigError
from dartfl.policies.lane_misses import BURST_S, backlog_late, held_late, lane_demand, late_per_s
from dartfl.types import Allocation, CoreCosts, Observation
from dartfl.unit_split import SplitRule, choose_split_small

__all__ = ["BURST_S", "CoreSplit", "CoreSplitConfig"]

# A burst's rate is planned at its upper bound of this many standard deviations of its
# Poisson count (step 1): lambda + z sqrt(lambda / w), with w the window the count is read
# over (`_burst_rate`).
BURST_SIGMAS = 2.0
# What splits have cost (step 4): misses per second of split, forgotten over SPLIT_MEMORY_S
# towards a prior of PRIOR_SPLIT_S seconds of split without a miss; what time sharing has cost
# alike, per request, towards PRIOR_SPLIT_S seconds of time sharing without a miss.
SPLIT_MEMORY_S = 600.0
PRIOR_SPLIT_S = 60.0


@dataclass(frozen=True)
class CoreSplitConfig:
    """How reluctant the split is to move: the least gain worth a move (a share of the best
    training rate), and the horizon in seconds a move must repay its switch time in."""

    hysteresis: float = 0.05
    hold_s: float = 1.0
    # The seconds over which a steady burst rate's count noise is read (step 1): the burst's
    # length the miss model assumes. An onset is read over one period whatever this says, and
    # 0 (or one period) reads every rate so, the rule before 2026-12-07 (docs/benchmarks.md,
    # "The burst bound's window").
    noise_window_s: float = BURST_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.hysteresis) and 0.0 <= self.hysteresis < 1.0):
            raise ConfigError(f"core split hysteresis must lie in [0, 1), got {self.hysteresis}")
        if not (math.isfinite(self.hold_s) and self.hold_s > 0):
            raise ConfigError(f"core split hold_s must be a finite number > 0, got {self.hold_s}")
        if not (math.isfinite(self.noise_window_s) and self.noise_window_s >= 0):
            raise ConfigError(
                f"core split noise window must be a finite number of seconds >= 0 (0: one period), "
                f"got {self.noise_window_s}"
            )


@dataclass(frozen=True)
class _Prices:
    """One split's costs: per task on the serving lane (interfered), steps on both lanes."""

    scale: float  # serving-lane price over the one-core price: (1 + f_inference) / S(k)
    fixed: tuple[float, ...]
    per: tuple[float, ...]
    serve_step: tuple[float, float]  # (a_T, c_T) of a step on the serving lane, interfered
    train_step: tuple[float, float]  # the same on the training lane


def _prices(split: CoreCosts) -> list[_Prices]:
    """Index k - 1 for k = 1..N-1 serving cores."""
    n, f_i, f_t = split.cores, 1.0 + split.inference_interference, 1.0 + split.training_interference
    a_t, c_t = split.microbatch_fixed_s, split.per_sample_s
    out = []
    for k in range(1, n):
        scale = f_i / split.inference_speedup[k - 1]
        serve, lane = f_t / split.training_speedup[k - 1], f_t / split.training_speedup[n - k - 1]
        out.append(
            _Prices(
                scale,
                tuple(a * scale for a in split.batch_fixed_s),
                tuple(c * scale for c in split.per_request_s),
                (a_t * serve, c_t * serve),
                (a_t * lane, c_t * lane),
            )
        )
    return out


def _burst_rate(planned: float, smoothed: float, count: int, tau: float, window_s: float) -> float:
    """A task's burst rate for step 1: `planned` at its upper bound, the count's noise read
    over `window_s` while the rate is steady (this period's count within its per-period noise
    of the smoothed rate): a lane must carry the burst's rate over its length, not one
    period's jitter. At an onset, or an end, only this period's count speaks for the rate,
    and its per-period noise is also the margin for the burst's growth."""
    if planned <= 0.0:
        return 0.0
    steady = abs(count / tau - smoothed) <= BURST_SIGMAS * math.sqrt(smoothed / tau)
    return planned + BURST_SIGMAS * math.sqrt(planned / (window_s if steady else tau))


def _steps_within(span_s: float, step: tuple[float, float], m_max: int) -> int:
    """The largest step (0..m_max samples) that takes at most `span_s`."""
    a_t, c_t = step
    return max(0, min(m_max, int((span_s - a_t) / c_t))) if span_s > a_t else 0


def _rate(m: int, step: tuple[float, float]) -> float:
    return m / (step[0] + step[1] * m) if m > 0 else 0.0


class CoreSplit:
    """Chooses the split every period (module docstring); stateless but for a price cache."""

    def __init__(self, config: CoreSplitConfig | None = None) -> None:
        self.config = config or CoreSplitConfig()
        self._split: CoreCosts | None = None
        self._prices: list[_Prices] = []
        self._rule = SplitRule(0.0, 0.0, self.config.hold_s, self.config.hysteresis)
        self.burst_work = 0.0  # remembered busiest period: one-core seconds of arrivals per second
        self._risk_period_s = -1.0
        self._risk_decay = 1.0
        self.reset()

    def reset(self) -> None:
        self.burst_work = 0.0
        self.split_misses = 0.0  # exponentially weighted: misses the split alone explains
        self.split_seconds = 0.0  # and seconds spent split
        self.shared_misses = 0.0  # exponentially weighted: training-caused misses time-shared
        self.shared_requests = 0.0  # and the requests that arrived time-shared
        self.shared_seconds = 0.0  # and seconds spent time-shared
        self.seen_s = 0.0  # seconds of arrivals observed: no split before BURST_S of them

    @property
    def split_cost_per_s(self) -> float:
        """Misses per second of split, learnt from the device's own history (step 4)."""
        return self.split_misses / (self.split_seconds + PRIOR_SPLIT_S)

    @property
    def shared_cost_per_request(self) -> float:
        """Training-caused misses per request while time-shared, learnt alike (step 4). Per
        request, not per second: time sharing's steps delay the requests that arrive during
        them, so its misses come with the arrivals, and a quiet spell costs it nothing."""
        if self.shared_requests <= 0.0:
            return 0.0
        # The prior, PRIOR_SPLIT_S seconds without a miss, at the time-shared arrival rate.
        confidence = self.shared_seconds / (self.shared_seconds + PRIOR_SPLIT_S)
        return self.shared_misses / self.shared_requests * confidence

    def update(self, obs: Observation, decay: float) -> None:
        """Remember the busiest period's work, decaying by `decay` a period (DART's burst
        memory). Per-task rates smooth a short burst away and per-task maxima of separate
        periods add up to more than any period held; the total work of each period is what a
        serving lane had to carry. Also count the period's misses towards the learnt cost of
        the way it ran, split or time-shared (step 4)."""
        split = obs.split
        if split is None:
            return
        tau = obs.period_s
        self.seen_s += tau
        if tau != self._risk_period_s:
            self._risk_period_s, self._risk_decay = tau, math.exp(-tau / SPLIT_MEMORY_S)
        d = self._risk_decay
        shared = obs.inference_cores >= split.cores
        self.split_misses = self.split_misses * d + sum(obs.split_misses_since_last)
        self.split_seconds = self.split_seconds * d + (0.0 if shared else tau)
        self.shared_misses = self.shared_misses * d + (sum(obs.training_misses_since_last) if shared else 0)
        self.shared_requests = self.shared_requests * d + (sum(obs.arrivals_since_last) if shared else 0)
        self.shared_seconds = self.shared_seconds * d + (tau if shared else 0.0)
        work = sum(n * c for n, c in zip(obs.arrivals_since_last, split.per_request_s, strict=True))
        self.burst_work = max(work / obs.period_s, self.burst_work * decay)

    def _cached(self, split: CoreCosts) -> tuple[list[_Prices], SplitRule]:
        if split is not self._split:  # static costs hand over the same object every period
            self._split, self._prices = split, _prices(split)
            cfg = self.config
            self._rule = SplitRule(split.switch_s, split.switch_s, cfg.hold_s, cfg.hysteresis)
        return self._prices, self._rule

    def choose(
        self,
        obs: Observation,
        shared: Allocation,
        lane_decision: Callable[[Observation], Allocation],
        planned: Sequence[float],
        peak: Sequence[float],
        miss_price: float,
        budget_s: float,
    ) -> Allocation:
        """The allocation for the period: `shared` (time sharing) or a split of the cores.

        `planned`: DART's planning rates per task (step 1 of dart.py); `peak`: per task, the
        burst rate the training lane's step must survive;
        `miss_price`: a miss in trained samples; `budget_s`: the latency budget B."""
        split = obs.split
        # A split commits cores against the bursts the device has seen; before it has seen a
        # burst's length of arrivals, it has no burst to plan for, and time-shares.
        if split is None or self.seen_s < BURST_S:
            return shared
        (prices, rule), n = self._cached(split), split.cores
        tau, m_max, hold_s = obs.period_s, obs.max_microbatch, self.config.hold_s
        # Smoothed rates: the tail model below accounts for the arrivals' own noise, and a
        # burst the smoothing has not caught up with shows in the backlog.
        rates = obs.arrival_rate_per_s
        arrivals, backlog = sum(rates), sum(obs.backlog)
        # Per split k = 1..N: training rate, misses per second, and misses of the backlog.
        rate, late, queued = [0.0] * n, [0.0] * n, [0.0] * n
        # 1. The demand on the whole device and on one core (scaled to each serving lane).
        # A lane judged to carry a burst at its count's mean is overrun by the count's own
        # noise in a quarter of the burst's periods (docs/allocator.md): plan at its bound.
        window = max(self.config.noise_window_s, tau)
        bursts = [
            _burst_rate(r, smoothed, count, tau, window)
            for r, smoothed, count in zip(planned, rates, obs.arrivals_since_last, strict=True)
        ]
        d = lane_demand(obs, rates, bursts, peak, obs.batch_fixed_s, obs.per_request_s)
        one = lane_demand(obs, rates, bursts, peak, split.batch_fixed_s, split.per_request_s)
        # A one-core request's price over a time-shared one's: the serving lane's load (per
        # unit of scale) when arrivals fill the whole device.
        carried = one.each_s / d.each_s if d.each_s > 0 else one.mean_per_s / d.mean_per_s
        # The burst a split must carry: the planning rates, or the busiest period remembered.
        one = dataclasses.replace(one, now=max(one.now, self.burst_work))
        d = dataclasses.replace(d, now=max(d.now, self.burst_work / carried))
        # k = N: time sharing, as DART decided it for the whole device; or, if every way to
        # train costs more in misses than it trains, serving alone on every core.
        step = (obs.microbatch_fixed_s, obs.per_sample_s)
        idle = max(0.0, 1.0 - d.busy)
        serving_late = late_per_s(d.busy, d, 1.0, arrivals, budget_s)

        # Its steps hold requests back: an arrival during one waits out the rest of it. DART's
        # step where that is worth it; else the best shorter one (halving down to one sample)
        # that is worth anything, or none.
        def worth(m: int) -> float:
            return idle * _rate(m, step) - miss_price * (idle * arrivals * held_late(m, step, d, budget_s))

        best_m = shared.microbatch
        if best_m > 0 and worth(best_m) < 0.0:
            shorter = [best_m >> i for i in range(1, best_m.bit_length())]
            best_m = max(shorter, key=worth, default=0)
            if best_m > 0 and worth(best_m) <= 0.0:
                best_m = 0
        if best_m != shared.microbatch:
            shared = dataclasses.replace(shared, microbatch=best_m)
        rate[n - 1] = idle * _rate(best_m, step)
        late[n - 1] = serving_late + idle * arrivals * held_late(best_m, step, d, budget_s)
        queued[n - 1] = backlog_late(d.busy, d, 1.0, backlog, hold_s, budget_s)
        current = min(obs.inference_cores, n)
        steps: list[tuple[int, int]] = []
        in_time: list[bool] = []
        for k in range(1, n):
            p = prices[k - 1]
            rho, active = one.busy * p.scale, one.active_s * p.scale
            late[k - 1] = late_per_s(rho, one, p.scale, arrivals, budget_s)
            queued[k - 1] = backlog_late(rho, one, p.scale, backlog, hold_s, budget_s)
            # 2. Its idle-time steps, valued at their cap (DART's own rule, below, may pick
            #    smaller ones for the split it settles on); none on a GPU device, whose one
            #    GPU the training lane keeps (CoreCosts.serving_lane_trains).
            m_lane = (
                _steps_within((budget_s - active) / 2.0, p.serve_step, m_max)
                if split.serving_lane_trains
                else 0
            )
            # 3. The training lane's step, capped so that a burst can reclaim cores:
            #    (rho_burst - 1) (step + period + switch) / reclaimed <= B, for the
            #    remembered burst rate or one the whole device, time-shared, could carry.
            m_split = m_max
            reclaimed = carried * p.scale  # the whole device's speed over the serving lane's
            rho_peak = max(one.peak * p.scale, reclaimed)
            # In T seconds of a burst the lane falls (rho_peak - 1) T behind; the whole
            # device, once it has the cores back, works that lag off `reclaimed` times
            # faster, so the last request of the burst waits (rho_peak - 1) T / reclaimed.
            behind = (rho_peak - 1.0) / reclaimed
            if rho_peak > 1.0:
                # No step at all may be short enough (a tight SLO): then capping one only
                # wastes its fixed cost, and a burst is the value's business (step 4).
                m_fit = _steps_within(budget_s / behind - tau - split.switch_s, p.train_step, m_max)
                m_split = m_fit if m_fit > 0 else m_max
            steps.append((m_lane, m_split))
            held_s = p.train_step[0] + p.train_step[1] * m_split
            in_time.append(rho_peak <= 1.0 or behind * (held_s + tau + split.switch_s) <= budget_s)
            # 4. Trained samples per second.
            rate[k - 1] = _rate(m_split, p.train_step) + max(0.0, 1.0 - rho) * _rate(m_lane, p.serve_step)
        # A backlog is helped by more serving cores only if they come in time: taken from a
        # training lane, they come when its step ends, in time only if the step keeps within
        # the reclaim bound of step 3 (a step of one sample may not, where the SLO is tight).
        if current < n and not in_time[current - 1]:
            for k in range(current + 1, n + 1):
                queued[k - 1] = queued[current - 1]
        values = [r - miss_price * (m + q) for r, m, q in zip(rate, late, queued, strict=True)]
        # What each way has cost here: the model above misses the bursts nobody announces,
        # on a split and time-shared alike. Charging only the split's kept tight-SLO devices
        # time-sharing in 1-sample steps whose misses nothing counted (docs/allocator.md).
        learnt = miss_price * self.split_cost_per_s
        for k in range(1, n):
            values[k - 1] -= learnt
        values[n - 1] -= miss_price * self.shared_cost_per_request * arrivals
        # Fewer serving cores only once they would carry the remembered burst: on/off sources
        # come back, and each way down and up again costs two switches and a reclaim.
        for k in range(1, current):
            if one.now * prices[k - 1].scale >= 1.0:
                values[k - 1] = -math.inf
        # 5. Move only for a gain past the band that repays the switch. A moving core's dead
        #    time loses training (the best rate on offer); the band is measured against all
        #    that is at stake, the current split's priced misses too (a noisy estimate where
        #    the SLO is tight: the band keeps the split from following its noise).
        trains = max(max(rate), 1e-9)
        stakes = trains + miss_price * (late[current - 1] + queued[current - 1])
        k = choose_split_small(
            range(1, n + 1), current, values, units=n, scale=trains, rule=rule, band_scale=stakes
        ).split
        if k >= n:
            return shared
        # The serving lane of the split chosen, decided by DART on its costs.
        p, (m_cap, m_split) = prices[k - 1], steps[k - 1]
        lane = lane_decision(
            obs.with_costs(p.fixed, p.per, p.serve_step[0], p.serve_step[1], round_target_samples=0)
        )
        return Allocation(
            lane.inference_share,
            lane.task_shares,
            lane.loss_weights,
            min(lane.microbatch, m_cap),
            lane.max_batch,
            inference_cores=k,
            split_microbatch=m_split,
            reclaim_when_behind=True,
        )
