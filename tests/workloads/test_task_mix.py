"""Task mixes: Zipf skew, rotation of the popular task, expected shares."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from workloads.mix import TaskMix
from workloads.registry import generate

NAMES = ("digits", "fashion", "uci-digits")


def _shares(tasks: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(tasks, minlength=k) / tasks.size


def test_zero_exponent_is_uniform() -> None:
    mix = TaskMix(NAMES)
    tasks = mix.assign(np.linspace(0, 100, 60_000), np.random.default_rng(1))
    np.testing.assert_allclose(_shares(tasks, 3), [1 / 3] * 3, atol=0.01)


def test_zipf_exponent_one_gives_harmonic_shares_first_task_most_popular() -> None:
    mix = TaskMix(NAMES, zipf_s=1.0)
    expected = np.array([1, 1 / 2, 1 / 3]) / (11 / 6)
    np.testing.assert_allclose(mix.rank_probabilities(), expected)
    tasks = mix.assign(np.linspace(0, 100, 100_000), np.random.default_rng(1))
    np.testing.assert_allclose(_shares(tasks, 3), expected, atol=0.01)


def test_larger_exponent_is_more_skewed() -> None:
    assert (
        TaskMix(NAMES, zipf_s=2.0).rank_probabilities()[0]
        > TaskMix(NAMES, zipf_s=1.0).rank_probabilities()[0]
    )


def ten_minutes_of_zipf(rotate_s: float | None = None) -> Arrivals:
    """600 s of Poisson traffic at 100/s over NAMES with Zipf exponent 1.5."""
    rng = np.random.default_rng(4)
    return generate(
        "poisson", duration_s=600.0, rate_per_s=100.0, task_names=NAMES, rng=rng, zipf=1.5, rotate_s=rotate_s
    )


def test_rotation_moves_the_popular_task_every_period() -> None:
    arrivals = ten_minutes_of_zipf(rotate_s=100.0)
    for epoch in range(6):
        window = arrivals.window(epoch * 100.0, (epoch + 1) * 100.0)
        assert int(np.argmax(window.counts_per_task())) == epoch % 3
    # Over whole rotation cycles every task gets the same share.
    np.testing.assert_allclose(arrivals.counts_per_task() / arrivals.num_requests, [1 / 3] * 3, atol=0.02)


def test_without_rotation_the_first_task_stays_most_popular() -> None:
    arrivals = ten_minutes_of_zipf()
    for epoch in range(6):
        assert int(np.argmax(arrivals.window(epoch * 100.0, (epoch + 1) * 100.0).counts_per_task())) == 0


def test_expected_shares_weight_each_rotation_by_its_time() -> None:
    mix = TaskMix(("a", "b"), zipf_s=np.log2(3.0), rotate_s=10.0)  # rank probabilities 3/4, 1/4
    assert mix.expected_shares(20.0) == pytest.approx((0.5, 0.5))
    # 10 s with a popular, 5 s with b popular: a gets (10 x 3/4 + 5 x 1/4) / 15.
    assert mix.expected_shares(15.0) == pytest.approx((8.75 / 15, 6.25 / 15))
    assert TaskMix(("a", "b"), zipf_s=np.log2(3.0)).expected_shares(15.0) == pytest.approx((0.75, 0.25))


def test_expected_shares_match_a_generated_workload() -> None:
    mix = TaskMix(NAMES, zipf_s=1.0, rotate_s=70.0)
    arrivals = generate(
        "poisson",
        duration_s=500.0,
        rate_per_s=200.0,
        task_names=NAMES,
        rng=np.random.default_rng(2),
        zipf=1.0,
        rotate_s=70.0,
    )
    np.testing.assert_allclose(
        arrivals.counts_per_task() / arrivals.num_requests, mix.expected_shares(500.0), atol=0.01
    )


def test_assignment_is_deterministic_for_a_seed() -> None:
    times = np.linspace(0, 300, 5000)
    mix = TaskMix(NAMES, zipf_s=0.7, rotate_s=30.0)
    a = mix.assign(times, np.random.default_rng(9))
    np.testing.assert_array_equal(a, mix.assign(times, np.random.default_rng(9)))
    assert a.dtype == np.int64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task_names": ()}, "at least one task"),
        ({"task_names": ("a", "a")}, "unique"),
        ({"task_names": ("a", "")}, "unique and non-empty"),
        ({"task_names": ("a",), "zipf_s": -0.5}, r"Zipf exponent of task popularity \(--zipf\)"),
        ({"task_names": ("a",), "zipf_s": float("inf")}, r"Zipf exponent of task popularity \(--zipf\)"),
        ({"task_names": ("a",), "rotate_s": 0.0}, r"rotation period of task popularity \(--rotate-s\)"),
    ],
)
def test_invalid_mix_is_rejected_with_the_bad_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TaskMix(**kwargs)  # type: ignore[arg-type]
