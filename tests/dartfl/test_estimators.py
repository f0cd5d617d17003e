"""Online estimators: EWMA arrival rates and the service-time profiler."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.errors import ConfigError
from dartfl.estimators import EwmaRates, ServiceTimeProfiler

PERIOD_S = 0.25


# --- EwmaRates ---------------------------------------------------------------------------------


def test_first_update_initialises_from_the_observation() -> None:
    ewma = EwmaRates(2)
    assert ewma.rates_per_s == (0.0, 0.0) and not ewma.started
    ewma.update([5, 0], PERIOD_S)
    assert ewma.started
    assert ewma.rates_per_s == (20.0, 0.0)
    assert ewma.fast_rates_per_s == (20.0, 0.0)
    assert ewma.peak_rates_per_s == (20.0, 0.0)


def test_alpha_follows_the_time_constant() -> None:
    ewma = EwmaRates(1, time_constant_s=2.0)
    ewma.update([0], PERIOD_S)
    ewma.update([10], PERIOD_S)  # 40 /s observed
    assert ewma.rates_per_s[0] == pytest.approx(40.0 * (1 - math.exp(-PERIOD_S / 2.0)))
    assert ewma.fast_rates_per_s[0] == pytest.approx(40.0 * (1 - math.exp(-PERIOD_S / 0.25)))


def test_converges_to_a_constant_poisson_rate() -> None:
    rng = np.random.default_rng(7)
    rates = (30.0, 4.0)
    ewma = EwmaRates(2, time_constant_s=2.0)
    for _ in range(400):
        ewma.update([int(c) for c in rng.poisson([r * PERIOD_S for r in rates])], PERIOD_S)
    # Effective window ~2 s: Poisson noise of ~sqrt(rate/(2T)) relative to the rate.
    assert ewma.rates_per_s[0] == pytest.approx(30.0, rel=0.25)
    assert ewma.rates_per_s[1] == pytest.approx(4.0, abs=3.0)
    assert all(isinstance(r, float) for r in ewma.rates_per_s)


def test_converges_exactly_on_a_deterministic_rate() -> None:
    ewma = EwmaRates(1)
    ewma.update([0], PERIOD_S)
    for _ in range(200):
        ewma.update([5], PERIOD_S)
    assert ewma.rates_per_s[0] == pytest.approx(20.0, rel=1e-6)


def test_fast_estimate_reacts_to_a_step_within_a_few_periods() -> None:
    ewma = EwmaRates(1, time_constant_s=2.0)
    for _ in range(40):
        ewma.update([2], PERIOD_S)  # 8 /s
    for _ in range(3):  # step to 80 /s for three periods (0.75 s)
        ewma.update([20], PERIOD_S)
    assert ewma.peak_rates_per_s[0] >= 0.9 * 80.0
    assert ewma.rates_per_s[0] < 0.5 * 80.0  # the slow one is still catching up


def test_peak_decays_no_faster_than_the_slow_estimate_after_a_burst() -> None:
    ewma = EwmaRates(1)
    for _ in range(40):
        ewma.update([20], PERIOD_S)
    ewma.update([0], PERIOD_S)
    assert ewma.fast_rates_per_s[0] < ewma.rates_per_s[0]
    assert ewma.peak_rates_per_s[0] == ewma.rates_per_s[0]


def test_uneven_periods_weigh_by_elapsed_time() -> None:
    a, b = EwmaRates(1), EwmaRates(1)
    a.update([0], PERIOD_S)
    b.update([0], PERIOD_S)
    a.update([20], 0.5)
    b.update([10], 0.25)
    b.update([10], 0.25)
    assert a.rates_per_s[0] == pytest.approx(b.rates_per_s[0])


def test_reset_forgets_everything() -> None:
    ewma = EwmaRates(1)
    ewma.update([9], PERIOD_S)
    ewma.reset()
    assert ewma.rates_per_s == (0.0,) and not ewma.started
    ewma.update([1], PERIOD_S)
    assert ewma.rates_per_s == (4.0,)


@pytest.mark.parametrize(
    ("counts", "dt_s"),
    [([1], PERIOD_S), ([1, 2, 3], PERIOD_S), ([1, -1], PERIOD_S), ([1, 1], 0.0), ([1, 1], math.nan)],
)
def test_bad_updates_are_rejected(counts: list[int], dt_s: float) -> None:
    with pytest.raises(ConfigError):
        EwmaRates(2).update(counts, dt_s)


def test_bad_construction_is_rejected() -> None:
    with pytest.raises(ConfigError):
        EwmaRates(0)
    with pytest.raises(ConfigError):
        EwmaRates(1, time_constant_s=0.0)


# --- ServiceTimeProfiler -----------------------------------------------------------------------


def _feed(profiler: ServiceTimeProfiler, a: float, c: float, n: int, noise: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        b = int(rng.integers(1, 33))
        profiler.observe(b, (a + c * b) * (1.0 + noise * float(rng.standard_normal())))


def test_prior_until_two_batch_sizes_seen() -> None:
    profiler = ServiceTimeProfiler(prior_fixed_s=0.002, prior_per_item_s=0.001)
    for _ in range(50):
        profiler.observe(8, 0.030)
    assert not profiler.fitted
    assert profiler.fixed_s == 0.002 and profiler.per_item_s == 0.001
    profiler.observe(16, 0.050)
    assert profiler.fitted


def test_recovers_fixed_and_per_item_costs_from_noisy_data() -> None:
    a, c = 0.004, 0.0015
    profiler = ServiceTimeProfiler(prior_fixed_s=0.010, prior_per_item_s=0.005, forgetting=0.995)
    _feed(profiler, a, c, n=2000, noise=0.03, seed=11)
    assert profiler.fixed_s == pytest.approx(a, rel=0.05)
    assert profiler.per_item_s == pytest.approx(c, rel=0.03)


def test_default_forgetting_still_recovers_costs_within_a_few_percent() -> None:
    a, c = 0.004, 0.0015
    profiler = ServiceTimeProfiler(prior_fixed_s=0.001, prior_per_item_s=0.0005)
    _feed(profiler, a, c, n=500, noise=0.01, seed=3)
    assert profiler.fixed_s == pytest.approx(a, rel=0.05)
    assert profiler.per_item_s == pytest.approx(c, rel=0.03)
    assert profiler.predict_s(10) == pytest.approx(a + 10 * c, rel=0.02)


def test_tracks_a_device_that_slows_down() -> None:
    profiler = ServiceTimeProfiler(prior_fixed_s=0.004, prior_per_item_s=0.0015)
    _feed(profiler, 0.004, 0.0015, n=200, noise=0.01, seed=5)
    _feed(profiler, 0.008, 0.0030, n=400, noise=0.01, seed=6)  # throttled to half speed
    assert profiler.fixed_s == pytest.approx(0.008, rel=0.1)
    assert profiler.per_item_s == pytest.approx(0.003, rel=0.05)


def test_one_huge_outlier_does_not_explode_the_estimates() -> None:
    a, c = 0.004, 0.0015
    profiler = ServiceTimeProfiler(prior_fixed_s=a, prior_per_item_s=c)
    _feed(profiler, a, c, n=300, noise=0.01, seed=8)
    profiler.observe(4, 50.0)  # a 50 s stall on a 10 ms item
    assert profiler.predict_s(16) == pytest.approx(a + 16 * c, rel=0.15)
    assert profiler.per_item_s == pytest.approx(c, rel=0.2)


def test_invalid_observations_are_ignored() -> None:
    profiler = ServiceTimeProfiler(prior_fixed_s=0.002, prior_per_item_s=0.001)
    _feed(profiler, 0.002, 0.001, n=100, noise=0.0, seed=1)
    before = (profiler.fixed_s, profiler.per_item_s, profiler.observations)
    for items, duration in ((4, math.nan), (4, math.inf), (4, -0.01), (0, 0.01), (-3, 0.01)):
        profiler.observe(items, duration)
    assert (profiler.fixed_s, profiler.per_item_s, profiler.observations) == before


def test_a_slow_first_call_does_not_poison_the_warm_up() -> None:
    a, c = 0.004, 0.0015
    profiler = ServiceTimeProfiler(prior_fixed_s=a, prior_per_item_s=c)
    profiler.observe(8, 3.0)  # first ONNX Runtime call: lazy initialisation, 200x the cost
    _feed(profiler, a, c, n=100, noise=0.01, seed=4)
    assert profiler.predict_s(8) == pytest.approx(a + 8 * c, rel=0.05)


def test_a_prior_ten_times_too_small_is_corrected_quickly() -> None:
    a, c = 0.004, 0.0015
    profiler = ServiceTimeProfiler(prior_fixed_s=a / 10, prior_per_item_s=c / 10)
    _feed(profiler, a, c, n=100, noise=0.01, seed=9)
    assert profiler.fixed_s == pytest.approx(a, rel=0.1)
    assert profiler.per_item_s == pytest.approx(c, rel=0.05)


def test_clamps_fixed_cost_at_zero_and_per_item_cost_above_zero() -> None:
    # Durations that fall with batch size: the unconstrained fit has c < 0.
    falling = ServiceTimeProfiler(prior_fixed_s=0.001, prior_per_item_s=0.001)
    for _ in range(20):
        falling.observe(1, 0.010)
        falling.observe(10, 0.009)
    assert falling.per_item_s > 0 and falling.fixed_s >= 0
    # Pure proportional cost with a negative intercept in the data: a clamps to 0.
    steep = ServiceTimeProfiler(prior_fixed_s=0.001, prior_per_item_s=0.001, forgetting=1.0)
    for _ in range(20):
        steep.observe(2, 0.001)
        steep.observe(10, 0.021)
    assert steep.fixed_s == 0.0
    assert steep.per_item_s == pytest.approx((2 * 0.001 + 10 * 0.021) / (4 + 100))


def test_reset_returns_to_the_prior() -> None:
    profiler = ServiceTimeProfiler(prior_fixed_s=0.002, prior_per_item_s=0.001)
    _feed(profiler, 0.004, 0.003, n=100, noise=0.0, seed=2)
    profiler.reset()
    assert (profiler.fixed_s, profiler.per_item_s, profiler.fitted, profiler.observations) == (
        0.002,
        0.001,
        False,
        0,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prior_fixed_s": -1.0, "prior_per_item_s": 0.001},
        {"prior_fixed_s": 0.0, "prior_per_item_s": 0.0},
        {"prior_fixed_s": 0.0, "prior_per_item_s": 0.001, "forgetting": 0.0},
        {"prior_fixed_s": 0.0, "prior_per_item_s": 0.001, "forgetting": 1.5},
        {"prior_fixed_s": 0.0, "prior_per_item_s": 0.001, "outlier_ratio": 1.0},
    ],
)
def test_bad_profiler_construction_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ServiceTimeProfiler(**kwargs)
