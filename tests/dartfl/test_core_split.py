"""DART's core split (dartfl/policies/core_split.py): how many cores serve, every period."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.executor import StaticCosts
from dartfl.metrics import summarize
from dartfl.policies import DartPolicy, make_policy
from dartfl.policies.core_split import BURST_S, CoreSplit, CoreSplitConfig, _burst_rate
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.types import Allocation, Observation, TaskSpec
from dartfl.unit_split import SplitRule, choose_split, choose_split_small

NAMES = ("a", "b", "c")


def observation(profile_name: str, load: float, backlog: int = 0, current: int | None = None) -> Observation:
    """Three equal tasks arriving at `load` of the whole device's capacity."""
    profile = get_profile(profile_name)
    costs = StaticCosts(profile, NAMES)  # what the executor tells a policy
    rate = load * profile.capacity_per_s(NAMES, (1.0, 1.0, 1.0)) / 3
    return Observation(
        now_s=30.0,
        period_s=0.25,
        backlog=(backlog,) * 3,
        oldest_age_s=(0.0,) * 3,
        arrival_rate_per_s=(rate,) * 3,
        arrivals_since_last=(round(rate * 0.25),) * 3,
        slo_misses_since_last=(0,) * 3,
        slo_s=(0.25,) * 3,
        batch_fixed_s=costs.batch_fixed_s,
        per_request_s=costs.per_request_s,
        max_batch=profile.max_batch,
        microbatch_fixed_s=costs.microbatch_fixed_s,
        per_sample_s=costs.per_sample_s,
        max_microbatch=profile.training.max_microbatch,
        inference_cores=current or profile.cores.count,
        split=costs.split,
    )


def dart(hysteresis: float = 0.05, **knobs: object) -> DartPolicy:
    """DART past the split's warm-up, as if it had seen a burst's length of arrivals."""
    policy = DartPolicy(dataclasses.replace(DartPolicy().config, **knobs))  # type: ignore[arg-type]
    policy.cores = CoreSplit(CoreSplitConfig(hysteresis=hysteresis))
    policy.cores.seen_s = BURST_S
    return policy


def cores_of(policy: DartPolicy, obs: Observation) -> int:
    policy.update(obs)
    alloc = policy.decide(obs)
    return alloc.inference_cores or obs.cores


