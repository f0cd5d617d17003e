"""What a device's policy observes at a tick: its `Observation`, read from the executor's parts.

The queues give the backlog, the oldest ages and the SLOs; the period's counts the arrivals and
misses since the last tick (the split's misses only where the device can split); the rate
estimates the arrival rates; the cost model its current prices (the split's too, where the
device can split); the round clock the FL round's window, target and progress; the lanes the
split in force. The simulator and the agent observe through the same parts, so a policy sees
the same things on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dartfl.estimators import EwmaRates
from dartfl.executor.costs import CostModel
from dartfl.executor.lanes import CoreLanes
from dartfl.executor.periods import PeriodCounts
from dartfl.executor.queues import TaskQueues
from dartfl.executor.rounds import RoundClock
from dartfl.types import DeviceProfile, Observation

__all__ = ["Observer"]


@dataclass(frozen=True, slots=True)
class Observer:
    """Builds a device's Observation from the parts of its executor that hold it."""

    queues: TaskQueues[Any]
    counts: PeriodCounts
    rates: EwmaRates
    rounds: RoundClock
    profile: DeviceProfile
    lanes: CoreLanes | None  # None: the device is never split

    def observe(self, now_s: float, period_s: float, costs: CostModel) -> Observation:
        """The Observation at `now_s` of a control period of `period_s`, at `costs`."""
        queues, rounds, counts, lanes = self.queues, self.rounds, self.counts, self.lanes
        return Observation(
            now_s=now_s,
            period_s=period_s,
            backlog=queues.lengths(),
            oldest_age_s=queues.oldest_age_s(now_s),
            arrivals_since_last=tuple(counts.arrivals),
            slo_misses_since_last=tuple(counts.misses),
            training_misses_since_last=tuple(counts.training_misses),
            split_misses_since_last=tuple(counts.split_misses) if lanes is not None else (),
            arrival_rate_per_s=self.rates.rates_per_s,
            slo_s=queues.slo_s,
            batch_fixed_s=costs.batch_fixed_s,
            per_request_s=costs.per_request_s,
            max_batch=self.profile.max_batch,
            microbatch_fixed_s=costs.microbatch_fixed_s,
            per_sample_s=costs.per_sample_s,
            max_microbatch=self.profile.training.max_microbatch,
            round_start_s=rounds.start_s,
            round_deadline_s=rounds.deadline_s,
            round_target_samples=rounds.target,
            round_trained_samples=rounds.trained,
            inference_cores=lanes.target if lanes is not None else 1,
            split=costs.split if lanes is not None else None,
        )
