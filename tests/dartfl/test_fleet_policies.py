"""The fleet simulator's vectorised policies decide exactly as the scalar ones: DART over random
observations and long sequences with learnt state, the baselines, and the policies without a
fleet port."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.policies import DartConfig, DartPolicy, make_policy
from dartfl.sim.fleet_policies import FleetAllocation, FleetDart, FleetObservation, make_fleet_policy
from dartfl.types import Allocation, Observation


def _random_observation(
    rng: np.random.Generator, k: int, now: float, period: float, deadline: float, target: int
) -> Observation:
    def counts(high: int, p_zero: float) -> tuple[int, ...]:
        return tuple(int(x) if rng.random() > p_zero else 0 for x in rng.integers(0, high, k))

    return Observation(
        now_s=now,
        period_s=period,
        backlog=counts(60, 0.5),
        oldest_age_s=tuple(float(a) for a in rng.uniform(0.0, 1.5, k)),
        arrivals_since_last=counts(int(rng.choice([4, 80])), 0.3),
        slo_misses_since_last=counts(5, 0.7),
        training_misses_since_last=counts(4, 0.7) if rng.random() < 0.5 else (),
        arrival_rate_per_s=tuple(float(r) if rng.random() > 0.2 else 0.0 for r in rng.exponential(80.0, k)),
        slo_s=tuple(float(d) for d in rng.uniform(0.03, 1.0, k)),
        batch_fixed_s=tuple(float(a) for a in rng.uniform(0.0, 0.01, k)),
        per_request_s=tuple(float(c) for c in rng.uniform(1e-4, 0.01, k)),
        max_batch=int(rng.integers(1, 65)),
        microbatch_fixed_s=float(rng.uniform(0.0, 0.02)),
        per_sample_s=float(rng.uniform(5e-4, 0.03)),
        max_microbatch=int(rng.integers(1, 65)),
        round_start_s=0.0,
        round_deadline_s=deadline,
        round_target_samples=target,
        round_trained_samples=int(rng.integers(0, 400)),
    )


def _one_period(
    fleet: FleetDart, scalar: list[DartPolicy], observations: list[Observation]
) -> tuple[FleetAllocation, list[Allocation]]:
    """Both ports update on one period's observations (device i's scalar policy on the i-th)
    and decide: the fleet's decision and the scalar ones."""
    stacked = FleetObservation.stack(observations)
    fleet.update(stacked)
    decided = fleet.decide(stacked)
    wants = []
    for policy, obs in zip(scalar, observations, strict=True):
        policy.update(obs)
        wants.append(policy.decide(obs))
    return decided, wants


def _assert_decides_as(decided: FleetAllocation, i: int, want: Allocation, where: object) -> None:
    """Device i's row of the fleet's decision is the scalar policy's decision `want`."""
    assert decided.microbatch[i] == want.microbatch, where
    assert decided.inference_share[i] == want.inference_share, where
    assert decided.max_batch[i] == want.max_batch, where


def test_fleet_dart_decides_exactly_as_scalar_dart_over_random_observation_sequences() -> None:
    """1,200 device-periods: 30 fleets of 10 devices, 4 periods each, with update() state
    (miss queue, peak rates, recent counts) carried between periods; random knobs."""
    rng = np.random.default_rng(7)
    compared = 0
    seen = {"share<1": 0, "m=0": 0, "0<m<max": 0, "capped batch": 0}
    for _ in range(30):
        k = int(rng.integers(1, 6))
        config = DartConfig(
            v=float(rng.choice([0.0, 0.05, 1.0, 50.0])),
            miss_budget=float(rng.choice([0.0, 0.002, 0.1])),
            burst_memory_s=float(rng.choice([0.0, 10.0, 30.0])),
            burst_weight=float(rng.choice([0.0, 0.5, 1.0])),
            rate_window=int(rng.integers(1, 6)),
            task_shares=str(rng.choice(["demand", "demand", "uniform"])),
        )
        scalar = [DartPolicy(config) for _ in range(10)]
        fleet = FleetDart(config)
        period = float(rng.choice([0.1, 0.25]))
        target = int(rng.choice([0, 2000]))
        deadline = 60.0 if rng.random() > 0.2 else math.inf
        for step in range(4):
            now = float(rng.uniform(0.5, 50.0)) + step * period
            observations = [_random_observation(rng, k, now, period, deadline, target) for _ in range(10)]
            decided, wants = _one_period(fleet, scalar, observations)
            for i, (obs, want) in enumerate(zip(observations, wants, strict=True)):
                _assert_decides_as(decided, i, want, where=i)
                np.testing.assert_allclose(decided.task_shares[i], want.task_shares, rtol=0, atol=1e-15)
                compared += 1
                seen["share<1"] += want.inference_share < 1.0
                seen["m=0"] += want.microbatch == 0
                seen["0<m<max"] += 0 < want.microbatch < obs.max_microbatch
                seen["capped batch"] += want.max_batch < obs.max_batch
    assert compared >= 500
    assert all(count >= 10 for count in seen.values()), seen  # every branch was exercised


