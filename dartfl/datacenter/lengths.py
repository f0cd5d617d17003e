"""Response lengths of rollouts: heavy-tailed, truncated at the maximum, drifting over training.

A prompt's n samples share a prompt-level factor (hard prompts get long answers from every
sample), so a GRPO group's length is the maximum of correlated draws. `progress` runs from 0
(first training step) to 1 (last); the median grows smoothly by `drift` over that span.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dartfl.errors import ConfigError

__all__ = ["LengthModel", "LogNormalLengths", "TraceLengths"]

IntArray = npt.NDArray[np.int64]


class LengthModel:
    """Draws a (groups, n) array of response lengths at a training progress in [0, 1]."""

    max_tokens: int = 1

    def draw(self, rng: np.random.Generator, groups: int, n: int, progress: float) -> IntArray:
        raise NotImplementedError

    def median(self, progress: float) -> float:
        raise NotImplementedError


def _check_max_tokens(max_tokens: int) -> None:
    if not (isinstance(max_tokens, int) and max_tokens >= 1):
        raise ConfigError(f"--max-tokens must be an integer >= 1, got {max_tokens!r}")


def _drift_factor(drift: float, progress: float) -> float:
    return float(drift ** min(1.0, max(0.0, progress)))


@dataclass(frozen=True)
class LogNormalLengths(LengthModel):
    """Log-normal lengths: sigma 0.99 gives p99/median = 10 before truncation.

    The log-variance splits between the prompt (`group_share`) and the sample.
    """

    median_tokens: float = 1024.0
    sigma: float = 0.99
    max_tokens: int = 8192
    drift: float = 1.0
    group_share: float = 0.4

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median_tokens) and self.median_tokens >= 1):
            # :g, as the flag was typed: argparse reads "0" as 0.0
            raise ConfigError(f"--median-tokens must be a number >= 1, got {self.median_tokens:g}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ConfigError(f"length sigma must be >= 0, got {self.sigma}")
        _check_max_tokens(self.max_tokens)
        if not (math.isfinite(self.drift) and self.drift > 0):
            raise ConfigError(f"--length-drift must be a number > 0 (1 = no drift), got {self.drift}")
        if not 0.0 <= self.group_share <= 1.0:
            raise ConfigError(
                f"group share of the length variance must lie in [0, 1], got {self.group_share}"
            )

    def median(self, progress: float) -> float:
        return min(float(self.max_tokens), self.median_tokens * _drift_factor(self.drift, progress))

    def draw(self, rng: np.random.Generator, groups: int, n: int, progress: float) -> IntArray:
        mu = math.log(self.median_tokens * _drift_factor(self.drift, progress))
        s_group = self.sigma * math.sqrt(self.group_share)
        s_sample = self.sigma * math.sqrt(1.0 - self.group_share)
        z = rng.standard_normal((groups, 1)) * s_group + rng.standard_normal((groups, n)) * s_sample
        lengths = np.exp(mu + z)
        return np.clip(np.rint(lengths), 1, self.max_tokens).astype(np.int64)


@dataclass(frozen=True)
class TraceLengths(LengthModel):
    """Lengths resampled from a trace (e.g. the Azure trace's GeneratedTokens), then drifted.

    Each group draws one trace row per sample around a shared prompt-level row, so samples of
    a prompt stay correlated: half the samples reuse the group's row with jitter.
    """

    tokens: tuple[int, ...] = field(default=(1,))
    max_tokens: int = 8192
    drift: float = 1.0

    def __post_init__(self) -> None:
        if not self.tokens or min(self.tokens) < 1:
            raise ConfigError("a length trace needs at least one positive GeneratedTokens value")
        _check_max_tokens(self.max_tokens)  # unchecked, 0 ran with every length clipped to 0
        if not (math.isfinite(self.drift) and self.drift > 0):
            raise ConfigError(f"--length-drift must be a number > 0 (1 = no drift), got {self.drift}")
        object.__setattr__(self, "_values", np.asarray(self.tokens, dtype=np.float64))

    def median(self, progress: float) -> float:
        values: npt.NDArray[np.float64] = object.__getattribute__(self, "_values")
        return min(float(self.max_tokens), float(np.median(values)) * _drift_factor(self.drift, progress))

    def draw(self, rng: np.random.Generator, groups: int, n: int, progress: float) -> IntArray:
        values: npt.NDArray[np.float64] = object.__getattribute__(self, "_values")
        own = values[rng.integers(0, values.size, size=(groups, n))]
        shared = values[rng.integers(0, values.size, size=(groups, 1))]
        jitter = np.exp(rng.standard_normal((groups, n)) * 0.3)
        pick = rng.random((groups, n)) < 0.5
        lengths = np.where(pick, shared * jitter, own) * _drift_factor(self.drift, progress)
        return np.clip(np.rint(lengths), 1, self.max_tokens).astype(np.int64)
