"""`DartPolicy` over a device axis: DART's decision for every device of a fleet at once.

The port repeats the scalar policy's arithmetic operation for operation (same order, same
float64 rounding), so for the same observation it gives the same microbatch, inference share,
batch cap and task shares as `dartfl.policies.dart` (a test checks it on random observation
sequences). Its learnt state (surprise envelope, miss debt, step risk) is in
`dartfl.sim.fleet_dart_state`.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.policies import DartConfig
from dartfl.policies.dart import IDLE_FLOOR, PACE_LEAD
from dartfl.sim.fleet_dart_state import FleetMissDebt, FleetStepRisk, FleetSurprise
from dartfl.sim.fleet_policy_api import FleetAllocation, FleetObservation, FleetPolicy
from dartfl.sim.fleet_types import FloatArray, IntArray

__all__ = ["FleetDart"]


class FleetDart(FleetPolicy):
    """`DartPolicy` over a device axis; numbered steps as in dartfl/policies/dart.py."""

    def __init__(self, config: DartConfig | None = None) -> None:
        self.config = config or DartConfig()
        self.name = "dart" if self.config.v == DartConfig().v else f"dart:{self.config.v:g}"
        # This port is DART's time-shared decision: on a multi-core device the exact DART
        # would split the cores, so the fleet runs it only with split=off (or on one core).
        self.splits_cores = self.config.core_split == "on"
        self.reset()

    @property
    def miss_queue(self) -> FloatArray | None:
        """H per device (None before the first update)."""
        return self.debt.queue if self.debt.queue.size else None

    def reset(self) -> None:
        cfg = self.config
        self.peak_rates: FloatArray | None = None  # (devices, tasks)
        self.recent_max: FloatArray | None = None  # (devices, tasks): busiest recent period
        self._ring = np.zeros((0, 0, 0))  # (rate_window, devices, tasks) per-period counts
        self._ring_pos = 0
        self._decay = 0.0
        self._decay_period_s = -1.0
        self.envelope = FleetSurprise(cfg.surprise_quantile)
        self.debt = FleetMissDebt(cfg.miss_budget, cfg.debt)
        self.risk = FleetStepRisk()
        self._last_m = np.zeros(0, dtype=np.int64)  # the step `decide` chose last, per device
        self._last_step_s = np.zeros(0)

    def _ensure(self, devices: int) -> None:
        self.envelope.ensure(devices)
        self.debt.ensure(devices)
        self.risk.ensure(devices)
        if self._last_m.shape != (devices,):
            self._last_m = np.zeros(devices, dtype=np.int64)
            self._last_step_s = np.zeros(devices)

    def update(self, obs: FleetObservation) -> None:
        cfg = self.config
        tau = obs.period_s
        d, k_tasks = obs.num_devices, obs.num_tasks
        self._ensure(d)
        # H counts the misses training caused where the executor can tell them apart.
        counted = (
            obs.slo_misses_since_last
            if obs.training_misses_since_last is None
            else obs.training_misses_since_last
        )
        misses = counted[:, 0].copy()
        arrived = obs.arrivals_since_last[:, 0].copy()
        for k in range(1, k_tasks):  # sequential sums, as the scalar policy adds them
            misses += counted[:, k]
            arrived += obs.arrivals_since_last[:, k]
        trained = np.zeros(d) if obs.round_trained_samples is None else obs.round_trained_samples
        self.risk.update(misses, tau, obs.round_start_s, trained, self._last_m, self._last_step_s)
        if tau != self._decay_period_s:
            memory = cfg.burst_memory_s
            self._decay = math.exp(-tau / memory) if memory > 0 else 0.0
            self._decay_period_s = tau
            self.envelope.set_memory(cfg.surprise_memory_s / tau)
        rates = obs.arrival_rate_per_s
        if self.peak_rates is None or self.peak_rates.shape != rates.shape:
            self.peak_rates = np.zeros(rates.shape)
            self._ring = np.zeros((cfg.rate_window, *rates.shape))
            self._ring_pos = 0
        self.peak_rates = np.maximum(rates, self.peak_rates * self._decay)
        self._ring[self._ring_pos] = obs.arrivals_since_last
        self.recent_max = self._ring.max(axis=0)
        self._ring_pos = (self._ring_pos + 1) % cfg.rate_window
        # The work that arrived and the work rate step 1 forecasts, summed task by task.
        per, n = obs.per_request_s, obs.arrivals_since_last
        plan = np.maximum(np.maximum(rates, cfg.burst_weight * self.peak_rates), self.recent_max / tau)
        work, forecast = np.zeros(d), np.zeros(d)
        for k in range(k_tasks):
            work += per[:, k] * n[:, k]
            forecast += per[:, k] * plan[:, k]
        self.envelope.update(work, forecast, tau)
        self.debt.update(misses, arrived, work, tau)

    def decide(self, obs: FleetObservation) -> FleetAllocation:
        cfg = self.config
        tau = obs.period_s
        d, k_tasks = obs.num_devices, obs.num_tasks
        a_t, c_t, m_max = obs.microbatch_fixed_s, obs.per_sample_s, obs.max_microbatch
        backlog, fixed, per = obs.backlog, obs.batch_fixed_s, obs.per_request_s
        self._ensure(d)
        # Before the first update (fresh state), plan with this period's observation.
        peaks = obs.arrival_rate_per_s if self.peak_rates is None else self.peak_rates
        recent = obs.arrivals_since_last if self.recent_max is None else self.recent_max

        # 1. Arrival rates to plan for: smoothed, busiest recent period, this period, part of a
        #    remembered burst.
        last = np.maximum(recent, obs.arrivals_since_last) / tau
        lam = np.maximum(np.maximum(obs.arrival_rate_per_s, cfg.burst_weight * peaks), last)
        zero = np.zeros(d)
        lam_total, lam_cost, active_fixed = zero.copy(), zero.copy(), zero.copy()
        slo_min = np.full(d, math.inf)
        for k in range(k_tasks):
            rate = lam[:, k]
            active = (rate > 0.0) | (backlog[:, k] > 0)
            lam_total += np.where(active, rate, 0.0)
            lam_cost += np.where(active, per[:, k] * rate, 0.0)
            active_fixed += np.where(active, fixed[:, k], 0.0)
            slo_min = np.where(active, np.minimum(slo_min, obs.slo_s[:, k]), slo_min)
        slo_min = np.where(slo_min == math.inf, obs.slo_s.min(axis=1), slo_min)
        budget_s = slo_min * (1.0 - cfg.slack_margin)

        # 2. The SLO-safe step, against the forecast and the learnt surprise.
        caution = self.debt.caution()
        s_safe = self.envelope.safe_step_s(budget_s - active_fixed, 1.0 + lam_cost, tau, caution)

        # 3. Step size m: the plan, priced at 1 / (1 - H / H_max), cut to what the budget
        #    affords; none voluntary at H >= H_max; owed work at the base price.
        deficit = _training_deficit(obs)
        gain = deficit + cfg.v
        price = np.where(deficit > 0.0, 1.0, self.debt.price())
        stopped = price == math.inf
        plan = (s_safe, budget_s, lam_cost, active_fixed, lam_total, caution)
        best = _best_microbatch(obs, self.envelope, *plan, gain, np.where(stopped, 1.0, price))
        idle = np.maximum(IDLE_FLOOR, 1.0 - self.debt.long_run.load)
        cut = self.risk.affordable(best, a_t, c_t, self.debt.allowance_per_s(), idle)
        best = np.where((best > 0) & (deficit <= 0.0), cut, best)
        m = np.where((lam_cost >= 1.0) & (deficit > 0.0), 1, np.where(stopped, 0, best)).astype(np.int64)
        self._last_m, self._last_step_s = m, a_t + c_t * m

        # 4. Inference share: strict priority unless the round is behind; owed work priced per
        #    sample at the cheapest step.
        share = np.ones(d)
        owed = deficit > 0.0
        if owed.any():
            share = np.where(owed, _deficit_share(obs, lam, deficit * (a_t / m_max + c_t)), share)

        # 5. Inference batch cap, unless last period's arrivals needed half the device.
        last_load = obs.arrivals_since_last[:, 0] * per[:, 0]
        for k in range(1, k_tasks):
            last_load += obs.arrivals_since_last[:, k] * per[:, k]
        batch = np.where(last_load < 0.5 * tau, _batch_cap(obs, lam), obs.max_batch)

        # 6. Training shares follow demand, or are uniform (`dart:shares=uniform`).
        if cfg.task_shares == "demand":
            shares = _demand_shares(obs.arrival_rate_per_s, backlog, tau, cfg.share_floor)
        else:
            shares = np.full((d, k_tasks), 1.0 / k_tasks)
        return FleetAllocation(share, m, batch, shares)


def _training_deficit(obs: FleetObservation) -> FloatArray:
    target = obs.round_target_samples
    span = obs.round_deadline_s - obs.round_start_s
    if target <= 0 or not math.isfinite(span) or span <= 0 or obs.round_trained_samples is None:
        return np.zeros(obs.num_devices)
    progress = min(1.0, max(0.0, (obs.now_s - obs.round_start_s) / (PACE_LEAD * span)))
    return np.maximum(0.0, target * progress - obs.round_trained_samples)


def _best_microbatch(
    obs: FleetObservation,
    envelope: FleetSurprise,
    s_safe: FloatArray,
    budget_s: FloatArray,
    lam_cost: FloatArray,
    active_fixed: FloatArray,
    lam_total: FloatArray,
    caution: FloatArray,
    gain: FloatArray,
    price: FloatArray,
) -> IntArray:
    """The scalar `_best_microbatch` per device: the same candidates, the same strict `>` ties."""
    a_t, c_t, m_max, tau = obs.microbatch_fixed_s, obs.per_sample_s, obs.max_microbatch, obs.period_s
    # min(m_max, int(x)) == int(min(x, m_max)) for x >= 0; clipping first avoids int overflow.
    fits = np.minimum((s_safe - a_t) / c_t, m_max.astype(np.float64))
    m_safe = np.where(s_safe <= a_t, 0, np.trunc(np.maximum(fits, 0.0)).astype(np.int64))
    best_j = np.where(m_safe > 0, gain * m_safe / (a_t + c_t * m_safe), 0.0)
    best_m = np.where(m_safe > 0, m_safe, 0)
    span = m_max - m_safe
    grid = np.stack((m_safe + np.maximum(1, span // 4), m_safe + np.maximum(1, span // 2), m_max))
    steps = a_t + c_t * grid
    surprises = envelope.surprise_s(steps, tau, caution)  # the three candidates at once
    for m, step, surprise in zip(grid, steps, surprises, strict=True):
        stretched = step * (1.0 + lam_cost) + surprise
        late = np.minimum(1.0, (stretched + active_fixed - budget_s) / stretched)
        j = gain * m / step - price * lam_total * np.maximum(0.0, late)
        better = j > best_j
        best_m = np.where(better, m, best_m)
        best_j = np.where(better, j, best_j)
    result: IntArray = np.where(m_safe >= m_max, m_max, best_m).astype(np.int64)
    return result


def _deficit_share(obs: FleetObservation, lam: FloatArray, owed_work_s: FloatArray) -> FloatArray:
    backlog, fixed, per, tau = obs.backlog, obs.batch_fixed_s, obs.per_request_s, obs.period_s
    needed = np.zeros(obs.num_devices)
    all_outrank = np.ones(obs.num_devices, dtype=bool)
    single_outranks = np.ones(obs.num_devices, dtype=bool)  # one request of every idle task
    any_present = np.zeros(obs.num_devices, dtype=bool)
    b_max = obs.max_batch.astype(np.float64)
    for k in range(obs.num_tasks):
        rate, q = lam[:, k], backlog[:, k]
        present = (rate > 0.0) | (q != 0)
        expected = np.maximum(1.0, q + rate * tau)
        cost = per[:, k] + fixed[:, k] / np.minimum(b_max, expected)
        outranks = np.maximum(1.0, q) * cost >= owed_work_s
        needed += np.where(present & outranks, expected * cost / tau, 0.0)
        all_outrank &= ~present | outranks
        single_outranks &= present | (per[:, k] + fixed[:, k] >= owed_work_s)
        any_present |= present
    share = np.where(all_outrank, 1.0, np.minimum(1.0, needed))
    result: FloatArray = np.where(any_present, share, np.where(single_outranks, 1.0, 0.0))
    return result


def _batch_cap(obs: FleetObservation, lam: FloatArray) -> IntArray:
    b_max = obs.max_batch
    queued = obs.backlog > 0
    slack_all = np.where(queued, obs.slo_s - obs.oldest_age_s, math.inf)
    urgent = np.argmin(slack_all, axis=1)  # the first minimum, as the scalar's strict `<`
    rows = np.arange(obs.num_devices)
    any_queued = queued.any(axis=1)
    slack = slack_all[rows, urgent]
    a, c = obs.batch_fixed_s[rows, urgent], obs.per_request_s[rows, urgent]
    q, rate = obs.backlog[rows, urgent], lam[rows, urgent]
    fits = np.where(slack > a, np.trunc(np.minimum((slack - a) / c, 2.0**62)), 0.0)
    whole = (fits < 1) | (fits >= q) | ~any_queued
    with np.errstate(divide="ignore", invalid="ignore"):
        keep_up = np.where(rate * c >= 1.0, b_max, np.ceil(np.minimum(rate * a / (1.0 - rate * c), 2.0**62)))
    capped = np.maximum(1, np.minimum(b_max, np.maximum(fits, keep_up)))
    result: IntArray = np.where(whole, b_max, capped).astype(np.int64)
    return result


def _demand_shares(rates: FloatArray, backlog: FloatArray, period_s: float, floor: float) -> FloatArray:
    """`dartfl.policies.shares.demand_shares` per device (same sums in the same order)."""
    k_tasks = rates.shape[1]
    eps = min(floor, 1.0 / k_tasks)
    demand = rates + backlog / period_s
    total = demand[:, 0].copy()
    for k in range(1, k_tasks):
        total += demand[:, k]
    positive = total > 0.0
    scale = (1.0 - k_tasks * eps) / np.where(positive, total, 1.0)
    shares = eps + demand * scale[:, None]
    s = shares[:, 0].copy()
    for k in range(1, k_tasks):
        s += shares[:, k]
    result: FloatArray = np.where(positive[:, None], shares / s[:, None], 1.0 / k_tasks)
    return result
