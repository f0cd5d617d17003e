"""Choosing an integer split of identical units between two sides, under a switch cost.

The datacenter mode splits GPUs between rollout and training; an edge device can split its
cores between serving and training. Both pick `k`, the units on one side, from a set of
allowed values (multiples of a tensor-parallel size, 1..N-1, 0..N), knowing the value per
second each split would give, that a moved unit is dead for a while, and that measurements
are noisy. This module is that decision, written once (docs/datacenter.md, "The shared split
decision", derives it):

1. Target: the allowed split of highest value, clipped to at most `max_step` units from the
   current split (a long move is made in steps, each judged on fresh measurements).
2. Gain: value(target) - value(current), per second.
3. Cost: each moved unit is dead for `dead_up_s` (k grows) or `dead_down_s` (k shrinks)
   seconds; a unit is worth `scale / units` per second, so the move loses
   `moved * dead_s * scale / units` value.
4. Move only if the gain clears the hysteresis band (`hysteresis * scale`) and repays the
   loss within `hold_s` seconds: gain * hold_s > loss.

`scale` is the value rate the band and the dead time are measured against (a throughput):
the caller says which one, so a score that mixes throughput with a queue's drift (DART's
drift-plus-penalty) is still priced in throughput. `choose_split_small` is the same decision
over plain sequences, for the few splits of an edge device's cores decided every period
(docs/allocator.md, "Splitting the cores").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.errors import ConfigError

__all__ = ["SplitDecision", "SplitRule", "choose_split", "choose_split_small"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SplitRule:
    """How reluctant a split is to move. Times in seconds.

    `dead_up_s` / `dead_down_s`: dead time of one unit moving so that k grows / shrinks (verl
    measured 9.1 s into rollout and 3.3 s back for a 5B model); `hold_s`: the horizon a move
    must repay its dead time in; `hysteresis`: the least gain worth a move, as a share of
    `scale`; `max_step`: the most units one decision moves (0: no limit).
    """

    dead_up_s: float
    dead_down_s: float
    hold_s: float
    hysteresis: float
    max_step: int = 0

    def __post_init__(self) -> None:
        for name in ("dead_up_s", "dead_down_s", "hold_s", "hysteresis"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"split rule {name} must be a finite number >= 0, got {value!r}")
        if not (isinstance(self.max_step, int) and self.max_step >= 0):
            raise ConfigError(
                f"split rule max_step must be an integer >= 0 (0: no limit), got {self.max_step!r}"
            )


@dataclass(frozen=True, slots=True)
class SplitDecision:
    """The split chosen, and why: the gain per second and the value a move's dead time loses."""

    split: int
    target: int  # where the value points (after the step limit), moved to or not
    gain: float
    dead_loss: float


def choose_split(
    allowed: npt.ArrayLike,
    current: int,
    value: Callable[[IntArray], npt.ArrayLike] | npt.ArrayLike,
    *,
    units: int,
    scale: float,
    rule: SplitRule,
    band_scale: float | None = None,
) -> SplitDecision:
    """The split for the next period (semantics in the module docstring).

    `allowed`: the feasible values of k, ascending; `current`: the split now (it need not be
    allowed, e.g. while a side is below its minimum: it is then priced at the nearest allowed
    value); `value`: the value per second of each allowed split, or a function that returns
    it for the array of allowed splits; `units`: the units in all (prices a unit's dead time);
    `scale`: the value rate the hysteresis band and the dead time are measured against;
    `band_scale`, if given, measures the band instead (a value whose stakes are more than
    the units' throughput, as misses priced in samples, while a dead unit loses only that).
    """
    ks = np.asarray(allowed, dtype=np.int64)
    if ks.ndim != 1 or ks.size == 0 or np.any(np.diff(ks) <= 0):
        raise ConfigError(f"allowed splits must be a non-empty ascending sequence, got {ks.tolist()}")
    if units < 1:
        raise ConfigError(f"units must be >= 1, got {units}")
    values = np.asarray(value(ks) if callable(value) else value, dtype=np.float64)
    if values.shape != ks.shape:
        raise ConfigError(f"one value per allowed split expected: {ks.size} splits, {values.shape} values")
    # 1. Target: the best split, at most max_step units away.
    best = int(ks[int(np.argmax(values))])
    target = _step_limited(best, current, rule)
    here, there = _index(ks, current), _index(ks, target)
    gain = float(values[there] - values[here])
    return _decide(int(ks[there]), current, gain, units, scale, rule, band_scale)


def choose_split_small(
    allowed: Sequence[int],
    current: int,
    values: Sequence[float],
    *,
    units: int,
    scale: float,
    rule: SplitRule,
    band_scale: float | None = None,
) -> SplitDecision:
    """`choose_split` for a few splits given as plain sequences (an edge device's cores,
    decided every control period): the same decision, without numpy's per-call overhead.
    The caller passes ascending splits and one value each."""
    if units < 1 or len(allowed) != len(values) or not allowed:
        raise ConfigError(
            f"one value per allowed split expected: {len(allowed)} splits, {len(values)} values"
        )
    best_at = 0
    for i in range(1, len(values)):
        if values[i] > values[best_at]:  # the first maximum, as np.argmax
            best_at = i
    target = _step_limited(allowed[best_at], current, rule)
    here, there = _nearest(allowed, current), _nearest(allowed, target)
    return _decide(allowed[there], current, values[there] - values[here], units, scale, rule, band_scale)


def _step_limited(best: int, current: int, rule: SplitRule) -> int:
    if rule.max_step:
        return min(max(best, current - rule.max_step), current + rule.max_step)
    return best


def _decide(
    target: int,
    current: int,
    gain: float,
    units: int,
    scale: float,
    rule: SplitRule,
    band_scale: float | None,
) -> SplitDecision:
    # 2-3. Gain per second against the value the dead units lose.
    moved = abs(target - current)
    dead_s = rule.dead_up_s if target > current else rule.dead_down_s
    dead_loss = moved * dead_s * max(scale, 0.0) / units
    # 4. The hysteresis band and the repayment horizon.
    band = rule.hysteresis * max(scale if band_scale is None else band_scale, 1e-12)
    if target == current or gain <= band or gain * rule.hold_s <= dead_loss:
        return SplitDecision(current, target, gain, dead_loss)
    return SplitDecision(target, target, gain, dead_loss)


def _index(ks: IntArray, k: int) -> int:
    """Index of the allowed split nearest to k (ties to the lower one)."""
    return int(np.argmin(np.abs(ks - k)))


def _nearest(ks: Sequence[int], k: int) -> int:
    """`_index` for a plain sequence."""
    best = 0
    for i in range(1, len(ks)):
        if abs(ks[i] - k) < abs(ks[best] - k):
            best = i
    return best
