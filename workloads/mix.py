"""Per-task mixes: which task each arrival asks for, with Zipf skew that can rotate over time."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dartfl.errors import ConfigError
from workloads._common import FloatArray, IntArray

__all__ = ["TaskMix"]


@dataclass(frozen=True)
class TaskMix:
    """Zipf-skewed task popularity.

    The task of rank r (0-based) is asked for with probability proportional to 1 / (r + 1)^zipf_s
    (zipf_s = 0: uniform). Without rotation task i has rank i, so the first task is the most
    popular. With rotate_s, the ranking shifts by one every rotate_s seconds: during epoch
    e = floor(t / rotate_s) the task of rank r is (r + e) mod K, so the popular task moves on.
    """

    task_names: tuple[str, ...]
    zipf_s: float = 0.0
    rotate_s: float | None = None

    def __post_init__(self) -> None:
        if not self.task_names:
            raise ConfigError("a task mix needs at least one task name, e.g. ('digits', 'fashion')")
        if len(set(self.task_names)) != len(self.task_names) or not all(self.task_names):
            raise ConfigError(f"task names must be unique and non-empty, got {list(self.task_names)}")
        if not (math.isfinite(self.zipf_s) and self.zipf_s >= 0):
            raise ConfigError(
                "the Zipf exponent of task popularity (--zipf) must be a finite number >= 0, "
                f"got {self.zipf_s!r}"
            )
        if self.rotate_s is not None and not (math.isfinite(self.rotate_s) and self.rotate_s > 0):
            raise ConfigError(
                "the rotation period of task popularity (--rotate-s) must be a finite number of "
                f"seconds > 0, got {self.rotate_s!r}"
            )

    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    def rank_probabilities(self) -> FloatArray:
        """P(rank r), r = 0..K-1, decreasing (uniform when zipf_s = 0)."""
        weights: FloatArray = np.arange(1, self.num_tasks + 1, dtype=np.float64) ** -self.zipf_s
        probs: FloatArray = weights / weights.sum()
        return probs

    def shift_at(self, times_s: FloatArray) -> IntArray:
        """How far the ranking has rotated at each time (0 without rotation)."""
        if self.rotate_s is None:
            return np.zeros(times_s.shape, dtype=np.int64)
        return (np.floor(times_s / self.rotate_s).astype(np.int64)) % self.num_tasks

    def assign(self, times_s: FloatArray, rng: np.random.Generator) -> IntArray:
        """Draw one task index per arrival time, independently."""
        ranks = rng.choice(self.num_tasks, size=times_s.size, p=self.rank_probabilities())
        return ((ranks + self.shift_at(times_s)) % self.num_tasks).astype(np.int64)

    def expected_shares(self, duration_s: float) -> tuple[float, ...]:
        """Each task's expected share of requests over [0, duration_s), assuming a steady rate."""
        probs = self.rank_probabilities()
        if self.rotate_s is None or duration_s <= 0:
            return tuple(float(p) for p in probs)
        # Time spent at each rotation shift: whole epochs cycle through the shifts, the last is partial.
        epochs = int(duration_s // self.rotate_s)
        time_at_shift = np.full(self.num_tasks, (epochs // self.num_tasks) * self.rotate_s)
        time_at_shift[: epochs % self.num_tasks] += self.rotate_s
        time_at_shift[epochs % self.num_tasks] += duration_s - epochs * self.rotate_s
        shares = sum(
            (time_at_shift[s] * np.roll(probs, s) for s in range(self.num_tasks)),
            start=np.zeros(self.num_tasks),
        )
        return tuple(float(x) for x in shares / duration_s)
