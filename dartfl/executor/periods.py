"""What a device counts over one control period, and the per-period series it may record.

`PeriodCounts` is what the policy's Observation reports as "since the last tick"; the
executor zeroes it at every tick. `PeriodSeries` keeps one row per tick when a run asks for
plots or burst-recovery figures (`ExecutorConfig.record_periods`).
"""

from __future__ import annotations

from dartfl.types import Allocation

__all__ = ["PERIOD_KEYS", "PeriodCounts", "PeriodSeries"]

# The series kept per control period when `record_periods` is set.
PERIOD_KEYS = ("t_s", "backlog", "inference_share", "microbatch", "max_batch", "trained", "inference_cores")


class PeriodCounts:
    """Per task, since the last tick: arrivals (refused ones too), SLO misses (refusals count),
    the misses training caused, and those a core split alone explains."""

    def __init__(self, tasks: int) -> None:
        self.arrivals = [0] * tasks
        self.misses = [0] * tasks
        self.training_misses = [0] * tasks
        self.split_misses = [0] * tasks

    def reset(self) -> None:
        k = len(self.arrivals)
        self.arrivals, self.misses, self.training_misses, self.split_misses = (
            [0] * k,
            [0] * k,
            [0] * k,
            [0] * k,
        )


class PeriodSeries:
    """One row per control period: `values[key]` for PERIOD_KEYS, and the task shares."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {key: [] for key in PERIOD_KEYS}
        self.shares: list[tuple[float, ...]] = []

    def record(self, now_s: float, backlog: int, alloc: Allocation, trained: int, cores: int) -> None:
        """A tick at `now_s`: the backlog, the allocation decided, the samples trained so far
        and the serving lane's cores."""
        rec = self.values
        rec["t_s"].append(now_s)
        rec["backlog"].append(backlog)
        rec["inference_share"].append(alloc.inference_share)
        rec["microbatch"].append(alloc.microbatch)
        rec["max_batch"].append(alloc.max_batch)
        rec["trained"].append(trained)
        rec["inference_cores"].append(cores)
        self.shares.append(alloc.task_shares)