def poisson_runs(
    profile_name: str, load: float, slo_s: float, specs: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """60 s of Poisson arrivals at `load` of the whole device, simulated under each policy."""
    profile = get_profile(profile_name)
    rng = np.random.default_rng(1)
    rate = load * profile.capacity_per_s(NAMES, (1.0, 1.0, 1.0))
    n = int(rng.poisson(rate * 60.0))
    arrivals = Arrivals(np.sort(rng.uniform(0, 60.0, n)), rng.integers(0, 3, n).astype(np.int64), NAMES, 60.0)
    tasks = [TaskSpec(t, slo_s) for t in NAMES]
    return {s: summarize(simulate(arrivals, profile, tasks, make_policy(s), SimConfig())) for s in specs}


@pytest.mark.parametrize("name", ["pi4", "pi5", "jetson-orin-nano"])
def test_more_arrivals_or_backlog_never_give_inference_fewer_cores(name: str) -> None:
    # Near zero load a GPU device trains as fast time-shared as split (its serving lane cannot
    # train beside the training lane's GPU): a near tie, which the split's interference tips
    # to time sharing at load 0 and the band settles by the current split at 0.05 (6 cores
    # from 6, 2 from 1). Its sweep starts at 0.1, where a split pays for its misses avoided.
    loads = np.linspace(0, 1.2, 25)[2 if get_profile(name).cores.has_gpu else 0 :]
    for current in (1, get_profile(name).cores.count):
        by_load = [cores_of(dart(0.0), observation(name, load, current=current)) for load in loads]
        by_backlog = [cores_of(dart(0.0), observation(name, 0.3, q, current)) for q in range(0, 200, 10)]
        assert by_load == sorted(by_load) and by_backlog == sorted(by_backlog)


def test_a_device_time_shares_until_it_has_seen_a_bursts_length_of_arrivals() -> None:
    """A split planned on no history lost a Jetson 49 of 224 requests in its first period."""
    policy = DartPolicy()
    obs = observation("pi4", 0.0)
    periods = [cores_of(policy, obs) for _ in range(int(BURST_S / obs.period_s) + 2)]
    seen = [(i + 1) * obs.period_s for i in range(len(periods))]
    assert all(k == 4 for k, s in zip(periods, seen, strict=True) if s < BURST_S)
    assert periods[-1] < 4  # an idle device splits once it has looked long enough
    policy.reset()
    assert cores_of(policy, obs) == 4


def test_an_idle_device_splits_and_an_overloaded_one_serves_on_every_core() -> None:
    assert cores_of(dart(), observation("pi4", 0.0)) < 4
    assert cores_of(dart(), observation("pi4", 1.1)) == 4
    # split=off is today's time-shared DART on the whole device.
    assert make_policy("dart:split=off").decide(observation("pi4", 0.0)).inference_cores is None


def test_a_split_trains_on_the_training_lane_in_steps_a_burst_can_wait_for() -> None:
    policy = dart()
    obs = dataclasses.replace(observation("pi4", 0.3), slo_s=(0.15,) * 3)
    policy.update(obs)
    alloc = policy.decide(obs)
    # A burst the whole device could carry overloads two serving cores: the training lane's
    # steps end soon enough for them to get cores back within the SLO (at 250 ms, full
    # 32-sample steps already do).
    assert alloc.inference_cores == 2 and alloc.split_microbatch is not None
    assert 1 <= alloc.split_microbatch < 32
    # A remembered burst past what two cores could ever carry takes the cores back.
    policy.peak_rates = [3 * r for r in obs.arrival_rate_per_s]
    assert (policy.decide(obs).inference_cores or 4) > 2
    # Where no step can be that short (a tight SLO), steps are full: a cap would only waste.
    tight = dataclasses.replace(obs, slo_s=(0.03,) * 3)
    policy.update(tight)
    assert policy.decide(tight).split_microbatch in (None, 32)


@pytest.mark.parametrize(("name", "slo_s"), [("pi4", 0.15), ("pi5", 0.1)])
def test_the_training_lanes_step_is_the_longest_the_reclaimed_device_can_work_off_in_time(
    name: str, slo_s: float
) -> None:
    # With no burst remembered, the burst planned for is the largest the whole device carries
    # (rho' = R, the device's speed over the two-core lane's): the lane falls R - 1 behind per
    # second of a step, and the whole device works that off R times faster, so the step is
    # the longest with (1 - 1/R)(step + period + switch) <= B. Pricing the lag at the lane's
    # own speed, (R - 1)(...) <= B, gave 5 and 11 samples here instead of 14 and 31.
    obs = dataclasses.replace(observation(name, 0.25), slo_s=(slo_s,) * 3)
    policy = dart()
    policy.update(obs)
    alloc = policy.decide(obs)
    assert alloc.inference_cores == 2 and alloc.split_microbatch is not None
    split, budget = obs.split, slo_s * (1 - policy.config.slack_margin)  # DART's B
    assert split is not None
    scale = (1 + split.inference_interference) / split.inference_speedup[1]
    reclaimed = sum(split.per_request_s) * scale / sum(obs.per_request_s)
    lane = (1 + split.training_interference) / split.training_speedup[1]

    def wait_s(m: int) -> float:
        step_s = (split.microbatch_fixed_s + split.per_sample_s * m) * lane
        return (1 - 1 / reclaimed) * (step_s + obs.period_s + split.switch_s)

    m = alloc.split_microbatch
    assert m < obs.max_microbatch and wait_s(m) <= budget < wait_s(m + 1)


def test_a_burst_that_fills_the_serving_lane_on_average_takes_cores_back() -> None:
    # This period's count loads the 2-core serving lane to `util` of its capacity. The count
    # is Poisson: at 95% its own noise overruns the lane in about a quarter of the burst's
    # periods (MMPP bursts at pi5 did: 0.41x the best static split), so the lane must grow;
    # at 50% it need not.
    def cores_after(util: float) -> int:
        obs = observation("pi5", 0.3, backlog=5, current=2)
        split = obs.split
        assert split is not None
        scale = (1 + split.inference_interference) / split.inference_speedup[1]
        count = round(util * obs.period_s / (3 * split.per_request_s[0] * scale))
        return cores_of(dart(), dataclasses.replace(obs, arrivals_since_last=(count,) * 3))

    assert cores_after(0.5) == 2
    assert cores_after(0.95) > 2


def test_the_split_moves_only_for_a_gain_past_the_band_and_the_switch_cost() -> None:
    obs = observation("pi4", 0.0, current=1)  # at 1 core; 2 serve a little better idle
    assert cores_of(dart(hysteresis=0.0), obs) == 2
    assert cores_of(dart(hysteresis=0.5), obs) == 1
    slow_switch = dataclasses.replace(obs, split=dataclasses.replace(obs.split, switch_s=100.0))  # type: ignore[arg-type]
    assert cores_of(dart(hysteresis=0.0), slow_switch) == 1


def test_every_decision_is_a_valid_allocation_and_deterministic() -> None:
    rng = np.random.default_rng(3)
    for name in ("pi4", "pi5", "jetson-orin-nano"):
        n = get_profile(name).cores.count
        for _ in range(200):
            obs = dataclasses.replace(
                observation(
                    name, float(rng.uniform(0, 1.5)), int(rng.integers(0, 60)), int(rng.integers(1, n + 1))
                ),
                oldest_age_s=tuple(rng.uniform(0, 0.3, 3).tolist()),
            )
            a, b = dart(), dart()
            first, second = (cores_of(p, obs) for p in (a, b))
            assert first == second and 1 <= first <= n
            alloc = a.decide(obs)
            assert alloc == b.decide(obs)
            assert alloc.split_microbatch is None or 1 <= alloc.split_microbatch <= obs.max_microbatch


def test_bad_core_split_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="hysteresis"):
        CoreSplitConfig(hysteresis=1.5)
    with pytest.raises(ConfigError, match="dart split window must be a finite number"):
        make_policy("dart:split-window=-1")
    with pytest.raises(ConfigError, match="noise window must be a finite number"):
        CoreSplitConfig(noise_window_s=float("nan"))
    with pytest.raises(ConfigError, match="split must be on or off"):
        make_policy("dart:split=maybe")
    with pytest.raises(ConfigError, match="needs its inference cores"):
        make_policy("cores")
    with pytest.raises(ConfigError, match="k must be an integer >= 1"):
        make_policy("cores:0")


