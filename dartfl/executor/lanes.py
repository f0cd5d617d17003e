"""The cores of a device split into two lanes, and the rule that moves cores between them.

The serving lane holds k cores, the training lane N - k; k = N is time sharing (the serving
lane holds every core and the training lane none). A change of k happens only at work-item
boundaries, because items are not preemptible: a lane that is to shrink gives its cores up
when it next falls free; a lane that is to grow takes them when it next falls free *and* the
other lane has let them go. Cores between the two are idle. Either move is a `CoreSwitch`
the driver runs (thread pools resized), so its cost is paid by the lane that moves.

The lanes also keep each lane's compute time, so that the executor can tell how long a
finished item overlapped with the other lane (interference: docs/profiles.md, "Cores").
"""

from __future__ import annotations

from collections.abc import Sequence

from dartfl.executor.costs import CostModel
from dartfl.types import CoreCosts

__all__ = ["CoreLanes", "ServingLanePrices", "ServingPrices", "serving_prices", "step_prices"]

# A serving lane's prices: per task (batch-fixed, per-request), then a step's (fixed, per sample).
ServingPrices = tuple[tuple[float, ...], tuple[float, ...], float, float]


def step_prices(split: CoreCosts, cores: int, slowdown: float) -> tuple[float, float]:
    """A training step's (fixed, per-sample) cost on `cores` cores while the other lane
    computes: the one-core costs over the speedup, times the interference `slowdown`."""
    s_t = slowdown / split.training_speedup[cores - 1]
    return split.microbatch_fixed_s * s_t, split.per_sample_s * s_t


def serving_prices(split: CoreCosts, cores: int, slowdown: tuple[float, float]) -> ServingPrices:
    """What items cost on a serving lane of `cores` cores beside a busy training lane: the
    one-core costs over the speedup, times the interference (`slowdown` per side)."""
    s_i = slowdown[0] / split.inference_speedup[cores - 1]
    return (
        tuple(a * s_i for a in split.batch_fixed_s),
        tuple(c * s_i for c in split.per_request_s),
        *step_prices(split, cores, slowdown[1]),
    )


class CoreLanes:
    """Cores held per lane (0: serving, 1: training), the split asked for, and busy times."""

    __slots__ = ("_other_at_start", "busy_done_s", "busy_since_s", "held", "target", "total")

    def __init__(self, cores: int) -> None:
        self.total = cores
        self.held = [cores, 0]  # a device starts time-shared, as one that never splits stays
        self.target = cores  # inference cores asked for
        self.busy_since_s = [-1.0, -1.0]  # start of the compute item running on a lane (-1: none)
        self.busy_done_s = [0.0, 0.0]  # compute seconds of each lane's finished items
        self._other_at_start = [0.0, 0.0]

    def want(self, inference_cores: int) -> None:
        self.target = min(max(1, inference_cores), self.total)

    def goal(self, lane: int) -> int:
        return self.target if lane == 0 else self.total - self.target

    def move(self, lane: int) -> int | None:
        """The core count `lane`, at a boundary now, moves to (None: it keeps its cores)."""
        goal, held = self.goal(lane), self.held[lane]
        if goal < held:
            return goal
        if goal > held and self.total - self.held[0] - self.held[1] >= goal - held:
            return goal
        return None

    def busy_s(self, lane: int, now_s: float) -> float:
        since = self.busy_since_s[lane]
        return self.busy_done_s[lane] + (now_s - since if since >= 0.0 else 0.0)

    def started(self, lane: int, now_s: float) -> None:
        self.busy_since_s[lane] = now_s
        self._other_at_start[lane] = self.busy_s(1 - lane, now_s)

    def solo_s(self, lane: int, now_s: float, duration_s: float, slowdown: float) -> float:
        """The item on `lane` ended now after `duration_s`: its duration without the other
        lane's interference (while both computed, it ran `slowdown` times slower)."""
        overlap = min(duration_s, self.finished(lane, now_s))
        return duration_s - overlap + overlap / slowdown

    def finished(self, lane: int, now_s: float) -> float:
        """The item on `lane` ends now: the seconds the other lane computed during it."""
        since = self.busy_since_s[lane]
        if since < 0.0:  # handed out outside next_work (a drain): nothing is known of it
            return 0.0
        overlap = self.busy_s(1 - lane, now_s) - self._other_at_start[lane]
        self.busy_done_s[lane] += now_s - since
        self.busy_since_s[lane] = -1.0
        return max(0.0, overlap)


class ServingLanePrices:
    """What work on the serving lane costs now. Time-shared (or with no per-core costs known):
    the cost model's own prices, live as it learns. Split: `serving_prices` of the lane's
    cores, recomputed by `refresh` when the lane's cores move or at a tick."""

    __slots__ = ("slowdown", "split")

    def __init__(self, slowdown: tuple[float, float]) -> None:
        self.slowdown = slowdown  # (inference, training): an item's duration over its solo time
        self.split: ServingPrices | None = None  # None: not split, the cost model's prices

    def refresh(self, costs: CostModel, lanes: CoreLanes | None) -> None:
        split = costs.split if lanes is not None and lanes.held[0] < lanes.total else None
        if lanes is None or split is None:
            self.split = None
            return
        self.split = serving_prices(split, max(1, lanes.held[0]), self.slowdown)

    def inference(self, costs: CostModel) -> tuple[Sequence[float], Sequence[float]]:
        """Per task: a batch's fixed cost and its cost per request."""
        if self.split is not None:
            return self.split[0], self.split[1]
        return costs.batch_fixed_s, costs.per_request_s

    def step(self, costs: CostModel) -> tuple[float, float]:
        """A training step's fixed cost and its cost per sample."""
        if self.split is not None:
            return self.split[2], self.split[3]
        return costs.microbatch_fixed_s, costs.per_sample_s
