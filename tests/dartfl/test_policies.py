"""Policies: the registry, valid allocations for any observation, and DART's required behaviour."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dartfl.errors import ConfigError
from dartfl.policies import POLICY_NAMES, DartConfig, DartPolicy, make_policy
from dartfl.types import Observation

SPECS = [
    "dart",
    "dart:10",
    "inference-only",
    "inference-first",
    "inference-first:4",
    "static:0.3",
    "threshold",
    "threshold:1,8",
    "proportional",
    "clairvoyant",
]


def observation(k: int = 3, **overrides: object) -> Observation:
    base: dict[str, object] = {
        "now_s": 10.0,
        "period_s": 0.25,
        "backlog": (0,) * k,
        "oldest_age_s": (0.0,) * k,
        "arrivals_since_last": (0,) * k,
        "slo_misses_since_last": (0,) * k,
        "arrival_rate_per_s": (10.0,) * k,
        "slo_s": (0.25,) * k,
        "batch_fixed_s": (0.005,) * k,
        "per_request_s": (0.0025,) * k,
        "max_batch": 32,
        "microbatch_fixed_s": 0.012,
        "per_sample_s": 0.007,
        "max_microbatch": 32,
    }
    base.update(overrides)
    return Observation(**base)  # type: ignore[arg-type]


# -- registry ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
def test_every_spec_builds_and_decides(spec: str) -> None:
    policy = make_policy(spec)
    obs = observation()
    policy.update(obs)
    alloc = policy.decide(obs)
    assert 0.0 <= alloc.inference_share <= 1.0


def test_unknown_policy_error_lists_the_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        make_policy("fastest")
    for name in POLICY_NAMES:
        assert name in str(err.value)


@pytest.mark.parametrize(
    "spec", ["static", "static:1.5", "static:x", "inference-first:0", "threshold:9,2", "dart:-1"]
)
def test_bad_policy_arguments_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        make_policy(spec)


def test_static_without_its_share_says_what_it_needs() -> None:
    # It said "unknown policy 'static'" and listed every policy, static:X among them.
    with pytest.raises(ConfigError, match=r"'static' needs its inference share in \[0, 1\], e.g. static:0.7"):
        make_policy("static")


def test_natural_loss_weighting_and_override() -> None:
    assert make_policy("inference-first").decide(
        observation(arrival_rate_per_s=(50.0, 1.0, 1.0))
    ).loss_weights == (
        1.0,
        1.0,
        1.0,
    )
    skewed = observation(arrival_rate_per_s=(50.0, 1.0, 1.0))
    assert make_policy("dart").decide(skewed).loss_weights[0] > 1.0
    assert make_policy("dart", "uniform").decide(skewed).loss_weights == (1.0, 1.0, 1.0)
    assert make_policy("dart", "uniform").name == "dart+uniform"


# -- any observation gives a valid allocation (property-based) ---------------------------------

costs = st.floats(min_value=1e-5, max_value=0.5)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    k = draw(st.integers(1, 8))
    per_task = lambda s: tuple(draw(st.lists(s, min_size=k, max_size=k)))  # noqa: E731
    start = draw(st.floats(0, 100))
    return Observation(
        now_s=start + draw(st.floats(0, 100)),
        period_s=draw(st.floats(0.01, 2.0)),
        backlog=per_task(st.integers(0, 5000)),
        oldest_age_s=per_task(st.floats(0, 30)),
        arrivals_since_last=per_task(st.integers(0, 5000)),
        slo_misses_since_last=per_task(st.integers(0, 100)),
        arrival_rate_per_s=per_task(st.floats(0, 1e4)),
        slo_s=per_task(st.floats(1e-3, 10)),
        batch_fixed_s=per_task(st.floats(0, 0.5)),
        per_request_s=per_task(costs),
        max_batch=draw(st.integers(1, 256)),
        microbatch_fixed_s=draw(st.floats(0, 1.0)),
        per_sample_s=draw(costs),
        max_microbatch=draw(st.integers(1, 256)),
        round_start_s=start,
        round_deadline_s=draw(st.one_of(st.just(math.inf), st.floats(start + 0.1, start + 500))),
        round_target_samples=draw(st.integers(0, 100000)),
        round_trained_samples=draw(st.integers(0, 100000)),
    )


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=150, deadline=None)
@given(obs=observations())
def test_allocations_are_always_valid(spec: str, obs: Observation) -> None:
    policy = make_policy(spec)
    policy.update(obs)
    alloc = policy.decide(obs)  # Allocation validates itself on construction
    k = obs.num_tasks
    assert 0.0 <= alloc.inference_share <= 1.0
    assert len(alloc.task_shares) == k and abs(sum(alloc.task_shares) - 1.0) < 1e-9
    assert all(y >= 0 for y in alloc.task_shares)
    assert all(w > 0 for w in alloc.loss_weights) and abs(sum(alloc.loss_weights) / k - 1.0) < 1e-9
    assert 0 <= alloc.microbatch <= max(obs.max_microbatch, 0)
    assert 1 <= alloc.max_batch <= obs.max_batch


@settings(max_examples=200, deadline=None)
@given(obs=observations())
def test_dart_is_deterministic(obs: Observation) -> None:
    a, b = DartPolicy(), DartPolicy()
    assert a.decide(obs) == b.decide(obs)


# -- DART's required behaviour ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    obs=observations(), task=st.integers(0, 7), extra_backlog=st.integers(1, 500), faster=st.floats(1.0, 50.0)
)
def test_dart_share_is_monotone_in_backlog_and_arrival_rate(
    obs: Observation, task: int, extra_backlog: int, faster: float
) -> None:
    k = task % obs.num_tasks
    backlog = list(obs.backlog)
    backlog[k] += extra_backlog
    rates = list(obs.arrival_rate_per_s)
    rates[k] = rates[k] * faster + 1.0
    more_backlog = dataclasses.replace(obs, backlog=tuple(backlog))
    more_rate = dataclasses.replace(obs, arrival_rate_per_s=tuple(rates))
    base = DartPolicy().decide(obs).inference_share
    assert DartPolicy().decide(more_backlog).inference_share >= base - 1e-12
    assert DartPolicy().decide(more_rate).inference_share >= base - 1e-12


def test_dart_uses_large_steps_when_idle_and_small_ones_when_requests_arrive_fast() -> None:
    policy = DartPolicy()
    quiet = policy.decide(observation(arrival_rate_per_s=(0.0, 0.0, 0.0), slo_s=(0.12,) * 3))
    busy = policy.decide(observation(arrival_rate_per_s=(60.0, 60.0, 60.0), slo_s=(0.12,) * 3))
    assert quiet.microbatch == 32
    assert 1 <= busy.microbatch < quiet.microbatch
    # The chosen step fits in the SLO together with the batch that follows it.
    s = 0.012 + 0.007 * busy.microbatch
    assert s + 3 * 0.005 + 0.0025 * 180 * s <= 0.12


def test_dart_step_shrinks_as_the_slo_tightens() -> None:
    steps = [DartPolicy().decide(observation(slo_s=(slo,) * 3)).microbatch for slo in (0.5, 0.25, 0.12, 0.06)]
    assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]


def test_dart_caps_the_batch_to_save_an_urgent_request() -> None:
    # 200 requests wait; the oldest has 40 ms left: a full batch (85 ms) would miss it.
    obs = observation(backlog=(200, 0, 0), oldest_age_s=(0.21, 0.0, 0.0), arrival_rate_per_s=(5.0, 0.0, 0.0))
    alloc = DartPolicy().decide(obs)
    assert alloc.max_batch < 32
    assert 0.005 + 0.0025 * alloc.max_batch <= 0.04
    # With slack to spare (or nothing to save) it batches fully for throughput.
    assert DartPolicy().decide(observation(backlog=(10, 0, 0), oldest_age_s=(0.01, 0, 0))).max_batch == 32
    assert DartPolicy().decide(observation(backlog=(200, 0, 0), oldest_age_s=(0.3, 0, 0))).max_batch == 32


def test_dart_training_shares_follow_demand_with_a_floor() -> None:
    alloc = DartPolicy().decide(observation(arrival_rate_per_s=(100.0, 10.0, 0.0)))
    y = alloc.task_shares
    assert y[0] > y[1] > y[2] >= DartConfig().share_floor - 1e-12
    assert alloc.loss_weights[0] > alloc.loss_weights[1] > alloc.loss_weights[2] > 0


def test_dart_uniform_task_shares_train_every_task_alike_and_schedule_as_before() -> None:
    # `dart:shares=uniform` (label-skewed fleets): only the training mix changes.
    obs = observation(arrival_rate_per_s=(100.0, 10.0, 0.0))
    demand, uniform = DartPolicy().decide(obs), make_policy("dart:shares=uniform").decide(obs)
    assert uniform.task_shares == pytest.approx((1 / 3,) * 3)
    assert uniform.loss_weights == pytest.approx((1.0,) * 3)
    assert (uniform.inference_share, uniform.microbatch, uniform.max_batch) == (
        demand.inference_share,
        demand.microbatch,
        demand.max_batch,
    )
    with pytest.raises(
        ConfigError,
        match=r"policy 'dart:shares=loss': unknown dart task shares 'loss'; valid: demand, uniform",
    ):
        make_policy("dart:shares=loss")


def test_dart_reacts_to_a_burst_in_the_same_period() -> None:
    # The rate estimate still says 1 req/s, but 40 requests arrived in the last period.
    before = DartPolicy().decide(observation(arrival_rate_per_s=(1.0, 1.0, 1.0), slo_s=(0.12,) * 3))
    burst = DartPolicy().decide(
        observation(arrival_rate_per_s=(1.0, 1.0, 1.0), arrivals_since_last=(40, 0, 0), slo_s=(0.12,) * 3)
    )
    assert burst.microbatch < before.microbatch


def test_dart_training_deficit_takes_share_from_a_backlog() -> None:
    waiting = {"backlog": (3, 0, 0), "oldest_age_s": (0.05, 0, 0)}
    on_pace = DartPolicy().decide(observation(**waiting))
    behind = DartPolicy().decide(
        observation(
            **waiting,
            round_start_s=0.0,
            round_deadline_s=20.0,
            round_target_samples=5000,
            round_trained_samples=0,
        )
    )
    assert on_pace.inference_share == 1.0
    assert behind.inference_share < 1.0 and behind.microbatch >= 1


def test_dart_miss_queue_makes_it_more_conservative() -> None:
    obs = observation(arrival_rate_per_s=(3.0, 3.0, 3.0), slo_s=(0.15,) * 3)
    policy = DartPolicy(DartConfig(v=50.0))
    bold = policy.decide(obs)
    policy.update(
        dataclasses.replace(obs, slo_misses_since_last=(500, 0, 0), arrivals_since_last=(500, 0, 0))
    )
    assert policy.miss_queue > 0
    careful = policy.decide(obs)
    assert careful.microbatch < bold.microbatch


def test_dart_stops_training_when_one_sample_already_breaks_the_slo() -> None:
    # A single-sample step (0.3 s) exceeds the whole 0.25 s SLO: without owed work, do not train.
    obs = observation(microbatch_fixed_s=0.3, arrival_rate_per_s=(5.0, 5.0, 5.0))
    assert DartPolicy().decide(obs).microbatch == 0
    owed = dataclasses.replace(obs, round_start_s=0.0, round_deadline_s=12.0, round_target_samples=100_000)
    assert DartPolicy().decide(owed).microbatch >= 1


def test_demand_loss_weights_are_the_square_root_of_the_shares() -> None:
    from dartfl.policies.shares import loss_weights

    w = loss_weights("demand", (0.64, 0.32, 0.04))
    roots = (0.8, 0.32**0.5, 0.2)
    assert w == pytest.approx(tuple(3 * r / sum(roots) for r in roots))
    assert loss_weights("uniform", (0.64, 0.32, 0.04)) == (1.0, 1.0, 1.0)


def test_owed_training_is_not_blocked_by_a_spent_miss_budget() -> None:
    # H counts misses beyond the budget; once the round is behind, the deadline must still win.
    obs = observation(
        microbatch_fixed_s=0.3, round_start_s=0.0, round_deadline_s=12.0, round_target_samples=100_000
    )
    policy = DartPolicy()
    policy.miss_queue = 1e9
    assert policy.decide(obs).microbatch >= 1
    policy.miss_queue = 1e9
    assert policy.decide(dataclasses.replace(obs, round_target_samples=0)).microbatch == 0
