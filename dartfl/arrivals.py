"""Request arrivals: the one workload representation every simulator and replayer consumes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dartfl.errors import ConfigError

__all__ = ["Arrivals"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Arrivals:
    """A sorted sequence of request arrivals.

    `times_s[i]` is when request i arrives (seconds from the workload start, non-decreasing);
    `tasks[i]` indexes `task_names`. `duration_s` is the workload's horizon, at least the last
    arrival time (a workload may end with a quiet stretch).
    """

    times_s: FloatArray
    tasks: IntArray
    task_names: tuple[str, ...]
    duration_s: float

    def __post_init__(self) -> None:
        if self.times_s.ndim != 1 or self.tasks.shape != self.times_s.shape:
            raise ConfigError(
                f"arrival times and tasks must be 1-D arrays of equal length, got shapes "
                f"{self.times_s.shape} and {self.tasks.shape}"
            )
        if not self.task_names:
            raise ConfigError("a workload needs at least one task name")
        if len(set(self.task_names)) != len(self.task_names):
            raise ConfigError(f"task names must be unique, got {list(self.task_names)}")
        n = len(self.times_s)
        if n:
            if not np.all(np.isfinite(self.times_s)) or self.times_s[0] < 0:
                raise ConfigError("arrival times must be finite and non-negative")
            if np.any(np.diff(self.times_s) < 0):
                raise ConfigError("arrival times must be sorted (non-decreasing)")
            if self.tasks.min() < 0 or self.tasks.max() >= len(self.task_names):
                raise ConfigError(
                    f"task indices must lie in [0, {len(self.task_names) - 1}], "
                    f"got [{self.tasks.min()}, {self.tasks.max()}]"
                )
            if self.duration_s < self.times_s[-1]:
                raise ConfigError(
                    f"duration_s={self.duration_s} is shorter than the last arrival at {self.times_s[-1]}"
                )
        if not np.isfinite(self.duration_s) or self.duration_s < 0:
            raise ConfigError(f"duration_s must be finite and >= 0, got {self.duration_s}")

    @classmethod
    def build(
        cls,
        times_s: npt.ArrayLike,
        tasks: npt.ArrayLike,
        task_names: tuple[str, ...] | list[str],
        duration_s: float | None = None,
    ) -> Arrivals:
        """Convert array-likes, sorting by time (stable) when needed."""
        t = np.asarray(times_s, dtype=np.float64)
        k = np.asarray(tasks, dtype=np.int64)
        if t.shape != k.shape:
            raise ConfigError(f"times and tasks differ in length: {t.shape} vs {k.shape}")
        if t.size and np.any(np.diff(t) < 0):
            order = np.argsort(t, kind="stable")
            t, k = t[order], k[order]
        end = float(t[-1]) if t.size else 0.0
        return cls(t, k, tuple(task_names), end if duration_s is None else float(duration_s))

    @property
    def num_requests(self) -> int:
        return int(self.times_s.size)

    @property
    def num_tasks(self) -> int:
        return len(self.task_names)

    def counts_per_task(self) -> IntArray:
        return np.bincount(self.tasks, minlength=self.num_tasks).astype(np.int64)

    def mean_rate_per_s(self) -> float:
        return self.num_requests / self.duration_s if self.duration_s > 0 else 0.0

    def scaled_in_time(self, factor: float) -> Arrivals:
        """Stretch (factor > 1) or compress (factor < 1) the time axis; rates scale by 1/factor."""
        if not factor > 0:
            raise ConfigError(f"time scale factor must be > 0, got {factor}")
        return Arrivals(self.times_s * factor, self.tasks, self.task_names, self.duration_s * factor)

    def window(self, start_s: float, end_s: float) -> Arrivals:
        """Arrivals in [start_s, end_s), shifted so the window starts at 0."""
        lo, hi = np.searchsorted(self.times_s, [start_s, end_s], side="left")
        return Arrivals(self.times_s[lo:hi] - start_s, self.tasks[lo:hi], self.task_names, end_s - start_s)
