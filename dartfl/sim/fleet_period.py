"""One control period of every device of a fleet: a fluid model of the device executor.

The exact executor (`dartfl.sim.device`) runs non-preemptible work items one at a time:
inference batches (EDF across task heads) and training steps, with strict inference priority
when the inference share x is 1 and a credit rule when x < 1. Within a period of length tau
this model lays the same work out in closed form, per device (numpy over the device axis),
with arrivals spread evenly over the period (rate lam_k = A_k / tau):

0. carried step: a step that started earlier runs until it ends (or through the whole period);
   requests queue up behind it;
1. drain: the queue is served at the device share x_eff (1, or x while training has work) at a
   per-request cost c_k + a_k / min(Q_k, b), while arrivals keep adding work at rate Lambda_1;
   it empties after V / (x_eff - Lambda_1), or never (the period ends with a backlog);
2. cycles, once the queue is empty: with training, a step of s(m), then a drain of what arrived
   during it (a cascade of three batch rounds plus a geometric tail), repeating; the step in
   flight at the period's end carries over into the next period. Without training the device
   serves arrivals as they come, in batches of what accumulated during the previous batch.

Latency: a request arriving at time t waits the remaining step time R(t) (if a step runs), plus
the inference work queued ahead of it V(t) / x_eff, plus its own batch. Both are linear in t
within each phase, so each phase contributes a uniform latency distribution; SLO attainment is
the weighted sum of those uniforms' CDFs at the SLO. docs/fleet.md lists the approximations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.sim.fleet_policies import FleetAllocation

__all__ = ["FleetState", "run_period"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_BIG_S = 1e9  # a latency that never meets an SLO, kept finite so means stay finite


@dataclass(eq=False)
class FleetState:
    """Every device's executor state and running totals; per-task arrays are (tasks, devices)."""

    tau: float
    fixed: FloatArray
    per: FloatArray
    slo: FloatArray
    capacity: FloatArray
    a_t: FloatArray
    c_t: FloatArray
    now_s: float
    queue: FloatArray
    head_s: FloatArray  # arrival time of each queue's oldest request
    carry_s: FloatArray  # time left of the step in flight at the period start
    carry_m: FloatArray  # its samples
    carry_task: FloatArray  # its samples per task
    trained: FloatArray
    trained_per_task: FloatArray
    training_busy: FloatArray
    inference_busy: FloatArray
    rejected_total: FloatArray
    accepted: FloatArray
    slo_met: FloatArray
    latency_sum: FloatArray
    max_backlog: FloatArray
    misses: FloatArray  # last period: expected SLO misses (rejections included), per task
    training_misses: FloatArray  # last period: the misses of requests that arrived during a step

    @classmethod
    def start(cls, dev: dict[str, FloatArray | IntArray], tau: float) -> FleetState:
        k, d = dev["fixed"].shape

        def zeros() -> FloatArray:
            return np.zeros(d)

        def task_zeros() -> FloatArray:
            return np.zeros((k, d))

        return cls(
            tau=tau,
            fixed=dev["fixed"].astype(np.float64),
            per=dev["per"].astype(np.float64),
            slo=dev["slo"].astype(np.float64),
            capacity=dev["capacity"].astype(np.float64),
            a_t=dev["a_t"].astype(np.float64),
            c_t=dev["c_t"].astype(np.float64),
            now_s=0.0,
            queue=task_zeros(),
            head_s=task_zeros(),
            carry_s=zeros(),
            carry_m=zeros(),
            carry_task=task_zeros(),
            trained=zeros(),
            trained_per_task=task_zeros(),
            training_busy=zeros(),
            inference_busy=zeros(),
            rejected_total=zeros(),
            accepted=zeros(),
            slo_met=zeros(),
            latency_sum=zeros(),
            max_backlog=zeros(),
            misses=task_zeros(),
            training_misses=task_zeros(),
        )

    def finish(self) -> None:
        """The horizon is over: the step in flight still completes (as in the event simulator)."""
        self.trained += self.carry_m
        self.trained_per_task += self.carry_task
        self.training_busy += self.carry_s
        self.carry_s = np.zeros_like(self.carry_s)
        self.carry_m = np.zeros_like(self.carry_m)
        self.carry_task = np.zeros_like(self.carry_task)


def _div(num: FloatArray, den: FloatArray) -> FloatArray:
    """num / den with x / 0 = inf for x > 0 and 0 / 0 = 0 (work that needs no time)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(den > 0, num / den, np.where(num > 0, math.inf, 0.0))
    return out


def _batches(n: FloatArray, batch: FloatArray) -> FloatArray:
    """Expected batches to serve Poisson(n) requests of one task at once, at most `batch` each."""
    out: FloatArray = np.maximum(-np.expm1(-n), n / batch)
    return out


def _uniform_cdf(y: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """P(U <= y) for U uniform on [lo, hi] (a point mass when lo == hi)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = (y - lo) / (hi - lo)
    out: FloatArray = np.where(y >= hi, 1.0, np.where(y < lo, 0.0, inside))
    return out


