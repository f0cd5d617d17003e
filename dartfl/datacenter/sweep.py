"""Find the best static split for a workload, so DART is compared with what a user could tune."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dartfl.datacenter.lengths import LengthModel
from dartfl.datacenter.policies import StaticSplit, split_gpus
from dartfl.datacenter.simulator import DcRun, simulate
from dartfl.datacenter.types import DcConfig

__all__ = ["DEFAULT_FRACTIONS", "sweep_static"]

DEFAULT_FRACTIONS: tuple[float, ...] = tuple(round(0.1 + 0.05 * i, 2) for i in range(17))  # 0.10..0.90


def sweep_static(
    config: DcConfig, lengths: LengthModel, seed: int, fractions: Sequence[float] = DEFAULT_FRACTIONS
) -> tuple[DcRun, list[tuple[float, float]]]:
    """Simulate each distinct static split (same seed); return the best run and (fraction, samples/s)."""
    m = config.model
    seen: set[int] = set()
    best: DcRun | None = None
    curve: list[tuple[float, float]] = []
    for f in fractions:
        gpus = split_gpus(f, config.gpus, m.tp, m.train_min_gpus)
        if gpus in seen:
            continue
        seen.add(gpus)
        run = simulate(config, StaticSplit(f), lengths, np.random.default_rng(seed))
        rate = run.trained_samples / run.makespan_s
        curve.append((f, rate))
        if best is None or rate > best.trained_samples / best.makespan_s:
            best = run
    if best is None:
        raise ValueError("no static fraction to sweep")  # pragma: no cover - fractions is non-empty
    return best, curve
