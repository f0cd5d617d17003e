"""One control period of every device of a fleet: a fluid model of the device executor.

The exact executor (`dartfl.sim.device`) runs non-preemptible work items one at a time:
inference batches (EDF across task heads) and training steps, with strict inference priority
when the inference share x is 1 and a credit rule when x < 1. Within a period of length tau
this model lays the same work out in closed form, per device (numpy over the device axis),
with arrivals spread evenly over the period (rate lam_k = A_k / tau):

0. carried step: a step that started earlier runs until it ends (or through the whole period);
   requests queue up behind it;
1. drain: the queue is served at a per-request cost c_k + a_k / min(Q_k, b), at full speed
   while inference has credit from the steps that ran (x < 1), then at share x, while arrivals
   keep adding work; it reaches its floor (below), or the period ends with a backlog;
2. cycles, once the queue is at its floor: with training, a step of s(m), then the rounds of
   batches that serve what arrived during it (three rounds plus a geometric tail), until the
   queue is empty or the credit runs out; the step in flight at the period's end carries over.
   Without training the device serves arrivals as they come.
The floor is empty unless serving every request alone would overload the device; then greedy
batching settles at a round length R* (`busy_round`), and the queue empties only at the end
of a round in which nothing arrived.

Latency: a request waits for the rest of the non-preemptible stretch it arrives in (a step, or
a round of batches), then for its task's turn in the next round (`turn_fraction`). Within a
phase that wait is linear in the arrival time, so each phase contributes a uniform latency
distribution, blurred by the Poisson noise of the work ahead; SLO attainment is the
arrival-weighted sum of their CDFs at the SLO. When the backlog grows the drain's rounds grow
with it, from at least one batch even if the queue was empty (`drain_rounds`,
`growing_rounds_latency`), and every wait is capped by the run and by full queues.
docs/fleet.md lists the approximations.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.sim.fleet_policy_api import FleetAllocation
from dartfl.sim.fleet_queueing import (
    BlurredUniform,
    busy_round,
    div_or_zero,
    drain_rounds,
    growing_rounds_latency,
    round_work,
    time_to,
    turn_fraction,
)
from dartfl.sim.fleet_state import FleetState
from dartfl.sim.fleet_types import FloatArray

__all__ = ["run_period"]

_BIG_S = 1e9  # a latency that never meets an SLO, kept finite so means stay finite


def run_period(st: FleetState, arrived: FloatArray, alloc: FleetAllocation) -> None:
    """Advance every device by one period; `arrived` is (tasks, devices)."""
    with np.errstate(all="ignore"):  # inf and nan only appear in branches np.where discards
        _run_period(st, arrived, alloc)


def _run_period(st: FleetState, arrived: FloatArray, alloc: FleetAllocation) -> None:
    tau = st.tau
    dev = st.dev
    fixed, per = dev.fixed, dev.per
    lam = arrived / tau
    x = alloc.inference_share
    m = alloc.microbatch.astype(np.float64)
    bcap = alloc.max_batch.astype(np.float64)
    shares = alloc.task_shares.T
    train = m > 0
    s = dev.a_t + dev.c_t * m
    x_eff = np.where(train & (x < 1.0), x, 1.0)
    q0 = st.queue
    busy_r = busy_round(lam, fixed, per, bcap)  # R*
    settled = busy_r > 0  # greedy batching keeps the device busy: the queue rarely empties
    floor_q = lam * busy_r  # the queue a busy device keeps

    # 0. The carried step runs first; requests queue behind it.
    carry = st.carry_s
    e0 = np.minimum(carry, tau)
    done0 = (carry > 0) & (carry <= tau)
    trained = np.where(done0, st.carry_m, 0.0)
    carry_rem = carry - e0
    busy = carry_rem > 0
    rest = tau - e0
    q = q0 + lam * e0

    # 1. Drain the queue down to its floor while arrivals keep coming; a batch holds what
    #    waits, between the floor's batch and the cap. First at full speed while inference has
    #    credit from the steps that ran (x < 1), then at share x_eff.
    full = (lam * (per + fixed / bcap)).sum(axis=0)  # the arrivals' work at full batches
    # A batch holds what waits (at least the floor's batch); past capacity, full batches.
    cq = np.where(full >= x_eff, per + fixed / bcap, per + fixed / np.clip(np.maximum(q, floor_q), 1.0, bcap))
    v = (q * cq).sum(axis=0)
    v_floor = (floor_q * cq).sum(axis=0)
    lam1 = (lam * cq).sum(axis=0)
    over_floor = np.maximum(v - v_floor, 0.0)
    shared = train & (x < 1.0)
    credit0 = np.where(shared, st.credit + x_eff / (1.0 - x_eff) * e0, 0.0)
    net_a = 1.0 - lam1
    need_a = time_to(over_floor, net_a)
    ta = np.minimum(np.minimum(need_a, credit0), rest)
    drained_a = ~busy & (full < 1.0) & (need_a <= np.minimum(credit0, rest))
    w_a = np.maximum(over_floor - net_a * ta, 0.0)
    net = x_eff - lam1
    need_b = time_to(w_a, net)
    drained_b = ~busy & (full < x_eff) & ~drained_a & (need_b <= rest - ta)
    tb = np.where(drained_a, 0.0, np.where(drained_b, need_b, rest - ta))
    drained = drained_a | drained_b
    t1 = ta + tb
    v1 = v_floor + np.where(drained, 0.0, np.maximum(w_a - net * tb, 0.0))
    q1 = (q + lam * t1) * div_or_zero(v1, v + lam1 * t1)
    train1 = np.where(train, (1.0 - x_eff) * tb, 0.0)  # x < 1: steps interleave with the drain
    trained += np.where(train, train1 / s * m, 0.0)
    infer1 = ta + x_eff * tb
    share1 = np.where(t1 > 0, div_or_zero(infer1, t1), x_eff)  # inference's average share while draining

    # 2a. The queue is at its floor. Training cycles: a step of s, then the rounds that drain
    #     what arrived during it, until the queue is empty or the credit runs out.
    r2 = np.where(drained, rest - t1, 0.0)
    n0 = lam * s
    d0 = round_work(n0, fixed, per, bcap)
    d1 = round_work(lam * d0, fixed, per, bcap)
    d2 = round_work(lam * d1, fixed, per, bcap)
    # The drain after a step: rounds 0 and 1, then a geometric tail, each counted above the
    # floor R* (0 unless serving every request alone would overload the device).
    above0, above1, above2 = (np.maximum(d - busy_r, 0.0) for d in (d0, d1, d2))
    ratio = np.minimum(div_or_zero(above2, above1), 0.99)
    d_tail = above2 / (1.0 - ratio)  # round 2 on, shrinking geometrically
    needed = np.minimum(above0 + above1 + d_tail, _BIG_S)
    # A busy device's queue still empties at the end of a round at the floor in which nothing
    # arrived: Poisson, probability exp(-Lambda R*), so strict priority finds a gap after
    # R* / p seconds at the floor on average (docs/fleet.md, "A busy device's gaps").
    p_empty = np.exp(-lam.sum(axis=0) * busy_r)
    floor_wait = np.minimum(div_or_zero(busy_r, p_empty), _BIG_S)
    # Credit left from earlier steps is spent serving at the floor before the next step,
    # until the queue empties (which resets it) or the credit runs out.
    credit_left = np.maximum(credit0 - ta, 0.0)
    pre = np.where(drained & settled & shared, np.minimum(np.minimum(credit_left, floor_wait), r2), 0.0)
    r2c = r2 - pre
    credit = np.where(x < 1.0, x * s / (1.0 - x), math.inf)
    cyc = drained & train
    ic = np.minimum(needed + floor_wait, credit)  # inference time per cycle
    ic = np.minimum(ic, _BIG_S)
    cycle = s + ic
    cycles = np.where(cyc, np.floor(r2c / cycle), 0.0)
    rr = r2c - cycles * cycle
    in_step = rr < s
    cyc_started = cyc & (r2c > 0)
    in_step = in_step & cyc_started
    completed = np.where(cyc_started, cycles + np.where(in_step, 0.0, 1.0), 0.0)
    train2 = np.where(cyc_started, cycles * s + np.minimum(rr, s), 0.0)
    infer2 = np.where(cyc_started, cycles * ic + np.maximum(rr - s, 0.0), 0.0)
    left = np.where(needed > ic, div_or_zero(needed - ic, needed), 0.0)  # what the credit could not serve
    done_frac = np.minimum(div_or_zero(np.maximum(rr - s, 0.0), needed), 1.0)
    q_cyc = np.where(in_step, lam * rr + floor_q, np.maximum(n0 * (1.0 - done_frac), floor_q))
    q_cyc = q_cyc + n0 * (cycles * left)
    trained += completed * m

    # 2b. No training, or a busy device under strict priority: inference only.
    serve_only = drained & ~cyc
    idle = serve_only & ~settled
    first = div_or_zero((lam * (fixed + per)).sum(axis=0), lam.sum(axis=0))  # a busy period's first batch
    b1 = round_work(lam * first, fixed, per, bcap)
    b2 = round_work(lam * b1, fixed, per, bcap)
    period_busy = first + b1 + b2 / (1.0 - np.minimum(div_or_zero(b2, b1), 0.99))
    arrivals = lam.sum(axis=0)
    util = div_or_zero(arrivals * period_busy, 1.0 + arrivals * period_busy)
    wait_idle = util * first / (2.0 * np.maximum(1.0 - util, 0.05))
    infer2 = infer2 + np.where(serve_only, np.where(settled, 1.0, util) * r2, 0.0) + pre

    # Where every device ends the period.
    new_carry = np.where(cyc & in_step, s - rr, 0.0)
    q_end = np.where(
        busy, q, np.where(drained, np.where(cyc_started, q_cyc, np.where(settled, floor_q, 0.0)), q1)
    )
    q_end = np.where(q_end < 1e-9, 0.0, q_end)
    q_end = np.minimum(q_end, q0 + arrived)  # a queue holds at most what it had and what came
    over = np.maximum(q_end - dev.capacity, 0.0)
    q_end -= over
    accepted = arrived - over

    # Latency: one uniform per phase (or drain round), weighted by the share of the period's
    # arrivals it sees. A request that arrives while a step (or a round of batches) runs waits
    # for it to end, then for its task's turn in the next round: kappa_k of that round.
    slo = dev.slo
    one = fixed + per
    kappa, kappa_sd = turn_fraction(q + lam * tau, fixed, per)
    # No wait outlasts the run: training stops at the horizon and the queue drains at full
    # speed, behind at most a step. So with an inference share of 0 a wait is long, not inf.
    cap = (st.horizon_s - st.now_s) + np.maximum(carry, s) + v + lam1 * tau
    # Nor does a round outgrow full queues (the excess is rejected): a request waits at most
    # the rest of one such round and its turn in the next.
    full_round = time_to((dev.capacity * cq).sum(axis=0), share1)
    round_cap = np.minimum(cap, full_round)
    wait_cap = np.minimum(cap, (1.0 + kappa) * full_round + carry_rem)
    r0 = np.minimum(time_to(v + lam1 * carry_rem, share1), round_cap)  # the round after the carried step
    # Draining: the queue is a round of batches; what arrives meanwhile forms the next round,
    # rho times as long, and so on (rho < 1: the drain ends; rho >= 1: the backlog grows).
    # A drain that does not finish (an overload) starts with at least one batch even from an
    # empty queue: the first request is served at once and the rest pile up behind it.
    work0 = np.where(drained, v, np.maximum(v, first))
    u0, u1, u2, rho1, l_end = drain_rounds(work0, lam1, share1, t1, round_cap)
    lo_grow, hi_grow = growing_rounds_latency(u2, l_end, kappa * rho1)
    part_a = np.minimum(t1, u0)
    part_b = np.minimum(t1 - part_a, u1)
    # A cycle's inference time: drain rounds 0 and 1, then the later rounds (or the busy floor).
    w_cyc = div_or_zero(np.where(cyc_started, infer2 - pre, 0.0), ic) / tau
    part0 = np.minimum(d0, ic)
    part1 = np.minimum(d1, ic - part0)
    # The tail's rounds shrink by `ratio`: an arrival in one of length L waits the rest of it
    # and its turn in the next, at most d2 (1 + kappa ratio); over the tail, weighted by the
    # rounds' lengths, d2 (1/2 + kappa ratio) / (1 + ratio) on average. The uniform with that
    # top and mean (its bottom at 0 at the least).
    tail_hi = (1.0 + kappa * ratio) * d2
    tail_lo = np.maximum(2.0 * d2 * (0.5 + kappa * ratio) / (1.0 + ratio) - tail_hi, 0.0)
    lo_rest = np.where(settled, kappa * busy_r, tail_lo)
    hi_rest = np.where(settled, (1.0 + kappa) * busy_r, tail_hi)
    # Poisson noise: the variance of the work that arrives in a stretch of length t, sum c^2 lam t,
    # of which a request waits for about kappa of the next round's.
    noise = kappa * (per * per * lam).sum(axis=0)
    in_flight = np.where(in_step, rr, 0.0)

    def blur(stretch: FloatArray, next_round: FloatArray) -> FloatArray:
        out: FloatArray = np.sqrt(noise * stretch + (kappa_sd * next_round) ** 2)
        return out

    no_noise = np.zeros_like(lam)
    zero = np.zeros_like(e0)
    # Each phase's training delay D: the training seconds that ran while its requests' busy
    # period waited, as the exact executor counts them (dartfl/attribution.py): a late request
    # is training's miss if it would have made its SLO D sooner. The drain waits behind the
    # carried step and the steps interleaved with it; a cycle's rounds behind its step.
    d_drain = carry + train1
    grow_mid = (u2 + l_end) / 2.0
    lat: list[tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]] = [
        (e0 / tau, carry_rem + kappa * r0, carry + kappa * r0, blur(carry, r0), carry),
        (part_a / tau, kappa * u1, u0 + kappa * u1, blur(u0, u1), d_drain),
        (part_b / tau, kappa * u2, u1 + kappa * u2, blur(u1, u2), d_drain),
        ((t1 - part_a - part_b) / tau, lo_grow, hi_grow, blur(grow_mid, grow_mid), d_drain),
        # Full steps after an empty queue: they wait the rest of the step, then round 0.
        ((train2 - in_flight) / tau, kappa * d0, s + kappa * d0, blur(s, d0), s),
        # The step just begun: its arrivals came early in it, so they wait most of it.
        (in_flight / tau, s - in_flight + kappa * d0, s + kappa * d0, blur(s, d0), s),
        (w_cyc * part0, kappa * d1, d0 + kappa * d1, blur(d0, d1), s),
        (w_cyc * part1, kappa * d2, d1 + kappa * d2, blur(d1, d2), s),
        (w_cyc * (ic - part0 - part1), lo_rest, hi_rest, blur(d2, d2), s),
        (np.where(idle, r2, 0.0) / tau, one, one + 2.0 * wait_idle, no_noise, zero),
        (
            (np.where(serve_only & settled, r2, 0.0) + pre) / tau,
            kappa * busy_r,
            (1.0 + kappa) * busy_r,
            blur(busy_r, busy_r),
            zero,
        ),
    ]
    p_slo = np.zeros_like(lam)
    p_train_miss = np.zeros_like(lam)
    mean_latency = np.zeros_like(lam)
    for weight, lo, hi, spread, delay in lat:
        if not weight.any():
            continue  # no device has arrivals in this phase this period
        lo, hi = np.minimum(lo, wait_cap), np.minimum(hi, wait_cap)
        wait = BlurredUniform(lo, hi, spread)
        hit = wait.cdf(slo)
        p_slo += weight * hit
        if delay.any() and (hit < 1.0).any():
            p_train_miss += weight * (wait.cdf(slo + delay) - hit)
        mean_latency += weight * (lo + hi) / 2.0  # finite: wait_cap bounds both
    in_slo = accepted * p_slo
    st.misses = arrived - in_slo
    st.training_misses = accepted * p_train_miss

    # FIFO per task: the oldest request left is the first one not served.
    served = q0 + accepted - q_end
    t0 = st.now_s
    old_head = st.head_s + div_or_zero(served, q0) * (t0 - st.head_s)
    head = np.where(served < q0, old_head, t0 + div_or_zero(served - q0, accepted) * tau)
    st.head_s = np.where(q_end > 0, np.minimum(head, t0 + tau), t0 + tau)

    # Peak backlog inside the period: behind the carried step, at a drain's start, after a step.
    step_peak = np.where(cyc_started & ((cycles > 0) | ~in_step), (n0 + floor_q).sum(axis=0), 0.0)
    step_peak = step_peak + (n0 * (cycles * left)).sum(axis=0)
    peak = np.maximum(np.maximum(q.sum(axis=0), q_end.sum(axis=0) + over.sum(axis=0)), step_peak)
    st.max_backlog = np.maximum(st.max_backlog, np.minimum(peak, dev.capacity.sum(axis=0)))

    # Totals and the state the next period starts from.
    st.trained += trained
    fresh = trained - np.where(done0, st.carry_m, 0.0)  # samples of steps started this period
    st.trained_per_task += fresh * shares + np.where(done0, st.carry_task, 0.0)
    st.training_busy += e0 + train1 + train2
    st.inference_busy += infer1 + infer2
    st.rejected_total += over.sum(axis=0)
    st.accepted += accepted.sum(axis=0)
    st.slo_met += in_slo.sum(axis=0)
    st.latency_sum += (accepted * mean_latency).sum(axis=0)
    st.queue = q_end
    # Credit left for the next period: what the step in flight has earned for its run so far,
    # the rest of the current drain's, or what the drain did not use.
    step_credit = np.where(in_step & (x < 1.0), x / (1.0 - x) * rr, 0.0)
    drain_credit = np.where(cyc_started & ~in_step & (x < 1.0), np.maximum(ic - (rr - s), 0.0), step_credit)
    drain_credit = np.where(drained & ~cyc_started, credit_left - pre, drain_credit)
    st.credit = np.where(busy | ~drained, np.maximum(credit0 - ta, 0.0), drain_credit)
    st.carry_s = np.where(busy, carry_rem, new_carry)
    st.carry_m = np.where(busy, st.carry_m, np.where(cyc & in_step, m, 0.0))
    st.carry_task = np.where(busy, st.carry_task, np.where(cyc & in_step, m * shares, 0.0))
    st.now_s = t0 + tau