def _turn_fraction(queued: FloatArray, fixed: FloatArray, per: FloatArray) -> FloatArray:
    """kappa_k: the expected part of a round of batches that ends with task k's batch.

    A round serves one batch per waiting task, oldest head first (EDF with equal SLOs). Task j's
    head is older than task k's with probability n_j / (n_j + n_k) for Poisson arrivals, so
    task k's batch ends after its own work plus that share of every other task's.
    """
    work = fixed * (queued > 0) + per * queued
    turn = work.copy()
    k_tasks = queued.shape[0]
    for k in range(k_tasks):
        for j in range(k_tasks):
            if j != k:
                turn[k] += work[j] * _div(queued[j], queued[j] + queued[k])
    return _div(turn, work.sum(axis=0))


def run_period(st: FleetState, arrived: FloatArray, alloc: FleetAllocation) -> None:
    """Advance every device by one period; `arrived` is (tasks, devices)."""
    tau = st.tau
    fixed, per = st.fixed, st.per
    lam = arrived / tau
    x = alloc.inference_share
    m = alloc.microbatch.astype(np.float64)
    bcap = alloc.max_batch.astype(np.float64)
    shares = alloc.task_shares.T
    train = m > 0
    s = st.a_t + st.c_t * m
    x_eff = np.where(train & (x < 1.0), x, 1.0)
    q0 = st.queue

    # 0. The carried step runs first; requests queue behind it.
    carry = st.carry_s
    e0 = np.minimum(carry, tau)
    done0 = (carry > 0) & (carry <= tau)
    trained = np.where(done0, st.carry_m, 0.0)
    trained_task = np.where(done0, st.carry_task, 0.0)
    carry_rem = carry - e0
    busy = carry_rem > 0
    rest = tau - e0
    q = q0 + lam * e0

    # 1. Drain the queue at share x_eff while arrivals keep coming.
    v0 = (q0 * (per + fixed / np.clip(q0, 1.0, bcap))).sum(axis=0)
    cq = per + fixed / np.clip(q, 1.0, bcap)
    v = (q * cq).sum(axis=0)
    lam1 = (lam * cq).sum(axis=0)
    net = x_eff - lam1
    can_drain = (net > 0) & ~busy
    td = _div(v, np.where(can_drain, net, 0.0))
    drained = can_drain & (td <= rest)
    t1 = np.where(drained, td, rest)
    v1 = np.where(drained, 0.0, np.maximum(v - net * t1, 0.0))
    q1 = (q + lam * t1) * _div(v1, v + lam1 * t1)
    train1 = np.where(train, (1.0 - x_eff) * t1, 0.0)  # x < 1: steps interleave with the drain
    trained += np.where(train, train1 / s * m, 0.0)
    infer1 = x_eff * t1

    # 2. Empty queue: step/drain cycles with training, batches as requests come without.
    r2 = np.where(drained, rest - t1, 0.0)
    lamc = (per * lam).sum(axis=0)
    n0 = lam * s
    d0 = (fixed * _batches(n0, bcap) + per * n0).sum(axis=0)
    n1 = lam * d0  # round 1 serves what arrived during round 0, and so on
    d1 = (fixed * _batches(n1, bcap) + per * n1).sum(axis=0)
    n2 = lam * d1
    d2 = (fixed * _batches(n2, bcap) + per * n2).sum(axis=0)
    d_tail = d2 + np.where(lamc < 1.0, d2 * lamc / np.maximum(1.0 - lamc, 1e-12), math.inf)  # round 2 on
    d_tail = np.minimum(d_tail, _BIG_S)
    dd = d0 + d1 + d_tail
    with np.errstate(divide="ignore", invalid="ignore"):
        credit = np.where(x < 1.0, x * s / (1.0 - x), math.inf)
    ic = np.minimum(dd, credit)  # inference time per cycle
    cycle = s + ic
    cycles = np.where(train & drained, np.floor(_div(r2, cycle)), 0.0)
    rr = r2 - cycles * np.where(np.isfinite(cycle), cycle, 0.0)
    in_step = rr < s
    cyc = train & drained
    completed = np.where(cyc, cycles + np.where(in_step, 0.0, 1.0), 0.0)
    train2 = np.where(cyc, cycles * s + np.minimum(rr, s), 0.0)
    infer2 = np.where(cyc, cycles * ic + np.maximum(rr - s, 0.0), 0.0)
    # The part of a cycle's arrivals the credit could not serve (x < 1 and a long drain).
    with np.errstate(invalid="ignore"):
        left = np.where(dd > ic, np.where(np.isfinite(dd), _div(dd - ic, dd), 1.0), 0.0)
    q2 = np.where(in_step, lam * rr, n0 * np.maximum(0.0, 1.0 - _div(rr - s, dd))) + n0 * (cycles * left)
    trained += completed * m
    # Without training: a batch holds what arrived during the previous one (EDF round robin).
    idle = drained & ~train
    active = lam > 0
    round_s = _div((fixed * active).sum(axis=0), 1.0 - lamc)
    b_idle = np.clip(lam * np.where(np.isfinite(round_s), round_s, 0.0), 1.0, bcap)
    rho = (lam * (per + fixed / b_idle)).sum(axis=0)
    batch_rate = (lam / b_idle).sum(axis=0)
    rho_w = np.minimum(rho, 0.95)  # rho >= 1 here means the fluid drain ended early: cap the wait
    wait_idle = _div(rho_w * _div(rho, batch_rate), 2.0 * (1.0 - rho_w))
    infer2 = infer2 + np.where(idle, np.minimum(rho, 1.0) * r2, 0.0)

    # Where every device ends the period.
    new_carry = np.where(cyc & in_step, s - rr, 0.0)
    q_end = np.where(busy[None, :], q, np.where(drained[None, :], np.where(cyc[None, :], q2, 0.0), q1))
    q_end = np.where(q_end < 1e-9, 0.0, q_end)
    over = np.maximum(q_end - st.capacity, 0.0)
    q_end -= over
    accepted = arrived - over

    # Latency: one uniform per phase (or drain round), weighted by the share of the period's
    # arrivals it sees. A request that arrives while a step (or a round of batches) runs waits
    # for it to end, then for its task's turn in the next round: kappa_k of that round.
    slo = st.slo
    one = fixed + per
    xs = np.maximum(x_eff, 1e-300)
    kappa = _turn_fraction(q + lam * tau, fixed, per)
    r0 = _div(v + lam1 * carry_rem, xs)  # the first round after the carried step
    lat: list[tuple[FloatArray, FloatArray, FloatArray, bool]] = [
        (e0 / tau, carry_rem + kappa * r0, carry + kappa * r0, True),
    ]
    a1, b1 = _div(v1, xs) + one, _div(v, xs) + fixed + per * np.maximum(1.0, np.minimum(bcap, q) / 2.0)
    lat.append((t1 / tau, np.minimum(a1, b1), np.maximum(a1, b1), False))
    # Cycles: the step, then the rounds of its drain (the credit may cut the drain short).
    w_rounds = _div(np.where(cyc, infer2, 0.0), dd) / tau
    lat.append((train2 / tau, kappa * d0, s + kappa * d0, True))
    lat.append((w_rounds * d0, kappa * d1, d0 + kappa * d1, False))
    lat.append((w_rounds * d1, kappa * d2, d1 + kappa * d2, False))
    lat.append((w_rounds * d_tail, kappa * d2 * lamc, d_tail + kappa * d2 * lamc, False))
    lat.append((np.where(idle, r2, 0.0) / tau, one, one + 2.0 * wait_idle, False))
    p_slo = np.zeros_like(lam)
    p_train_miss = np.zeros_like(lam)
    mean_latency = np.zeros_like(lam)
    for weight, lo, hi, during_step in lat:
        hit = _uniform_cdf(slo, lo, hi)
        p_slo += weight * hit
        if during_step:
            p_train_miss += weight * (1.0 - hit)
        mean_latency += weight * np.minimum((lo + hi) / 2.0, _BIG_S)
    in_slo = accepted * p_slo
    st.misses = arrived - in_slo
    st.training_misses = accepted * p_train_miss

    # FIFO per task: the oldest request left is the first one not served.
    served = q0 + accepted - q_end
    t0 = st.now_s
    from_old = served < q0
    with np.errstate(invalid="ignore"):
        old_head = st.head_s + _div(served, q0) * (t0 - st.head_s)
        head = np.where(from_old, old_head, t0 + _div(served - q0, accepted) * tau)
    st.head_s = np.where(q_end > 0, np.minimum(head, t0 + tau), t0 + tau)

    # Peak backlog inside the period: behind the carried step, at a drain's start, after a step.
    step_peak = np.where(cyc & ((cycles > 0) | ~in_step), n0.sum(axis=0), 0.0) + (n0 * (cycles * left)).sum(axis=0)
    peak = np.maximum(np.maximum(q.sum(axis=0), q_end.sum(axis=0) + over.sum(axis=0)), step_peak)
    st.max_backlog = np.maximum(st.max_backlog, np.minimum(peak, st.capacity.sum(axis=0)))

    # Totals and the state the next period starts from.
    task_samples = (trained - np.where(done0, st.carry_m, 0.0)) * shares + trained_task
    st.trained += trained
    st.trained_per_task += task_samples
    st.training_busy += e0 + train1 + train2
    st.inference_busy += infer1 + infer2
    st.rejected_total += over.sum(axis=0)
    acc_total = accepted.sum(axis=0)
    st.accepted += acc_total
    st.slo_met += in_slo.sum(axis=0)
    st.latency_sum += (accepted * mean_latency).sum(axis=0)
    st.queue = q_end
    st.carry_s = np.where(busy, carry_rem, new_carry)
    st.carry_m = np.where(busy, st.carry_m, np.where(cyc & in_step, m, 0.0))
    st.carry_task = np.where(busy, st.carry_task, np.where(cyc & in_step, m * shares, 0.0))
    st.now_s = t0 + tau
