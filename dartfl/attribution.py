"""Which misses training caused: the training delay of a request's busy period.

An executor runs inference and training on one resource. A request is served later than
under `inference-only` by at most the training time that ran, while requests waited, in its
busy period (since the device last fell free with an empty queue): before its busy period the
device was idle in both worlds, and inside it every second of inference serves work that
inference-only has to serve before the request too. So a late request whose latency minus that
delay is within its SLO is a miss training caused, and one late by more would have missed
anyway (docs/allocator.md, "What counts as a training-caused miss").

A request the executor refuses because it could not make its deadline (deadline-aware
admission) is training-caused the same way: when the earliest finish it was refused on, less
the training delay it would have waited behind (the running step included), is within its SLO.

On a device split into a serving lane and a training lane, a step on the training lane holds
no request back and adds nothing here. The split itself does: the serving lane runs a batch on
fewer cores (and slowed by the training lane's interference) than inference-only, which has
every core, so the time the whole device would have saved on each batch counts as training
delay for its busy period, its own requests included; and a refusal counts the difference
between its earliest finish on the lane and on the whole device.

On a real device a request can also wait before the executor sees it: in the broker and the
socket buffers, while the agent's network thread is short of CPU (edge_client/transit.py
measures that wait). Training competes for that CPU, on any lane, so a refusal also counts the
training time that ran during the request's transit (`TrainingTimeline.seconds_since`), up to
the transit wait itself: without that term the closed loop never sees the requests a step
starved on their way in, and keeps training while the broker's queue grows (issue 13). Only
training since the request path last came up counts (`MissCauses.request_path_up_since_s`):
a request that waited out a broker outage waited for the broker, not for the CPU.

The trackers are plain floats, updated at a few points of the executor's loop
(dartfl/executor/device.py), which the simulator and the agent share.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

__all__ = ["STEPS_REMEMBERED", "BusyPeriodDelay", "TrainingTimeline", "is_training_miss"]

# Training steps a timeline remembers: at a few milliseconds a step, seconds of history, more
# than the SLO-sized transit waits it is asked about. An older wait is priced by what is left.
STEPS_REMEMBERED: Final = 1024


class BusyPeriodDelay:
    """Training seconds that ran while requests waited, in the current busy period.

    `delay_s` bounds how much later than inference-only a request that starts service now is
    served; `cause_s` is when the latest step that added to it started (NaN: none).
    """

    __slots__ = ("_waiting_since_s", "cause_s", "charged", "delay_s", "split_s")

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.cause_s = math.nan
        self.charged = 0  # misses counted against this busy period's training so far
        self.split_s = 0.0  # the part of `delay_s` a core split added (`lane_slowed`)
        self._waiting_since_s = math.inf

    def request_queued(self, now_s: float) -> None:
        """A request joined a queue: from now on, training delays someone."""
        if self._waiting_since_s == math.inf:
            self._waiting_since_s = now_s

    def step_ended(self, now_s: float, step_start_s: float) -> None:
        """A training step ran from `step_start_s` to now; the part with requests waiting counts."""
        since = max(step_start_s, self._waiting_since_s)
        if since < now_s:
            self.delay_s += now_s - since
            self.cause_s = step_start_s

    def lane_slowed(self, now_s: float, extra_s: float) -> None:
        """A batch starting now on a split serving lane runs `extra_s` longer than on the whole
        device: everyone waiting in this busy period, the batch included, is that much later."""
        if extra_s > 0.0:
            self.delay_s += extra_s
            self.split_s += extra_s
            self.cause_s = now_s

    def delay_behind_step_s(self, now_s: float, step_start_s: float, step_end_s: float) -> float:
        """The delay of a request queued now behind a step running from `step_start_s` to
        `step_end_s`: the busy period's delay so far plus that step's part with requests waiting."""
        since = max(step_start_s, min(self._waiting_since_s, now_s))
        return self.delay_s + max(0.0, step_end_s - since)

    def charge(self, delay_s: float, catch_up_per_s: float) -> bool:
        """Count one more miss against a training delay of `delay_s` in this busy period, if
        the delay can account for it: inference-only, with that much more device time, could
        have served at most `delay_s x catch_up_per_s` more requests (rounded up)."""
        if self.charged < delay_s * catch_up_per_s - 1e-9:  # not one more for a rounding error
            self.charged += 1
            return True
        return False

    def device_free_and_empty(self) -> None:
        """The device fell free with no request waiting: the busy period is over."""
        self.delay_s = 0.0
        self.cause_s = math.nan
        self.charged = 0
        self.split_s = 0.0
        self._waiting_since_s = math.inf


class TrainingTimeline:
    """When training ran lately, on any lane: the latest steps' (end, duration)."""

    __slots__ = ("_steps",)

    def __init__(self, capacity: int = STEPS_REMEMBERED) -> None:
        self._steps: deque[tuple[float, float]] = deque(maxlen=capacity)

    def step_ended(self, now_s: float, duration_s: float) -> None:
        self._steps.append((now_s, duration_s))

    def seconds_since(self, since_s: float, now_s: float, running_since_s: tuple[float, ...] = ()) -> float:
        """Training seconds in [since_s, now_s]: the remembered steps' parts in it plus those of
        the steps running now (their start times). Lanes that train at once add up, and the
        sum is capped at the window's length: one cause cannot delay a request by more."""
        total = 0.0
        for end_s, duration_s in reversed(self._steps):  # newest first: stop at the window's start
            if end_s <= since_s:
                break
            total += min(duration_s, end_s - since_s)
        for start_s in running_since_s:
            total += max(0.0, now_s - max(start_s, since_s))
        return min(total, max(0.0, now_s - since_s))


def is_training_miss(latency_s: float, slo_s: float, delay_s: float) -> bool:
    """Late, but within the SLO once the training delay of its busy period is taken away."""
    return latency_s > slo_s and delay_s > 0.0 and latency_s - delay_s <= slo_s
