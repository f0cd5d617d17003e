"""Synthetic arrival processes: determinism, mean rate, and the burst shapes they promise."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dartfl.errors import ConfigError
from workloads.compound import COMPOUND_MAX_BATCH_MEAN
from workloads.modulated import MMPP_MAX_BURST, PARETO_ALPHA_MAX, STATE_S_RANGE
from workloads.registry import GENERATOR_NAMES, generate_times
from workloads.renewal import GAMMA_CV_RANGE


def per_second_cv(times: np.ndarray, duration_s: float) -> float:
    counts = np.bincount(np.floor(times).astype(np.int64), minlength=int(duration_s))
    return float(counts.std() / counts.mean())


def _times(name: str, duration_s: float, rate: float, seed: int = 1, **params: float) -> np.ndarray:
    return generate_times(
        name, duration_s=duration_s, rate_per_s=rate, rng=np.random.default_rng(seed), params=params
    )


@pytest.mark.parametrize("name", GENERATOR_NAMES)
def test_same_seed_gives_identical_times_and_another_seed_differs(name: str) -> None:
    a = _times(name, 300.0, 20.0, seed=7)
    b = _times(name, 300.0, 20.0, seed=7)
    c = _times(name, 300.0, 20.0, seed=8)
    np.testing.assert_array_equal(a, b)
    assert a.size != c.size or not np.array_equal(a, c)


@pytest.mark.parametrize("name", GENERATOR_NAMES)
def test_times_are_sorted_floats_inside_the_horizon(name: str) -> None:
    times = _times(name, 500.0, 30.0)
    assert times.dtype == np.float64 and times.ndim == 1 and times.size > 0
    assert np.all(np.diff(times) >= 0)
    assert times[0] >= 0.0 and times[-1] < 500.0


# (generator, params, duration, rate, relative tolerance). Tolerances are about 4 standard
# deviations of the realized count: Poisson noise for most, inflated for Gamma (cv^2) and
# Hawkes (1 / (1 - branching)^2).
RATE_CASES = [
    *(
        (name, {}, 2000.0, 50.0, 0.02)
        for name in ("poisson", "mmpp", "pareto-onoff", "diurnal", "step", "flash-crowd")
    ),
    ("gamma", {}, 4000.0, 50.0, 0.06),
    ("gamma", {"cv": 0.5}, 2000.0, 50.0, 0.02),
    ("mmpp", {"burst": 50.0, "high-s": 1.0, "low-s": 60.0}, 2000.0, 50.0, 0.02),
    ("pareto-onoff", {"alpha": 1.2, "off-frac": 0.1}, 2000.0, 50.0, 0.02),
    ("diurnal", {"period-s": 777.0, "amplitude": 1.0, "phase-s": 100.0}, 2000.0, 50.0, 0.02),
    ("step", {"factor": 0.2, "at-s": 300.0}, 2000.0, 50.0, 0.02),
    ("flash-crowd", {"factor": 30.0, "at-s": 1900.0, "decay-s": 500.0}, 2000.0, 50.0, 0.02),
    ("hawkes", {}, 5000.0, 100.0, 0.06),
    ("hawkes", {"branching": 0.5, "kernel-s": 0.2}, 2000.0, 50.0, 0.03),
    # Compound: the count is a sum of batch sizes, variance rate x duration x E[B^2] / E[B].
    ("compound", {}, 4000.0, 50.0, 0.08),
    ("compound", {"off-s": 0.0, "batch-mean": 5.0, "batch-cv": 0.0}, 2000.0, 50.0, 0.04),
]


@pytest.mark.parametrize(("name", "params", "duration", "rate", "tol"), RATE_CASES)
def test_realized_mean_rate_is_close_to_the_requested_rate(
    name: str, params: dict[str, float], duration: float, rate: float, tol: float
) -> None:
    realized = _times(name, duration, rate, seed=3, **params).size / duration
    assert realized == pytest.approx(rate, rel=tol)


def test_modulated_generators_honour_the_rate_even_on_a_short_horizon() -> None:
    # The path is drawn first and the levels scaled on it, so only Poisson noise remains.
    for seed in range(5):
        for name in ("mmpp", "pareto-onoff"):
            assert _times(name, 120.0, 100.0, seed=seed).size == pytest.approx(12_000, rel=0.05)


@pytest.mark.parametrize("cv", [3.0, 0.5])
def test_gamma_inter_arrival_cv_matches_the_target(cv: float) -> None:
    gaps = np.diff(_times("gamma", 2000.0, 50.0, cv=cv))
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


@pytest.mark.parametrize("name", ["mmpp", "pareto-onoff", "hawkes", "gamma", "compound"])
def test_bursty_generators_have_much_higher_per_second_cv_than_poisson(name: str) -> None:
    poisson = per_second_cv(_times("poisson", 1800.0, 50.0), 1800.0)
    bursty = per_second_cv(_times(name, 1800.0, 50.0), 1800.0)
    assert poisson == pytest.approx(1 / np.sqrt(50.0), rel=0.1)
    assert bursty > 2.5 * poisson


def test_mmpp_high_state_rate_is_burst_times_the_low_state_rate() -> None:
    # Long states make each second's state obvious from its count: the low and high rates
    # lie on either side of the mean rate.
    times = _times("mmpp", 4000.0, 100.0, burst=10.0, high_s=50.0, low_s=50.0)
    counts = np.bincount(times.astype(np.int64), minlength=4000)
    busy = counts > 100
    assert 0.3 < busy.mean() < 0.7  # half the time in each state, give or take ~40 cycles
    # Seconds that straddle a state change pull the ratio a little below 10.
    assert counts[busy].mean() / counts[~busy].mean() == pytest.approx(10.0, rel=0.1)


def test_pareto_onoff_is_silent_off_and_poisson_when_off_equals_on() -> None:
    # OFF 15 s of every 20 s on average; ON at 4 x 5 req/s leaves almost no silent ON second.
    silent = np.bincount(_times("pareto-onoff", 20_000.0, 5.0).astype(np.int64), minlength=20_000) == 0
    assert 0.5 < silent.mean() < 0.85
    flat = _times("pareto-onoff", 2000.0, 50.0, off_frac=1.0)
    assert per_second_cv(flat, 2000.0) == pytest.approx(1 / np.sqrt(50.0), rel=0.15)


def test_pareto_onoff_off_periods_have_a_power_law_tail() -> None:
    # At 2 req/s the ON rate is 8 req/s, so gaps over 3 s are OFF periods (all >= x_min = 5 s).
    gaps = np.diff(_times("pareto-onoff", 200_000.0, 2.0, seed=2))
    off = gaps[gaps > 3.0]
    x_min = 15.0 * (1.5 - 1.0) / 1.5  # mean 15 s, alpha 1.5
    assert off.size > 5000
    assert np.median(off) == pytest.approx(x_min * 2 ** (1 / 1.5), rel=0.05)
    # P(X > 10 x median) = (x_min / (10 x median))^alpha = 0.0158; an exponential tail gives 0.001.
    assert np.mean(off > 10 * np.median(off)) == pytest.approx(0.0158, rel=0.3)


def test_diurnal_peaks_mid_period_and_troughs_at_the_start() -> None:
    times = _times("diurnal", 3000.0, 50.0, period_s=300.0, amplitude=0.8)
    phase = np.mod(times, 300.0)
    near_peak = np.count_nonzero(np.abs(phase - 150.0) < 15.0)
    near_trough = np.count_nonzero((phase < 15.0) | (phase > 285.0))
    assert near_peak / near_trough > 5.0  # (1 + 0.8) / (1 - 0.8) = 9 at the extremes


def test_step_multiplies_the_rate_at_the_step_time() -> None:
    times = _times("step", 2000.0, 50.0, factor=4.0, at_s=500.0)
    before = np.count_nonzero(times < 500.0) / 500.0
    after = np.count_nonzero(times >= 500.0) / 1500.0
    assert after / before == pytest.approx(4.0, rel=0.08)


def test_flash_crowd_spikes_by_factor_then_decays_to_baseline() -> None:
    times = _times("flash-crowd", 3000.0, 50.0, factor=8.0, at_s=1000.0, decay_s=60.0)
    baseline = np.count_nonzero(times < 1000.0) / 1000.0
    spike = np.count_nonzero((times >= 1000.0) & (times < 1005.0)) / 5.0
    late = np.count_nonzero(times >= 2000.0) / 1000.0
    assert spike / baseline == pytest.approx(8.0 * np.exp(-2.5 / 60.0), rel=0.15)
    assert late / baseline == pytest.approx(1.0, rel=0.08)


def test_hawkes_without_branching_is_poisson_and_with_branching_clusters() -> None:
    flat = per_second_cv(_times("hawkes", 2000.0, 50.0, branching=0.0), 2000.0)
    assert flat == pytest.approx(1 / np.sqrt(50.0), rel=0.1)
    # Follow-ups come kernel-s after their parent: short gaps are much more common than in Poisson.
    gaps = np.diff(_times("hawkes", 2000.0, 5.0, branching=0.8, kernel_s=0.05))
    assert np.mean(gaps < 0.02) > 3 * (1 - np.exp(-5.0 * 0.02))


BAD_PARAMS = [
    ("mmpp", {"burst": 0.5}, "burst"),
    ("mmpp", {"high-s": 0.0}, "high-s"),
    ("mmpp", {"low-s": -1.0}, "low-s"),
    ("gamma", {"cv": 0.0}, "cv"),
    ("gamma", {"cv": 1e-300}, "cv"),  # 1/cv^2 divided by zero
    ("gamma", {"cv": 1e10}, "cv"),  # drew nothing, blaming --rate and --duration-s
    ("mmpp", {"burst": 1e308}, "burst"),  # overflowed (a numpy warning) and drew nothing
    ("pareto-onoff", {"alpha": 1.0}, "alpha"),
    ("pareto-onoff", {"on-s": 0.0}, "on-s"),
    ("pareto-onoff", {"off-frac": 1.5}, "off-frac"),
    ("diurnal", {"amplitude": 1.2}, "amplitude"),
    ("diurnal", {"period-s": 0.0}, "period-s"),
    ("step", {"factor": 0.0}, "factor"),
    ("step", {"at-s": 5000.0}, "at-s"),
    ("flash-crowd", {"factor": 0.5}, "factor"),
    ("flash-crowd", {"decay-s": 0.0}, "decay-s"),
    ("flash-crowd", {"at-s": -1.0}, "at-s"),
    ("hawkes", {"branching": 1.0}, "branching"),
    ("hawkes", {"kernel-s": -2.0}, "kernel-s"),
    ("compound", {"batch-mean": 0.5}, "batch-mean"),
    ("compound", {"batch-alpha": 0.5}, "batch-alpha"),
    ("compound", {"alpha": 1.0}, "alpha"),
    ("compound", {"off-s": -1.0}, "off-s"),
    ("compound", {"background": 1.5}, "background"),
    # Tiny state / period lengths: "Maximum allowed size exceeded" tracebacks (10^303 periods).
    ("mmpp", {"high-s": 1e-300, "low-s": 1e-300}, "high-s"),
    ("mmpp", {"low-s": 1e-4}, "low-s"),
    ("pareto-onoff", {"on-s": 1e-300, "off-s": 1e-300}, "on-s"),
    ("compound", {"on-s": 1e-300, "off-s": 1e-300}, "on-s"),
    ("compound", {"off-s": 1e-300}, "off-s"),
    # Huge ones, and huge Pareto shapes: inf lengths, numpy overflow warnings.
    ("mmpp", {"high-s": 1e308}, "high-s"),
    ("mmpp", {"low-s": 1e308}, "low-s"),
    ("pareto-onoff", {"off-s": 1e308}, "off-s"),
    ("pareto-onoff", {"alpha": 1e308}, "alpha"),
    ("compound", {"on-s": 1e308}, "on-s"),
    ("compound", {"alpha": 1e308}, "alpha"),
    ("compound", {"batch-alpha": 1e308}, "batch-alpha"),  # an int64 cast warning, then a traceback
    ("compound", {"batch-cv": 1e-300}, "batch-cv"),  # ZeroDivisionError
    ("compound", {"batch-cv": 1e308}, "batch-cv"),  # ZeroDivisionError
    ("compound", {"batch-mean": 1e308}, "batch-mean"),  # one batch would not fit in memory
    ("diurnal", {"period-s": 1e-310}, "period-s"),  # math domain error
    ("diurnal", {"period-s": 1e308, "amplitude": 1.0}, "period-s"),  # ZeroDivisionError
    ("step", {"factor": 1e308}, "factor"),  # drew nothing
    ("step", {"factor": 1e-320, "at-s": 0.0}, "factor"),  # lam is NaN
    ("flash-crowd", {"factor": 1e308}, "factor"),  # lam is NaN
    ("flash-crowd", {"decay-s": 1e308}, "decay-s"),  # lam is NaN
    ("hawkes", {"kernel-s": 1e308}, "kernel-s"),  # refused for "a inf-s burn-in"
]


def test_compound_batches_have_the_requested_mean_and_a_pareto_tail() -> None:
    # spread-s 0: a batch's requests share one time, so the batches can be counted back.
    times = _times("compound", 20_000.0, 50.0, seed=4, **{"batch-mean": 10.0, "batch-alpha": 1.3,
                   "spread-s": 0.0, "off-s": 0.0, "background": 0.0})  # fmt: skip
    _, sizes = np.unique(times, return_counts=True)
    assert sizes.mean() == pytest.approx(10.0, rel=0.15)
    # Classical Pareto(1.3): P(size > x) falls as x^-1.3; between 20 and 200, by 10^1.3 = 20.
    tail = (sizes > 20).mean() / (sizes > 200).mean()
    assert 10.0 < tail < 40.0
    assert sizes.max() > 1000  # clumps of hundreds or thousands do occur


def test_compound_bursts_come_in_on_periods_over_a_background_of_single_requests() -> None:
    params = {"batch-mean": 30.0, "spread-s": 0.0, "on-s": 2.0, "off-s": 30.0, "background": 0.1}
    times = _times("compound", 3600.0, 20.0, seed=2, **params)
    _, sizes = np.unique(times, return_counts=True)
    assert (sizes == 1).sum() == pytest.approx(0.1 * 20.0 * 3600.0, rel=0.05)  # the background
    assert per_second_cv(times, 3600.0) > 2.0
    counts = np.bincount(np.floor(times).astype(np.int64), minlength=3600)
    assert counts.max() >= 30  # a whole batch within one second


@pytest.mark.parametrize(("name", "params", "param"), BAD_PARAMS)
def test_invalid_parameter_value_names_the_parameter_and_its_range(
    name: str, params: dict[str, float], param: str
) -> None:
    with pytest.raises(
        ConfigError, match=f"{name} parameter {param} \\(--param {param}=...\\) must be"
    ) as err:
        generate_times(name, duration_s=600.0, rate_per_s=10.0, rng=np.random.default_rng(1), params=params)
    assert repr(next(iter(params.values()))) in str(err.value)
    assert "duration_s" not in str(err.value)  # step's at-s range names --duration-s


@pytest.mark.parametrize("name", GENERATOR_NAMES)
@pytest.mark.parametrize(
    ("duration", "rate"), [(0.0, 10.0), (100.0, 0.0), (float("nan"), 10.0), (100.0, -1.0)]
)
def test_non_positive_duration_or_rate_is_rejected(name: str, duration: float, rate: float) -> None:
    flag = "--duration-s" if not duration > 0 else "--rate"  # the CLI flag that sets it, not duration_s
    with pytest.raises(ConfigError, match=f"\\({flag}\\) must be a finite number of [a-z/]+ > 0") as err:
        _times(name, duration, rate)
    assert "duration_s" not in str(err.value) and "rate_per_s" not in str(err.value)


def test_absurd_request_volume_is_refused_before_allocating() -> None:
    with pytest.raises(ConfigError, match="lower --rate or --duration-s"):
        _times("poisson", 86_400.0 * 365, 1000.0)


def test_hawkes_near_criticality_refuses_a_burn_in_it_cannot_hold() -> None:
    # Branching 0.99999 needs a 5e5-s burn-in: ~5e8 simulated events at 1000 req/s, far past
    # the request limit, which only looked at the rate times the duration.
    from workloads.hawkes import hawkes_times

    with pytest.raises(ConfigError, match="burn-in"):
        hawkes_times(10.0, 1000.0, np.random.default_rng(0), branching=0.99999)
    assert hawkes_times(10.0, 50.0, np.random.default_rng(0), branching=0.9).size > 0


def test_the_ends_of_the_gamma_cv_and_mmpp_burst_ranges_still_generate() -> None:
    low, high = GAMMA_CV_RANGE
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings at the bounds either
        assert _times("gamma", 600.0, 50.0, cv=low).size == pytest.approx(30_000, rel=0.01)
        assert _times("gamma", 600.0, 50.0, cv=high).size > 0
        assert _times("mmpp", 600.0, 50.0, burst=MMPP_MAX_BURST).size == pytest.approx(30_000, rel=0.1)


@pytest.mark.parametrize(
    ("name", "duration", "rate", "params", "named"),
    [
        # 2 x 10^5 / 0.002 = 10^8 state changes; at 1e-300 s it was "Maximum allowed size exceeded".
        ("mmpp", 1e5, 50.0, {"high-s": 1e-3, "low-s": 1e-3}, "raise --param high-s or --param low-s"),
        ("mmpp", 1e300, 1e-298, {}, "raise --param high-s or --param low-s"),
        # Periods down to 1e-10 of their mean: up to 6e11 of them, a hang before.
        ("pareto-onoff", 600.0, 50.0, {"alpha": 1.0000000001}, "raise --param alpha, on-s or off-s"),
        ("compound", 600.0, 50.0, {"alpha": 1.0000000001}, "raise --param alpha, on-s or off-s"),
        ("pareto-onoff", 1e300, 1e-298, {}, "raise --param alpha, on-s or off-s"),
    ],
)
def test_a_path_of_too_many_state_changes_is_refused(
    name: str, duration: float, rate: float, params: dict[str, float], named: str
) -> None:
    with pytest.raises(ConfigError, match="state changes, more than the 10,000,000") as err:
        _times(name, duration, rate, seed=1, **params)
    assert named in str(err.value) and "--duration-s" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_ends_of_the_state_and_shape_ranges_still_generate() -> None:
    (low, high), top = STATE_S_RANGE, PARETO_ALPHA_MAX
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _times("mmpp", 600.0, 50.0, high_s=low, low_s=low).size == pytest.approx(30_000, rel=0.03)
        assert _times("mmpp", 600.0, 50.0, high_s=high, low_s=high).size == pytest.approx(30_000, rel=0.03)
        for alpha, on_off in ((top, low), (top, high), (1.0001, high), (1.001, 5.0)):
            times = _times("pareto-onoff", 600.0, 50.0, alpha=alpha, on_s=on_off, off_s=on_off)
            assert times.size == pytest.approx(30_000, rel=0.03)
        times = _times("compound", 600.0, 50.0, seed=1, **{"alpha": top, "batch-alpha": top, "on-s": low})
        assert times.size > 0
        params = {"batch-cv": 100.0, "batch-mean": COMPOUND_MAX_BATCH_MEAN, "off-s": high}
        assert _times("compound", 600.0, 50.0, seed=1, **params).size > 0
        assert _times("step", 600.0, 50.0, factor=1e-6, at_s=0.0).size == pytest.approx(30_000, rel=0.03)
        assert _times("step", 600.0, 50.0, factor=1e6).size == pytest.approx(30_000, rel=0.03)
        flash = _times("flash-crowd", 600.0, 50.0, factor=1e6, decay_s=1e9)
        assert flash.size == pytest.approx(30_000, rel=0.03)
        assert _times("hawkes", 600.0, 50.0, kernel_s=1e-300, branching=0.5).size > 0


def test_compound_refuses_batches_that_outgrow_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # A heavy tail can draw a batch of billions (np.repeat then exhausts memory); the check runs
    # on the drawn sizes, so a lowered limit shows it without drawing billions here.
    import workloads.compound

    monkeypatch.setattr(workloads.compound, "_SIZE_CAP", 1000)
    with pytest.raises(ConfigError, match=r"the drawn batches hold .* requests .* lower --param batch-mean"):
        _times("compound", 600.0, 50.0)


@pytest.mark.parametrize("phase_s", [1e20, -1e308])
def test_diurnal_phase_is_taken_modulo_the_period(phase_s: float) -> None:
    # omega x 1e20 kept no digit of the angle: 5,918 requests of the 30,000 asked for.
    times = _times("diurnal", 600.0, 50.0, phase_s=phase_s)
    assert times.size == pytest.approx(30_000, rel=0.03)
    np.testing.assert_array_equal(times, _times("diurnal", 600.0, 50.0, phase_s=math.fmod(phase_s, 300.0)))


@pytest.mark.parametrize(("duration", "rate", "period_s"), [(100.0, 100.0, 1e9), (1e-6, 1e10, 300.0)])
def test_diurnal_keeps_its_mean_on_a_sliver_of_a_period_at_full_amplitude(
    duration: float, rate: float, period_s: float
) -> None:
    # 1 - cos(theta) cancelled to 0 (a ZeroDivisionError) or to noise for a tiny angle.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        times = _times("diurnal", duration, rate, amplitude=1.0, period_s=period_s)
    assert times.size == pytest.approx(10_000, rel=0.05)
    # Rate c (omega t)^2 / 2 from the trough: a third of the requests in the first 2/3^(1/3) = 69%.
    assert np.mean(times < duration * 3 ** (-1 / 3)) == pytest.approx(1 / 3, abs=0.02)


def test_diurnal_refuses_a_horizon_whose_rate_underflows() -> None:
    with pytest.raises(ConfigError, match="the rate underflows to 0; raise --duration-s"):
        _times("diurnal", 1e-200, 50.0, amplitude=1.0)
