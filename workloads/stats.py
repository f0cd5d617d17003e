"""Summary statistics of a workload: volume, rate, task mix and burstiness."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from workloads._common import FloatArray, IntArray

__all__ = ["MAX_BINS", "MAX_SUMMARY_BINS", "WorkloadSummary", "binned_counts", "summarize"]

# Counts are held as a tasks x bins array; past this many bins the horizon is a mistake
# (timestamps instead of offsets) or the bins are far too narrow, and memory would run out.
MAX_BINS = 10_000_000
# `summarize` counts only the seconds that hold a request, so a long horizon costs it no memory;
# past this many (over 3 years, as the time_s reader's Unix-time check) the times are timestamps
# taken for offsets from the start, and the figures would describe nothing.
MAX_SUMMARY_BINS = 100_000_000


@dataclass(frozen=True)
class WorkloadSummary:
    """What `dartfl workload inspect` reports.

    Burstiness is measured on the counts in consecutive bins covering [0, duration_s) (the
    last one may be partial, as in the trace figures of shared/traces/README.md): the
    coefficient of variation (std / mean; Poisson at rate r gives 1 / sqrt(r x bin)) and the
    peak-to-mean ratio of the 10-s counts. Undefined values (no request, or fewer than two
    full bins of that width) are NaN.
    """

    requests: int
    duration_s: float
    mean_rate_per_s: float
    task_counts: tuple[tuple[str, int], ...]
    cv_1s: float
    cv_10s: float
    peak_to_mean_10s: float
    max_per_s: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN becomes None)."""

        def clean(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "requests": self.requests,
            "duration_s": self.duration_s,
            "mean_rate_per_s": self.mean_rate_per_s,
            "task_counts": dict(self.task_counts),
            "cv_1s": clean(self.cv_1s),
            "cv_10s": clean(self.cv_10s),
            "peak_to_mean_10s": clean(self.peak_to_mean_10s),
            "max_per_s": self.max_per_s,
        }


def binned_counts(
    arrivals: Arrivals, bin_s: float, *, whole_bins_only: bool = False
) -> tuple[FloatArray, IntArray]:
    """(bin start times, counts[task, bin]) over [0, duration_s] in bins of bin_s seconds.

    The last bin may be partial unless whole_bins_only, which drops it. An arrival exactly at
    duration_s (a trace's duration is its last arrival) counts in the bin that ends there.
    """
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ConfigError(f"bin width must be a finite number of seconds > 0, got {bin_s!r}")
    span = arrivals.duration_s / bin_s
    if span > MAX_BINS:
        raise ConfigError(
            f"{arrivals.duration_s:g} s in {bin_s:g}-s bins is {span:.3g} bins, more than the "
            f"{MAX_BINS:,} this tool counts; check the times are seconds from the start, or use wider bins"
        )
    bins = math.floor(span) if whole_bins_only else max(1, math.ceil(span))
    index = np.floor(arrivals.times_s / bin_s).astype(np.int64)
    at_end = arrivals.times_s >= arrivals.duration_s
    index[at_end] = max(0, math.ceil(span) - 1)
    keep = index < bins
    flat = arrivals.tasks[keep] * bins + index[keep]
    counts = np.bincount(flat, minlength=arrivals.num_tasks * bins).reshape(arrivals.num_tasks, bins)
    return np.arange(bins, dtype=np.float64) * bin_s, counts.astype(np.int64)


def summarize(arrivals: Arrivals) -> WorkloadSummary:
    """Counts, rate, per-task counts and burstiness of a workload, for a horizon of any length:
    only the bins that hold a request are counted (unlike `binned_counts`, no array of every bin)."""
    _check_horizon(arrivals)
    per_s, seconds = _occupied_bins(arrivals, 1.0)
    per_10s, tens = _occupied_bins(arrivals, 10.0)
    cv_1s, _ = _burstiness(per_s, seconds, arrivals.duration_s >= 2.0)
    cv_10s, peak_to_mean_10s = _burstiness(per_10s, tens, arrivals.duration_s >= 20.0)
    return WorkloadSummary(
        requests=arrivals.num_requests,
        duration_s=float(arrivals.duration_s),
        mean_rate_per_s=arrivals.mean_rate_per_s(),
        task_counts=tuple(zip(arrivals.task_names, arrivals.counts_per_task().tolist(), strict=True)),
        cv_1s=cv_1s,
        cv_10s=cv_10s,
        peak_to_mean_10s=peak_to_mean_10s,
        max_per_s=int(per_s.max()) if per_s.size else 0,
    )


def _check_horizon(arrivals: Arrivals) -> None:
    if arrivals.duration_s > MAX_SUMMARY_BINS:
        raise ConfigError(
            f"{arrivals.duration_s:g} s in 1-s bins is {arrivals.duration_s:.3g} bins, more than the "
            f"{MAX_SUMMARY_BINS:,} (over 3 years) this tool summarizes; check the times are seconds "
            "from the start"
        )


def _occupied_bins(arrivals: Arrivals, bin_s: float) -> tuple[IntArray, int]:
    """(the counts of the bins holding a request, the number of bins), binned as `binned_counts`
    bins: over [0, duration_s], the last bin possibly partial and holding an arrival at its end.
    Bin indices stay floats: a horizon past 2**63 bins is no integer array."""
    bins = max(1, math.ceil(arrivals.duration_s / bin_s))
    index = np.minimum(np.floor(arrivals.times_s / bin_s), bins - 1)
    _, counts = np.unique(index, return_counts=True)
    return counts.astype(np.int64), bins


def _burstiness(counts: IntArray, bins: int, two_full_bins: bool) -> tuple[float, float]:
    """(CV, peak/mean) of the counts per bin, where `counts` are those of the occupied bins out of
    `bins` (the rest count 0); NaN without requests or without two full bins: one bin has no
    spread, and its CV of 0 and peak/mean of 1 would pass for a steady trace."""
    mean = float(counts.sum()) / bins
    if not (two_full_bins and mean > 0):
        return math.nan, math.nan
    # Two-pass variance, the empty bins each contributing mean**2.
    squares = float(np.sum((counts - mean) ** 2)) + (bins - counts.size) * mean**2
    return math.sqrt(squares / bins) / mean, float(counts.max()) / mean
