"""DART's promise (docs/allocator.md, "The promise"): the miss debt, the step risk, the surprise
envelope, and the bound on training-caused misses on a trace built to defeat rate estimates."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dartfl.arrivals import Arrivals
from dartfl.metrics import miss_budget_bound
from dartfl.policies import DartConfig, DartPolicy
from dartfl.policies.burst import SurpriseEnvelope
from dartfl.policies.miss_debt import CAUTION_AT, MissDebt, StepRisk
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.types import Observation, TaskSpec

# -- the miss debt ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 200)), min_size=1, max_size=300))
def test_the_misses_beyond_the_budget_never_exceed_the_final_debt(periods: list[tuple[int, int]]) -> None:
    """The sample-path identity behind the bound: H(T) - H(0) >= sum of (M - delta A), credit
    floor included, on any sequence."""
    debt = MissDebt(0.005, 1.0)
    for misses, arrivals in periods:
        debt.update(misses, arrivals, 0.001 * arrivals, 0.25)
    excess = sum(m for m, _ in periods) - 0.005 * sum(a for _, a in periods)
    assert excess <= debt.queue + 1e-9


def test_unused_budget_is_banked_up_to_its_credit_and_prices_misses_at_the_base() -> None:
    debt = MissDebt(0.01, 1.0)
    for _ in range(4000):  # 1000 s at 40 requests per second, no miss
        debt.update(0, 10, 0.01, 0.25)
    credit = 0.01 * debt.long_run.rate_per_s * 600.0
    assert debt.queue == pytest.approx(-credit)
    assert debt.price() == 1.0 and debt.allowance_per_s() == pytest.approx(0.01 * debt.long_run.rate_per_s)


def test_the_price_of_a_miss_rises_to_infinity_at_the_debt_limit() -> None:
    debt = MissDebt(0.005, 1.0)
    debt.update(0, 400, 0.1, 0.25)  # H_max = sqrt(400) = 20
    debt.queue = 10.0
    assert debt.price() == pytest.approx(2.0) and debt.allowance_per_s() > 0
    debt.queue = 20.0
    assert debt.price() == math.inf and debt.allowance_per_s() == 0.0


def test_caution_is_nil_in_credit_and_whole_from_half_the_debt_limit() -> None:
    debt = MissDebt(0.005, 1.0)
    debt.update(0, 400, 0.1, 0.25)  # H_max = 20
    assert debt.queue < 0.0 and debt.caution() == 0.0
    debt.queue = 5.0
    assert debt.caution() == pytest.approx(5.0 / (CAUTION_AT * 20.0))
    debt.queue = CAUTION_AT * 20.0
    assert debt.caution() == 1.0


def test_a_step_plans_against_the_learnt_surprise_only_as_far_as_the_debt_calls_for() -> None:
    # A device that has learnt large unforecast clumps: with misses within budget so far it
    # plans on the rates alone; holding debt, it plans against the clumps and steps shorter.
    obs = quiet()
    in_credit, in_debt = DartPolicy(), DartPolicy()
    for policy in (in_credit, in_debt):
        policy.update(obs)
        policy.envelope.q = [0.15, 0.2, 0.3, 0.4]  # seconds of surprise work per window
    in_debt.debt.update(0, 400, 0.1, 0.25)
    in_debt.debt.queue = CAUTION_AT * in_debt.debt.debt_limit  # caution 1, price 2
    bold, careful = in_credit.decide(obs).microbatch, in_debt.decide(obs).microbatch
    assert bold > careful
    unplanned = DartPolicy()
    unplanned.update(obs)
    assert bold == unplanned.decide(obs).microbatch  # nothing learnt: the same plan


# -- DART's decisions --------------------------------------------------------------------------


def quiet(**changes: object) -> Observation:
    """A pi4-like device with three tasks, nothing waiting, a few requests a second."""
    base = Observation(
        now_s=100.0,
        period_s=0.25,
        backlog=(0, 0, 0),
        oldest_age_s=(0.0, 0.0, 0.0),
        arrivals_since_last=(1, 0, 0),
        slo_misses_since_last=(0, 0, 0),
        training_misses_since_last=(0, 0, 0),
        arrival_rate_per_s=(2.0, 1.0, 1.0),
        slo_s=(0.25, 0.25, 0.25),
        batch_fixed_s=(0.001, 0.001, 0.001),
        per_request_s=(0.005, 0.005, 0.005),
        max_batch=32,
        microbatch_fixed_s=0.012,
        per_sample_s=0.023,
        max_microbatch=32,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _trained(policy: DartPolicy, periods: int, trained: int, **changes: object) -> int:
    """Run `periods` quiet periods that each trained `trained` more samples; the last decision."""
    m = 0
    for t in range(periods):
        obs = quiet(now_s=100.0 + 0.25 * t, round_trained_samples=trained * (t + 1), **changes)
        policy.update(obs)
        m = policy.decide(obs).microbatch
    return m


def test_the_miss_debt_stops_voluntary_training_and_it_resumes_once_repaid() -> None:
    policy = DartPolicy()
    assert _trained(policy, 40, 20) == 9  # the SLO-safe step of a quiet pi4
    burst = quiet(training_misses_since_last=(30, 0, 0), slo_misses_since_last=(30, 0, 0))
    policy.update(burst)
    assert policy.debt.queue >= policy.debt.debt_limit
    assert policy.decide(burst).microbatch == 0  # all the way to zero, whatever the plan says
    # Quiet traffic repays the debt at delta per arrival; training comes back before it is gone.
    resumed = [_trained(policy, 1, 0, arrivals_since_last=(40, 0, 0)) for _ in range(400)]
    assert resumed[0] == 0 and max(resumed) >= 1
    first = resumed.index(next(m for m in resumed if m > 0))
    assert policy.debt.queue > 0 or first > 0


def test_a_step_class_that_brought_misses_is_cut_below_the_plan() -> None:
    policy = DartPolicy(DartConfig(debt=100.0))  # a far debt limit: the cut, not the stop
    assert _trained(policy, 40, 18) == 9  # class 3: 8 to 15 samples
    for t in range(20):  # those steps keep bringing misses
        obs = quiet(
            now_s=200.0 + 0.25 * t,
            round_trained_samples=18 * (41 + t),
            training_misses_since_last=(2, 0, 0),
            slo_misses_since_last=(2, 0, 0),
        )
        policy.update(obs)
        m = policy.decide(obs).microbatch
    assert policy.debt.queue < policy.debt.debt_limit
    assert 1 <= m < 8  # below the class that cost misses


def test_quiet_smooth_traffic_keeps_the_large_steps() -> None:
    rng = np.random.default_rng(5)
    learnt, plain = DartPolicy(), DartPolicy(DartConfig(surprise_memory_s=0.0))
    for t in range(2400):  # 10 minutes of Poisson arrivals at 20% of a pi4, no misses
        counts = tuple(int(n) for n in rng.poisson(10.0, 3))
        obs = quiet(
            now_s=0.25 * (t + 1),
            arrivals_since_last=counts,
            arrival_rate_per_s=tuple(4.0 * n for n in counts),
            round_trained_samples=8 * t,
        )
        for policy in (learnt, plain):
            policy.update(obs)
        a, b = learnt.decide(obs).microbatch, plain.decide(obs).microbatch
        if t > 480:  # once the envelope has learnt Poisson's noise, within a fifth of the plan
            assert a >= 0.8 * b


# -- the surprise envelope ---------------------------------------------------------------------


def test_the_envelope_learns_unforecast_clumps_and_forgets_them() -> None:
    envelope = SurpriseEnvelope(0.95, 120.0)
    for t in range(600):  # a clump of 0.3 s of work every 10 s, none forecast
        envelope.update(0.3 if t % 40 == 0 else 0.001, 0.004, 0.25)
    assert envelope.surprise_s(0.25, 0.25) > 0.05
    assert envelope.safe_step_s(0.2, 1.0, 0.25) < 0.2 - envelope.surprise_s(0.25, 0.25) + 0.25
    for _ in range(2000):  # quiet for 500 s: the level is forgotten
        envelope.update(0.001, 0.004, 0.25)
    assert envelope.surprise_s(0.25, 0.25) < 1e-6
    assert envelope.safe_step_s(0.2, 1.0, 0.25) == pytest.approx(0.2)


@settings(max_examples=200, deadline=None)
@given(
    levels=st.lists(st.floats(0.0, 2.0), min_size=4, max_size=4),
    room=st.floats(0.001, 3.0),
    stretch=st.floats(1.0, 5.0),
)
def test_the_safe_step_solves_the_piecewise_linear_envelope(
    levels: list[float], room: float, stretch: float
) -> None:
    envelope = SurpriseEnvelope(0.95, 120.0)
    envelope.q = list(levels)
    s = envelope.safe_step_s(room, stretch, 0.25)
    assert s * stretch + envelope.surprise_s(s, 0.25) == pytest.approx(room, rel=1e-9, abs=1e-12)
    # A weight scales the levels: the same solution as levels scaled by hand.
    halved = SurpriseEnvelope(0.95, 120.0)
    halved.q = [x / 2 for x in levels]
    assert envelope.safe_step_s(room, stretch, 0.25, 0.5) == pytest.approx(
        halved.safe_step_s(room, stretch, 0.25)
    )


# -- the step risk -----------------------------------------------------------------------------


def test_misses_are_blamed_on_the_classes_that_ran_and_warn_off_larger_ones() -> None:
    risk = StepRisk()
    risk.update(0, 0.25, 0.0, 40, 4, 0.1)  # class 2 (m = 4) ran
    risk.update(5, 0.25, 0.0, 40, 4, 0.1)
    assert risk.kappa(2, 0.035) > 0.0 and risk.kappa(1, 0.035) == 0.0
    assert risk.kappa(5, 0.035) == risk.kappa(2, 0.035)  # nobody tried larger steps


# -- the bound on a trace built to defeat rate estimates --------------------------------------


def _defeating_trace(seed: int) -> Arrivals:
    """Quiet traffic (20 requests a second, 10% of a pi4) broken every 10-30 s by a clump of 60
    requests in 50 ms: the recent rate says "nearly idle", so DART starts long steps, and the
    clumps land on them."""
    rng = np.random.default_rng(seed)
    quiet_times = rng.uniform(0.0, 900.0, 18000)
    starts = np.cumsum(rng.uniform(10.0, 30.0, 60))
    starts = starts[starts < 899.0]
    clumps = np.concatenate([t + rng.uniform(0.0, 0.05, 60) for t in starts])
    times = np.sort(np.concatenate([quiet_times, clumps]))
    return Arrivals(times, rng.integers(0, 3, times.size).astype(np.int64), ("a", "b", "c"), 900.0)


def _run(policy: DartPolicy) -> tuple[float, float]:
    record = simulate(
        _defeating_trace(2),
        get_profile("pi4"),
        [TaskSpec(name, 0.25) for name in ("a", "b", "c")],
        policy,
        SimConfig(),
    )
    bound = miss_budget_bound(record, policy.config.miss_budget, policy.debt.debt_limit)
    return bound.measured, bound.budget + bound.slack


def test_training_caused_misses_stay_within_the_budget_plus_the_slack() -> None:
    measured, limit = _run(DartPolicy())
    assert 0.0 < measured <= limit
    # 20,000 arrivals: the slack (sqrt(A) + E) / A is 0.9 points; it falls as 1 / sqrt(A).
    assert limit < 0.015


def test_without_the_closed_loop_the_same_trace_breaks_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MissDebt, "price", lambda self: 1.0)
    monkeypatch.setattr(StepRisk, "affordable", lambda self, m, *args: m)
    measured, limit = _run(DartPolicy())
    assert measured > limit


def test_a_cut_never_goes_below_the_efficient_step() -> None:
    # A Jetson-like step: the fixed cost is 14 samples' worth, so samples per second of
    # exposure, m / s(m)^2, peak at m = 14; cutting to 1 would train 7% of what it exposes.
    risk = StepRisk()
    for t in range(8):  # one-sample steps brought misses: every class is risky
        risk.update(5, 0.25, 0.0, 10 * (t + 1), 1, 0.0086)
    assert risk.affordable(32, 0.008, 0.00058, allowance_per_s=0.001, idle=0.5) == 14


def test_after_misses_larger_classes_reopen_one_at_a_time_as_smaller_steps_run() -> None:
    risk = StepRisk()
    risk.update(0, 0.25, 0.0, 0, 16, 0.38)
    risk.update(30, 0.25, 0.0, 160, 16, 0.38)  # class 4 brought misses
    # The plan's class does not fit; untried smaller ones are free, but the ladder goes back
    # to the efficient step (1 on a pi4) instead of jumping to the largest of them.
    assert risk.affordable(31, 0.012, 0.023, allowance_per_s=1e-3, idle=0.5) == 1
    trained = 160
    for _ in range(3):  # 30 one-sample steps (20 after the forgetting): class 1 opens
        trained += 10
        risk.update(0, 0.25, 0.0, trained, 1, 0.035)
    assert risk.affordable(31, 0.012, 0.023, allowance_per_s=1e-3, idle=0.5) == 3
    assert risk.affordable(31, 0.012, 0.023, allowance_per_s=1e9, idle=0.5) == 31  # it fits
