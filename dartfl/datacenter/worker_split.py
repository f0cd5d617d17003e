"""DART's split decision for a pool of identical workers (the Ray engine), from rates the
workers themselves measure. Pure (numpy): the Ray adapter (ray_engine/) feeds it measurements.

The score is the same drift-plus-penalty J(R) as the simulator's DART
(`dartfl.datacenter.policies.dart.drift_plus_penalty`); what differs is where the rates come
from. Here each rate is a per-worker property measured on the running engine:

- rollout: wall seconds per decode step of one rollout worker (slice round trips included),
  the mean response length in decode steps and, for multi-turn episodes, the seconds a
  sequence waits for its environment, so R rollout workers holding n sequences each produce
  R * n / (length * step + wait) groups/s, with n the slots or the worker's share of what
  the staleness bound lets be in flight, whichever is smaller (a waiting sequence keeps its
  slot);
- training: seconds per trained token on one worker, tokens per trained group, and a
  per-step overhead (optimizer step, weight broadcast, shard imbalance), so T trainers
  finish a batch of B groups in B * group_tokens * token / T + overhead seconds. Tokens per
  trained group are measured apart from the rollout length because the staleness bound
  drops long groups more often than short ones (they finish late).

Per-worker rates stay valid across a switch, unlike a cluster-wide count divided by the
current number of workers in a role, and they measure capacity even while admission control
holds rollout back (an idle worker's wall time is not counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.datacenter.rates import drift_plus_penalty
from dartfl.errors import ConfigError
from dartfl.unit_split import SplitRule, choose_split

__all__ = ["MeasuredRates", "WorkerSplitController"]

FloatArray = npt.NDArray[np.float64]


@dataclass
class MeasuredRates:
    """Exponentially weighted averages of what the workers report."""

    decode_step_s: float  # one decode step of a rollout worker, as the driver sees it
    train_token_s: float  # one trained token on one worker
    mean_length: float  # decode steps (response tokens) per sample
    group_tokens: float = 0.0  # response tokens per trained group (0: not measured yet)
    train_overhead_s: float = 0.0  # per training step, beyond the shards' token work
    wait_s: float = 0.0  # seconds a sample waits for its environment (multi-turn episodes)
    weight: float = 0.2  # of a new slice or step observation
    length_weight: float = 0.02  # of one group's length: lengths are heavy-tailed, average ~50

    def __post_init__(self) -> None:
        for name in ("decode_step_s", "train_token_s", "mean_length"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"measured rate {name} must be a finite number > 0, got {value}")

    def _blend(self, old: float, new: float) -> float:
        return (1 - self.weight) * old + self.weight * new

    def observe_slice(
        self, steps: int, wall_s: float, lengths: list[int], waits_s: list[float] | None = None
    ) -> None:
        """A rollout slice: `steps` decode steps in `wall_s` (dispatch to result), and the
        lengths (and environment waits) of the groups it finished."""
        if steps > 0 and wall_s > 0:
            self.decode_step_s = self._blend(self.decode_step_s, wall_s / steps)
        for length in lengths:
            self.mean_length += self.length_weight * (length - self.mean_length)
        for wait in waits_s or ():
            self.wait_s += self.length_weight * (wait - self.wait_s)

    def observe_step(self, wall_s: float, shard_busy_s: list[float], tokens: int, groups: int) -> None:
        """A training step on `groups` groups of `tokens` response tokens: its wall time
        (dispatch to new weights) and its shards' work."""
        if tokens <= 0 or groups <= 0 or not shard_busy_s:
            return
        per_group = tokens / groups
        self.group_tokens = per_group if self.group_tokens <= 0 else self._blend(self.group_tokens, per_group)
        self.train_token_s = self._blend(self.train_token_s, sum(shard_busy_s) / tokens)
        overhead = max(0.0, wall_s - sum(shard_busy_s) / len(shard_busy_s))
        self.train_overhead_s = self._blend(self.train_overhead_s, overhead)

    def rollout_groups_per_s(self, rollout_workers: FloatArray, slots: int, inflight_cap: int) -> FloatArray:
        """Groups/s of R rollout workers, each holding min(slots, cap / R) sequences."""
        per_worker = np.minimum(float(slots), inflight_cap / np.maximum(rollout_workers, 1.0))
        rate: FloatArray = (
            rollout_workers * per_worker / (self.mean_length * self.decode_step_s + self.wait_s)
        )
        return rate

    def train_groups_per_s(self, train_workers: FloatArray, batch_groups: int, group_size: int) -> FloatArray:
        """Groups/s of T data-parallel trainers."""
        per_group = self.group_tokens if self.group_tokens > 0 else group_size * self.mean_length
        tokens = batch_groups * per_group
        step_s = tokens * self.train_token_s / np.maximum(train_workers, 1.0) + self.train_overhead_s
        rate: FloatArray = batch_groups / step_s
        return rate