def test_the_small_split_decision_is_the_shared_one() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 8))
        allowed = sorted(rng.choice(np.arange(0, 12), n, replace=False).tolist())
        values = rng.normal(0, 1, n).round(1).tolist()  # ties happen
        current = int(rng.integers(0, 12))
        rule = SplitRule(
            float(rng.uniform(0, 2)),
            float(rng.uniform(0, 2)),
            1.0,
            float(rng.uniform(0, 0.3)),
            int(rng.integers(0, 3)),
        )
        band = float(rng.uniform(0.1, 30)) if rng.uniform() < 0.5 else None
        kwargs = {"units": 8, "scale": float(rng.uniform(0.1, 3)), "rule": rule, "band_scale": band}
        assert choose_split_small(allowed, current, values, **kwargs) == choose_split(
            allowed, current, values, **kwargs
        )


def test_in_the_tight_slo_regime_dart_trains_on_spare_cores_at_inference_only_slo() -> None:
    # pi4 with a 30 ms SLO: a one-sample step takes 35 ms on one core, 15 ms on all four, so
    # time sharing trains only in one-sample steps that delay whoever arrives during them
    # (docs/benchmarks.md, "The hopeless regime"). Spare cores train without delaying anyone.
    runs = poisson_runs("pi4", 0.5, 0.030, ("dart", "dart:split=off", "inference-only"))
    assert runs["dart"]["train_samples"] > 0
    assert runs["dart"]["slo_attainment"] >= runs["inference-only"]["slo_attainment"] - 0.01


def test_a_steady_rates_noise_is_read_over_the_burst_and_serves_on_fewer_cores() -> None:
    # Steady Poisson arrivals at half the pi4's capacity: read over one period (the rule
    # before, `split-window=0`), each count's two-sigma bound (+26% at this rate) keeps the
    # device time-shared most of the time; read over the BURST_S seconds the miss model takes
    # a burst to last (+8%), two or three cores carry it, the rest train, and the SLO holds
    # (docs/benchmarks.md, "The burst bound's window").
    runs = poisson_runs("pi4", 0.5, 0.25, ("dart", "dart:split-window=0", "inference-only"))
    steady, period = runs["dart"], runs["dart:split-window=0"]
    assert steady["mean_inference_cores"] < period["mean_inference_cores"] - 0.5
    assert steady["train_samples"] > 1.1 * period["train_samples"]
    assert steady["slo_attainment"] >= runs["inference-only"]["slo_attainment"] - 0.01


def test_an_onset_is_planned_at_one_periods_noise_whatever_the_window() -> None:
    # Real traces' bursts grow from their first period (llm-sessions at pi4: 41, 54, 70
    # arrivals a period): a count far above the smoothed rate is an onset, and its
    # per-period bound is the margin for that growth. A count within the smoothed rate's
    # per-period noise is steady, and its noise is read over the window.
    tau, window = 0.25, BURST_S
    steady = _burst_rate(200.0, 200.0, 50, tau, window)
    assert steady == pytest.approx(200.0 + 2.0 * (200.0 / window) ** 0.5)
    onset = _burst_rate(200.0, 80.0, 50, tau, window)  # 200/s counted against 80/s smoothed
    assert onset == pytest.approx(200.0 + 2.0 * (200.0 / tau) ** 0.5)
    assert _burst_rate(200.0, 200.0, 50, tau, tau) == pytest.approx(onset)  # split-window=0
    assert _burst_rate(0.0, 0.0, 0, tau, window) == 0.0


