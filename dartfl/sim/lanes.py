"""The simulated device's lanes in virtual time: the work item each lane runs, when it ends,
and how the two slow each other down while both compute.

An item's solo time is priced on the cores its lane holds (`DeviceProfile.lane_inference`,
`lane_training`). While both lanes compute, each item runs (1 + its interference) times slower
and its remaining work is rescaled whenever the other lane starts or stops; a `CoreSwitch`
takes the profile's switch time (none: it is done at once). The simulator's event loop
(dartfl/sim/device.py) asks `end_s` for the next item end and hands each lane back to the
executor through `finish` and `start`.
"""

from __future__ import annotations

import math

import numpy as np

from dartfl.executor import LANES, CoreSwitch, DeviceExecutor, InferenceBatch, TrainingStep
from dartfl.types import DeviceProfile

__all__ = ["SimLanes", "Work"]

Work = InferenceBatch[int] | TrainingStep | CoreSwitch


class SimLanes:
    """The device's lanes in virtual time: the item each runs, when it ends, and its
    interference with the other lane (docs/profiles.md, "Cores")."""

    def __init__(
        self,
        device: DeviceExecutor[int],
        profile: DeviceProfile,
        rng: np.random.Generator,
        *,
        exponential_service: bool,  # M/M/1-style checks: exponential inference service
    ) -> None:
        self.device = device
        self.exponential_service = exponential_service
        self.rng = rng
        self.split = device.lanes is not None
        model = profile.cores
        self.switch_s = model.switch_s
        self.slowdown = (1.0 + model.inference_interference, 1.0 + model.training_interference)
        # Prices by the cores a lane holds (index: cores; 0 unused), per task for inference.
        names = device.task_names
        per_cores = range(model.count + 1)
        self.inference = [[profile.lane_inference(t, max(1, c)) for t in names] for c in per_cores]
        self.training = [profile.lane_training(max(1, c)) for c in per_cores]
        self.end_s = [math.inf, math.inf]
        self.work: list[Work | None] = [None, None]
        self.duration_s = [0.0, 0.0]  # the item's solo time, or its elapsed time once stretched
        self.start_s = [0.0, 0.0]
        self.left_s = [0.0, 0.0]  # solo seconds of work left at `since_s`
        self.since_s = [0.0, 0.0]
        self.rate = [1.0, 1.0]  # solo seconds done per second: 1, or 1 / slowdown
        self.stretched = [False, False]
        self.computing = [False, False]
        self.last_step_end_s = -math.inf  # of the training lane

    def training_lane_wanted(self) -> bool:
        """The training lane holds cores, or the split asks it to (else it has nothing to do)."""
        split = self.device.lanes
        return split is not None and (split.held[1] > 0 or split.target < split.total)

    def start(self, lane: int, now: float) -> None:
        """Hand the free `lane` its next item (a zero-time switch is done at once)."""
        device = self.device
        work = device.next_work(now, LANES[lane])
        while isinstance(work, CoreSwitch) and self.switch_s == 0.0:
            device.switch_done(work, now, 0.0)
            work = device.next_work(now, LANES[lane])
        if work is None:
            return
        if isinstance(work, InferenceBatch):
            cost = self.inference[work.cores][work.task]
            duration = cost.batch_fixed_s + cost.per_request_s * len(work.requests)
            if self.exponential_service:
                duration = float(self.rng.exponential(duration))
        elif isinstance(work, TrainingStep):
            train = self.training[work.cores]
            duration = train.microbatch_fixed_s + train.per_sample_s * work.samples
        else:
            duration = self.switch_s
        self.work[lane] = work
        self.duration_s[lane] = duration
        self.start_s[lane] = now
        self.stretched[lane] = False
        computing = not isinstance(work, CoreSwitch)
        self.computing[lane] = computing
        if not (self.split and computing and self.computing[1 - lane]):
            self.rate[lane] = 1.0
            self.end_s[lane] = now + duration
            return
        # Both lanes compute now: this item runs slowed, and so does the other from now on.
        self.rate[lane] = 1.0 / self.slowdown[lane]
        self.left_s[lane], self.since_s[lane] = duration, now
        self.end_s[lane] = now + duration * self.slowdown[lane]
        self._rescale(1 - lane, now, 1.0 / self.slowdown[1 - lane])

    def finish(self, lane: int, now: float) -> tuple[Work | None, tuple[int, ...]]:
        """The item on `lane` ends now: hand it back to the executor. Returns it, with the
        positions of the requests in it that training made miss (a batch's)."""
        work, device = self.work[lane], self.device
        caused: tuple[int, ...] = ()
        duration = (
            now - self.start_s[lane]
            if self.stretched[lane] or self.rate[lane] != 1.0
            else self.duration_s[lane]
        )
        if isinstance(work, InferenceBatch):
            caused = device.batch_done(work, now, duration)
        elif isinstance(work, TrainingStep):
            device.step_done(work, now, duration)
            if lane == 1:
                self.last_step_end_s = now
        elif isinstance(work, CoreSwitch):
            device.switch_done(work, now, duration)
        was_computing = self.computing[lane]
        self.work[lane], self.end_s[lane], self.computing[lane] = None, math.inf, False
        if was_computing and self.computing[1 - lane]:
            self._rescale(1 - lane, now, 1.0)  # the other lane runs alone again
        return work, caused

    def _rescale(self, lane: int, now: float, rate: float) -> None:
        """`lane`'s running item goes on at `rate` solo seconds per second from `now`."""
        if self.rate[lane] == rate:
            return
        if self.rate[lane] == 1.0 and not self.stretched[lane]:
            self.left_s[lane] = self.duration_s[lane] - (now - self.start_s[lane])
        else:
            self.left_s[lane] -= (now - self.since_s[lane]) * self.rate[lane]
        self.since_s[lane], self.rate[lane], self.stretched[lane] = now, rate, True
        left = self.left_s[lane]
        self.end_s[lane] = now + left / rate if left > 1e-12 else now