@dataclass(frozen=True)
class WorkerSplitController:
    """Chooses how many of `workers` roll out; the rest train.

    A move shifts one worker and must clear two bars: a score gain above `hysteresis` of the
    predicted throughput (measurement noise on a shared machine is of that order), and a gain
    that repays the switch's dead time within `hold_s`. One worker at a time, because the
    next decision should see rates measured at the new layout.
    """

    workers: int
    batch_groups: int
    group_size: int
    eta: int
    slots: int
    switch_s: float
    kappa: float = 0.2
    hysteresis: float = 0.1
    hold_s: float = 5.0

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise ConfigError(f"the split needs >= 2 workers (one per role), got {self.workers}")

    def scores(self, rates: MeasuredRates, buffer_groups: float) -> tuple[FloatArray, FloatArray]:
        """(J, predicted throughput) for 1 .. workers-1 rollout workers."""
        rollout_workers = np.arange(1, self.workers, dtype=np.float64)
        # AReaL's rule bounds in flight + buffered + the batch in training by (eta + 1) B.
        # Where the trainer is the bottleneck a batch waits buffered, so (eta - 1) B may be in
        # flight however many workers roll out; where rollout is the bottleneck even with eta B
        # in flight, the trainer takes each batch as it lands and eta B may be. (In between,
        # the buffer saws below a batch and the trainer waits: counted at the lower bound.)
        batch = self.batch_groups
        train = rates.train_groups_per_s(self.workers - rollout_workers, batch, self.group_size)
        low = rates.rollout_groups_per_s(rollout_workers, self.slots, max(1, self.eta - 1) * batch)
        high = rates.rollout_groups_per_s(rollout_workers, self.slots, max(1, self.eta) * batch)
        rollout = np.where(high < train, high, low)
        score = drift_plus_penalty(rollout, train, buffer_groups, self.batch_groups, self.kappa)
        return score, np.minimum(rollout, train)

    def first_layout(self, rates: MeasuredRates) -> int:
        """Rollout workers at the start: the best predicted throughput (no backlog yet to
        steer by, so the drift term is left out by scoring a buffer of exactly one batch)."""
        score, _ = self.scores(rates, float(self.batch_groups))
        return int(np.argmax(score)) + 1

    def decide(self, rollout_workers: int, rates: MeasuredRates, buffer_groups: float) -> int:
        """The rollout worker count for the next period: the current one or one step away."""
        current = int(np.clip(rollout_workers, 1, self.workers - 1))
        score, throughput = self.scores(rates, buffer_groups)
        rule = SplitRule(self.switch_s, self.switch_s, self.hold_s, self.hysteresis, max_step=1)
        scale = max(float(throughput.max()), 1e-12)
        allowed = np.arange(1, self.workers, dtype=np.int64)
        return choose_split(allowed, current, score, units=self.workers, scale=scale, rule=rule).split
