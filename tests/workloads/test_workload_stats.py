"""Summary statistics: counts, rates, burstiness measures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from workloads.registry import generate
from workloads.stats import binned_counts, summarize
from workloads.traces.load import bundled_azure_conv


def test_summary_of_a_hand_built_workload() -> None:
    # 20 s: 1 request per second for 10 s, then 3 per second (all task b) for 10 s.
    first = np.arange(10, dtype=float) + 0.5
    second = np.repeat(np.arange(10, 20, dtype=float), 3) + np.tile([0.1, 0.4, 0.7], 10)
    arrivals = Arrivals(np.concatenate((first, second)), np.array([0] * 10 + [1] * 30), ("a", "b"), 20.0)
    s = summarize(arrivals)
    assert (s.requests, s.duration_s, s.mean_rate_per_s) == (40, 20.0, 2.0)
    assert s.task_counts == (("a", 10), ("b", 30))
    assert s.cv_1s == pytest.approx(0.5)  # counts 1 and 3: std 1, mean 2
    assert s.cv_10s == pytest.approx(0.5)  # counts 10 and 30
    assert s.peak_to_mean_10s == pytest.approx(1.5)
    assert s.max_per_s == 3


def test_binned_counts_per_task_and_partial_last_bin() -> None:
    arrivals = Arrivals(np.array([0.1, 0.2, 1.5, 2.9]), np.array([0, 1, 1, 0]), ("a", "b"), 2.95)
    starts, counts = binned_counts(arrivals, 1.0)
    np.testing.assert_array_equal(starts, [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(counts, [[1, 0, 1], [1, 1, 0]])
    _, whole = binned_counts(arrivals, 1.0, whole_bins_only=True)
    assert whole.shape == (2, 2)


def test_an_arrival_exactly_at_the_end_counts_in_the_last_bin() -> None:
    # A trace's duration is its last arrival: at 10.0 s with 1-s bins it fell past the last
    # bin, so `inspect` reported 7 requests but per-second figures from 2.
    times = np.array([0.5, 1.5, 10.0, 10.0, 10.0, 10.0, 10.0])
    arrivals = Arrivals(times, np.zeros(7, dtype=np.int64), ("a",), 10.0)
    starts, counts = binned_counts(arrivals, 1.0)
    assert len(starts) == 10 and counts.sum() == 7 and counts[0, -1] == 5
    assert summarize(arrivals).max_per_s == 5
    assert binned_counts(arrivals, 1.0, whole_bins_only=True)[1].sum() == 7


def test_too_many_bins_is_an_error_instead_of_a_huge_allocation() -> None:
    # Unix-time offsets: 1-s bins over 54 years would be a 25 GiB array.
    arrivals = Arrivals(np.array([1.6e9]), np.array([0]), ("a",), 1.7e9)
    with pytest.raises(ConfigError, match=r"is 1\.7e\+09 bins, more than the 10,000,000"):
        binned_counts(arrivals, 1.0)
    _, counts = binned_counts(arrivals, 1e3)  # wide enough bins are fine
    assert counts.sum() == 1


def test_bursty_workload_scores_higher_than_poisson() -> None:
    def cv10(name: str) -> float:
        arrivals = generate(
            name, duration_s=1200.0, rate_per_s=50.0, task_names=("a",), rng=np.random.default_rng(1)
        )
        return summarize(arrivals).cv_10s

    assert cv10("pareto-onoff") > 5 * cv10("poisson")


def test_bundled_trace_figures_match_its_readme() -> None:
    s = summarize(bundled_azure_conv())
    assert s.requests == 19_366
    assert s.mean_rate_per_s == pytest.approx(5.5, abs=0.05)
    assert s.cv_10s == pytest.approx(0.27, abs=0.005)
    assert s.peak_to_mean_10s == pytest.approx(1.78, abs=0.005)
    assert s.max_per_s == 16


def test_empty_workload_has_undefined_burstiness_as_none_in_json() -> None:
    s = summarize(Arrivals(np.zeros(0), np.zeros(0, dtype=np.int64), ("a",), 30.0))
    assert s.requests == 0 and math.isnan(s.cv_1s)
    record = s.to_dict()
    assert record["cv_1s"] is None and record["peak_to_mean_10s"] is None
    assert record["task_counts"] == {"a": 0}


@pytest.mark.parametrize(("duration_s", "defined_10s"), [(19.9, False), (20.0, True)])
def test_burstiness_needs_two_full_bins(duration_s: float, defined_10s: bool) -> None:
    # One 10-s bin gave a CV of 0 and a peak/mean of 1, as if the trace were perfectly steady.
    arrivals = Arrivals(np.array([0.5, 1.5, 2.5]), np.zeros(3, dtype=np.int64), ("a",), duration_s)
    s = summarize(arrivals)
    assert not math.isnan(s.cv_1s)
    assert math.isnan(s.cv_10s) == math.isnan(s.peak_to_mean_10s) == (not defined_10s)
    short = summarize(Arrivals(np.array([0.5]), np.zeros(1, dtype=np.int64), ("a",), 1.9))
    assert math.isnan(short.cv_1s) and short.max_per_s == 1
