"""Hold a small batch back for a moment when requests come fast, so they share a batch.

At width 1 a batch costs the agent's executor thread far more than its requests' share of the
model: under traffic on the 2-core VM, 0.2-0.8 ms a batch against 0.3-0.6 ms a request
(docs/profiles.md, "The request path"). An executor that takes each request as it comes
serves batches of one, pays that fixed cost every time, and takes the interpreter from the
network thread, which then falls behind and lets requests queue in the broker. So when fewer
than HOLD_BATCH requests wait and the oldest has waited less than the hold (10 ms, or 10% of
the SLO when that is less), and requests come at least one per hold, the executor waits out
the rest of the hold first. A request waits at most one hold longer (once a hold ends, what
waited through it is served without another, whichever task's batch it is in), and on a
device with fewer requests nothing is held. The agent's ingress also wakes the executor only when a queue
becomes non-empty or the batch is full enough, not for every request: each wake-up is a
hand-over of the interpreter.

A hold is for a model that is quick next to it. When a full batch's model time would
exceed the hold (width 24: 8-12 ms a request on the 2-core VM), there is little per-batch
work to share and the hold would only delay; the agent then takes work at once.

A hold costs latency, not capacity: the executor serves everything that waits once the hold
is over, so batches grow with the load and a device that keeps up without holds keeps up with
them. At 2 ms (at most 8 a batch) an agent at width 1 spent 325 us of CPU a request at
2,500/s and could not keep up with 3,500/s; at 10 ms (up to 32) it spends 265 us and 237 us,
and keeps 3,500/s under a 100 ms SLO (benchmarks/request_path.py, docs/benchmarks.md).

The rule lives in the executor so that both drivers apply the same one: the agent always
(`ExecutorConfig.batch_hold_s`), the simulator when asked to predict an agent
(`SimConfig.batch_hold`, `dartfl sim --batch-hold`). Without it the simulator takes work at
once, as it always did, and at width 1 predicts a median latency of about 1 ms where the agent
answers in 10 (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["HOLD_BATCH", "HOLD_S", "HOLD_SLO_FRACTION", "BatchHold", "batch_hold_s", "wakes_executor"]

HOLD_S: Final = 0.010
HOLD_SLO_FRACTION: Final = 0.1  # and never more than this much of the SLO
HOLD_BATCH: Final = 32  # this many waiting (a full batch on the built-in profiles): serve now
_ENDED_S: Final = 1e-9  # a hold that ends within float rounding of now has ended (event times)


def batch_hold_s(slo_s: float, model_per_request_s: float = 0.0, period_s: float = math.inf) -> float:
    """The hold of a device whose tightest SLO is `slo_s` and whose model takes
    `model_per_request_s` a request (the dearest task's, without the request path), never
    longer than its control period `period_s` (ExecutorConfig refuses a longer hold)."""
    hold_s = min(HOLD_S, HOLD_SLO_FRACTION * slo_s, period_s)
    if model_per_request_s * HOLD_BATCH > hold_s:
        return 0.0  # a full batch's model time outlasts the hold: nothing to share
    return hold_s


def wakes_executor(waiting: int) -> bool:
    """Whether a request that just queued, leaving `waiting` in all, should wake a waiting
    executor: when a queue starts, or a batch is full enough to end the hold."""
    return waiting == 1 or waiting == HOLD_BATCH


class BatchHold:
    """When the executor should wait before taking a batch. The hold runs from when the
    executor first finds requests waiting, not from their arrival: a request that queued in
    the broker is old on arrival (edge_client/transit.py), and its batch still wants company.
    A request is held once: what already waited when a hold ended is served without another,
    though it comes out in a later batch (another task's, or past the batch size)."""

    __slots__ = ("_ended_s", "_since_s", "hold_s")

    def __init__(self, hold_s: float) -> None:
        """`hold_s`: the longest wait (`batch_hold_s`); 0 never holds."""
        self.hold_s = hold_s
        self._since_s: float | None = None  # when the executor found the current few waiting
        self._ended_s = -math.inf  # when the last hold ended

    def wait_for_s(self, waiting: int, oldest_arrival_s: float, now_s: float, rate_per_s: float) -> float:
        """How much longer to wait (0: take work now) with `waiting` requests queued, the oldest
        of them since `oldest_arrival_s`, and requests arriving at `rate_per_s`. Below one
        arrival per hold, nobody would join the batch: no hold."""
        if (
            waiting == 0
            or waiting >= HOLD_BATCH
            or rate_per_s * self.hold_s < 1.0
            or oldest_arrival_s <= self._ended_s  # it was held already
        ):
            self._since_s = None
            return 0.0
        if self._since_s is None:
            self._since_s = now_s
        left = self._since_s + self.hold_s - now_s
        if left <= _ENDED_S:
            self._since_s = None  # held long enough: take them, and hold the next few anew
            self._ended_s = now_s
            return 0.0
        return left
