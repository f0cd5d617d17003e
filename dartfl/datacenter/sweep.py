"""Find the best static split for a workload, so DART is compared with what a user could tune."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dartfl.datacenter.lengths import IntArray, LengthModel
from dartfl.datacenter.policies import DcPolicy, StaticSplit, split_gpus
from dartfl.datacenter.simulator import DcRun, simulate
from dartfl.datacenter.types import DcConfig
from dartfl.datacenter.workload import AgenticWorkload, Workload

__all__ = ["DEFAULT_FRACTIONS", "Headroom", "reallocation_headroom", "sweep_fractions", "sweep_static"]

DEFAULT_FRACTIONS: tuple[float, ...] = tuple(round(0.1 + 0.05 * i, 2) for i in range(17))  # 0.10..0.90


def sweep_static(
    config: DcConfig, lengths: Workload, seed: int, fractions: Sequence[float] = DEFAULT_FRACTIONS
) -> tuple[DcRun, list[tuple[float, float]]]:
    """Simulate each distinct static split (same seed); return the best run and (fraction, samples/s)."""
    return sweep_fractions(config, lengths, seed, StaticSplit, fractions)


def sweep_fractions(
    config: DcConfig,
    lengths: Workload,
    seed: int,
    make: Callable[[float], DcPolicy],
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> tuple[DcRun, list[tuple[float, float]]]:
    """The best run of a policy family over its rollout fraction (same seed), and the curve.

    `make(f)` builds the policy for fraction f: a static split, or verl-dynamic's dedicated
    pool, so a rival gets the best fraction a user could tune for it too.
    """
    m = config.model
    # One run per distinct split, named by the fraction nearest what it runs: on 4 GPUs 0.1,
    # 0.15, ..., 0.35 all run one GPU of four, which is static:0.25, not static:0.1.
    by_gpus: dict[int, float] = {}
    for f in fractions:
        gpus = split_gpus(f, config.gpus, m.tp, m.train_min_gpus)
        share = gpus / config.gpus
        if gpus not in by_gpus or abs(f - share) < abs(by_gpus[gpus] - share):
            by_gpus[gpus] = f
    best: DcRun | None = None
    curve: list[tuple[float, float]] = []
    for f in by_gpus.values():
        run = simulate(config, make(f), lengths, np.random.default_rng(seed))
        rate = run.trained_samples / run.makespan_s
        curve.append((f, rate))
        if best is None or rate > best.trained_samples / best.makespan_s:
            best = run
    if best is None:
        raise ValueError("no static fraction to sweep")  # pragma: no cover - fractions is non-empty
    return best, curve


def _phase(base: Workload, start: float, end: float) -> Workload:
    """One slice [start, end] of a drifting workload, replayed as a whole run."""
    if isinstance(base, AgenticWorkload):
        return replace(base, calls_start=base.mean_calls(start), calls_end=base.mean_calls(end))
    return _Phase(base, start, end)


class _Phase(LengthModel):
    """One slice [start, end] of a drifting length model, replayed as a whole run."""

    def __init__(self, base: LengthModel, start: float, end: float) -> None:
        self.base, self.start, self.end = base, start, end
        self.max_tokens = base.max_tokens

    def _progress(self, progress: float) -> float:
        return self.start + progress * (self.end - self.start)

    def draw(self, rng: np.random.Generator, groups: int, n: int, progress: float) -> IntArray:
        return self.base.draw(rng, groups, n, self._progress(progress))

    def median(self, progress: float) -> float:
        return self.base.median(self._progress(progress))


@dataclass(frozen=True)
class Headroom:
    """What any reallocation policy could gain over the best fixed split on a workload.

    The run is cut into phases; each phase is simulated under every static split. The oracle
    switches for free to each phase's best split; the best fixed split is the one with the
    least total time over all phases. `ratio` = fixed time / oracle time estimates the
    speed-up a policy that moves GPUs can get. It ignores switch costs, but it also adapts
    only once per phase (and each phase starts empty), so a policy that tracks the drift
    continuously can beat it by a little. A ratio of 1 with the same best split in every
    phase means there is nothing to track.
    """

    best_fixed: float
    phase_best: tuple[float, ...]
    fixed_s: float
    oracle_s: float

    @property
    def ratio(self) -> float:
        return self.fixed_s / self.oracle_s


def reallocation_headroom(
    config: DcConfig,
    lengths: Workload,
    seed: int,
    phases: int = 4,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> Headroom:
    """The oracle bound of `Headroom` for `config.steps` steps cut into `phases` phases."""
    if phases < 1 or config.steps < phases:
        raise ValueError(f"need 1 <= phases <= steps, got {phases} phases for {config.steps} steps")
    phase_config = replace(config, steps=config.steps // phases)
    m = config.model
    splits: dict[int, float] = {}
    for f in fractions:  # distinct GPU counts only: two fractions may round to one split
        splits.setdefault(split_gpus(f, config.gpus, m.tp, m.train_min_gpus), f)
    times = np.empty((len(splits), phases))
    for i in range(phases):
        phase = _phase(lengths, i / phases, (i + 1) / phases)
        for j, f in enumerate(splits.values()):
            run = simulate(phase_config, StaticSplit(f), phase, np.random.default_rng(seed + i))
            times[j, i] = run.makespan_s
    fixed = int(np.argmin(times.sum(axis=1)))
    chosen = list(splits.values())
    return Headroom(
        best_fixed=chosen[fixed],
        phase_best=tuple(chosen[int(j)] for j in np.argmin(times, axis=0)),
        fixed_s=float(times[fixed].sum()),
        oracle_s=float(times.min(axis=0).sum()),
    )