def _device_stream(
    rng: np.random.Generator, k: int, periods: int, period: float, round_periods: int
) -> list[Observation]:
    """One device's observations over `periods` control periods: Poisson arrivals broken by
    clumps, training misses after clumps, and round progress that grows and restarts."""
    base_rate = float(rng.choice([5.0, 40.0, 200.0]))
    costs = {
        "slo_s": tuple(float(d) for d in rng.uniform(0.05, 0.5, k)),
        "batch_fixed_s": tuple(float(a) for a in rng.uniform(0.0, 0.005, k)),
        "per_request_s": tuple(float(c) for c in rng.uniform(1e-4, 0.005, k)),
        "max_batch": int(rng.integers(8, 65)),
        "microbatch_fixed_s": float(rng.uniform(0.001, 0.02)),
        "per_sample_s": float(rng.uniform(5e-4, 0.03)),
        "max_microbatch": int(rng.integers(4, 65)),
    }
    out, trained = [], 0
    for t in range(periods):
        clump = rng.random() < 0.08
        arrivals = rng.poisson(base_rate * period * (12.0 if clump else 1.0) / k, k)
        misses = rng.poisson(3.0, k) if clump or rng.random() < 0.05 else np.zeros(k, dtype=np.int64)
        round_index, in_round = divmod(t, round_periods)
        trained = 0 if in_round == 0 else trained + int(rng.integers(0, 40))
        backlog = rng.poisson(arrivals * rng.uniform(0, 0.5))
        out.append(
            Observation(
                now_s=(t + 1) * period,
                period_s=period,
                backlog=tuple(int(b) for b in backlog),
                oldest_age_s=tuple(
                    float(a) if b else 0.0 for a, b in zip(rng.uniform(0, 0.3, k), backlog, strict=True)
                ),
                arrivals_since_last=tuple(int(a) for a in arrivals),
                slo_misses_since_last=tuple(int(m) for m in misses),
                training_misses_since_last=tuple(int(m) for m in misses),
                arrival_rate_per_s=tuple(float(a) / period for a in arrivals),
                round_start_s=round_index * round_periods * period,
                round_deadline_s=(round_index + 1) * round_periods * period,
                round_target_samples=0,
                round_trained_samples=trained,
                **costs,  # type: ignore[arg-type]
            )
        )
    return out


def test_fleet_dart_keeps_the_scalar_learnt_state_over_long_sequences() -> None:
    """Miss debt, step risk and surprise envelope are learnt over 80 periods per device and
    steer the decisions: the fleet port stays exact (H and envelope included), and the
    debt's stop, a learnt risk and a learnt surprise all occur."""
    rng = np.random.default_rng(11)
    seen = {"stopped": 0, "risk learnt": 0, "surprise learnt": 0, "0<m<max": 0}
    for _ in range(6):
        k = int(rng.integers(1, 4))
        config = DartConfig(miss_budget=float(rng.choice([0.002, 0.005])), debt=float(rng.choice([0.5, 1.0])))
        period = 0.25
        streams = [_device_stream(rng, k, 80, period, 40) for _ in range(8)]
        scalar = [DartPolicy(config) for _ in streams]
        fleet = FleetDart(config)
        for t in range(80):
            observations = [stream[t] for stream in streams]
            decided, wants = _one_period(fleet, scalar, observations)
            for i, (policy, obs, want) in enumerate(zip(scalar, observations, wants, strict=True)):
                _assert_decides_as(decided, i, want, where=(t, i))
                assert fleet.debt.queue[i] == policy.debt.queue
                np.testing.assert_array_equal(fleet.envelope.q[:, i], policy.envelope.q)
                seen["stopped"] += policy.debt.queue >= policy.debt.debt_limit > 0
                seen["risk learnt"] += policy.risk.kappa(0, obs.microbatch_fixed_s + obs.per_sample_s) > 0
                seen["surprise learnt"] += policy.envelope.q[0] > 0
                seen["0<m<max"] += 0 < want.microbatch < obs.max_microbatch
    assert all(count >= 20 for count in seen.values()), seen


@pytest.mark.parametrize("spec", ["inference-only", "inference-first", "inference-first:4", "static:0.3"])
def test_fleet_baselines_decide_exactly_as_scalar_baselines(spec: str) -> None:
    rng = np.random.default_rng(3)
    observations = [_random_observation(rng, 3, 5.0, 0.25, math.inf, 0) for _ in range(50)]
    decided = make_fleet_policy(spec).decide(FleetObservation.stack(observations))
    for i, obs in enumerate(observations):
        _assert_decides_as(decided, i, make_policy(spec).decide(obs), where=i)


def test_policies_without_a_fleet_port_are_refused_with_the_ported_names() -> None:
    with pytest.raises(ConfigError, match="inference-first"):
        make_fleet_policy("threshold")
    with pytest.raises(ConfigError, match="unknown fleet policy"):
        make_fleet_policy("nonsense")