def test_a_split_that_has_cost_misses_is_given_up_and_tried_again_once_forgotten() -> None:
    # Issue 12: on traffic whose bursts nothing announces, the split's model sees no risk,
    # yet each burst that lands on a split costs misses the whole device would have avoided.
    policy = dart()
    quiet = observation("pi4", 0.1, current=2)
    assert cores_of(policy, quiet) < 4
    hit = dataclasses.replace(quiet, split_misses_since_last=(40, 40, 40))
    for _ in range(8):  # two seconds of split, each period with misses only the split explains
        policy.update(hit)
    assert policy.cores.split_cost_per_s > 10.0
    assert cores_of(policy, quiet) == 4
    time_shared = observation("pi4", 0.1)
    for _ in range(int(3600 / 0.25)):  # an hour without a split: what it cost is forgotten
        policy.update(time_shared)
    assert policy.cores.split_cost_per_s < 0.5  # e^-6 of what it was
    assert cores_of(policy, time_shared) < 4


def test_time_sharing_that_has_cost_misses_gives_way_to_a_split_as_a_split_does() -> None:
    # The split's learnt cost used to be one-sided: a split was charged the misses it caused,
    # time sharing only its model's. On the tight pi4 rows of benchmarks/spatial.py, DART then
    # time-shared 92% of the time in 1-sample steps that cost misses no one counted.
    policy = dart()
    quiet = observation("pi4", 0.1, current=2)
    assert cores_of(policy, quiet) < 4
    hit = dataclasses.replace(quiet, split_misses_since_last=(40, 40, 40))
    for _ in range(8):
        policy.update(hit)
    time_shared = observation("pi4", 0.1)
    assert cores_of(policy, time_shared) == 4
    # Two minutes time-shared whose steps made every request miss (the core split's books
    # only: DART's miss debt would otherwise stop training altogether). The learnt rate is
    # trusted as a split's is, against a prior of PRIOR_SPLIT_S seconds without a miss.
    held = dataclasses.replace(time_shared, training_misses_since_last=(3, 3, 3))
    for _ in range(480):
        policy.cores.update(held, 0.0)
    assert policy.cores.shared_cost_per_request > 0.5
    assert cores_of(policy, time_shared) < 4


def test_time_sharing_keeps_a_shorter_step_where_darts_step_would_hold_requests_late() -> None:
    # The Jetson under a 30 ms SLO at load 0.5 (azure-conv, 14 s in): DART planned steps of
    # 11 samples (14 ms), which the split's model of a time-shared step prices as a net loss.
    # Until 2026-12-03 it then trained nothing (smooth.py: the Jetson rows at 0.40x the turn-2
    # DART's harvest); now it takes the best shorter step that is worth it.
    jetson = get_profile("jetson-orin-nano")
    obs = dataclasses.replace(
        observation("jetson-orin-nano", 0.5),
        now_s=14.0,
        backlog=(0, 6, 3),
        oldest_age_s=(0.0, 0.0073, 0.0120),
        arrivals_since_last=(82, 83, 81),
        arrival_rate_per_s=(314.7, 296.9, 311.8),
        slo_s=(0.03,) * 3,
    )
    shared = Allocation(1.0, (1 / 3,) * 3, (1.0,) * 3, 11, jetson.max_batch)
    planned = [376.0, 352.0, 352.0]  # DART's planning rates: the busiest recent periods
    # A miss at 513 samples: DART's price with a miss debt of 25 requests, at V = 0.05.
    split = CoreSplit()
    split.seen_s = BURST_S
    out = split.choose(obs, shared, lambda lane: shared, planned, planned, 513.0, 0.0285)
    assert out.inference_cores is None and 0 < out.microbatch < 11


def test_on_a_gpu_device_the_serving_lane_of_a_split_does_not_train() -> None:
    # The training lane keeps the GPU; a serving-lane step would need it too. Valued as if it
    # could (and simulated so, counting the GPU twice), the split looked better than it was.
    obs = observation("jetson-orin-nano", 0.1)
    assert obs.split is not None and not obs.split.serving_lane_trains
    policy = dart()
    policy.update(obs)
    alloc = policy.decide(obs)
    assert alloc.inference_cores is not None and alloc.inference_cores < obs.cores
    assert alloc.microbatch == 0 and (alloc.split_microbatch or 0) > 0
    cpu = observation("pi4", 0.1)
    assert cpu.split is not None and cpu.split.serving_lane_trains
