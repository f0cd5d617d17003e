"""The fleet simulator's value types: how every device runs (`FleetConfig`), the per-period
arrival counts of every device and how they are binned (`FleetArrivals`, `bin_arrivals`),
and every device's outcome under one policy (`FleetResult`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.metrics import harvest_efficiency

__all__ = ["FleetArrivals", "FleetConfig", "FleetResult", "FloatArray", "IntArray", "bin_arrivals"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class FleetConfig:
    """How every device runs; the fields mean what `SimConfig`'s do. FL rounds are fleet-wide."""

    period_s: float = 0.25
    round_s: float = 60.0
    round_target_samples: int = 0
    rate_time_constant_s: float = 2.0
    # The event simulator's deadline-aware admission, approximated: a task's queue holds no more
    # than its SLO's worth of work at full batches. Off by default: the fluid model's cap does
    # not follow the exact rule where inference is starved (docs/fleet.md, "Approximations").
    deadline_admission: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ConfigError(f"control period must be a finite number > 0 s, got {self.period_s}")
        if not self.round_s > 0:
            raise ConfigError(f"round length must be > 0 s, got {self.round_s}")
        if self.round_target_samples < 0:
            raise ConfigError(f"round target must be >= 0 samples, got {self.round_target_samples}")
        if not self.rate_time_constant_s > 0:
            raise ConfigError(f"rate time constant must be > 0 s, got {self.rate_time_constant_s}")


@dataclass(frozen=True, eq=False)
class FleetArrivals:
    """Per-period arrival counts of every device.

    `counts[j, k, d]` is the number of requests for task k that reach device d during period j
    (period-major, then task-major, so one period's (tasks, devices) slice is contiguous).
    The horizon is `num_periods * period_s`.
    """

    counts: npt.NDArray[np.integer[Any]]
    task_names: tuple[str, ...]
    period_s: float

    def __post_init__(self) -> None:
        if self.counts.ndim != 3:
            raise ConfigError(
                f"fleet counts must have shape (periods, tasks, devices), got {self.counts.shape}"
            )
        if self.counts.shape[1] != len(self.task_names) or not self.task_names:
            raise ConfigError(
                f"fleet counts have {self.counts.shape[1]} tasks but {len(self.task_names)} task names"
            )
        if not np.issubdtype(self.counts.dtype, np.integer):
            raise ConfigError(f"fleet counts must be integers, got dtype {self.counts.dtype}")
        if self.counts.size and self.counts.min() < 0:
            raise ConfigError("fleet arrival counts must be >= 0")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ConfigError(f"period_s must be a finite number > 0, got {self.period_s}")

    @property
    def num_periods(self) -> int:
        return int(self.counts.shape[0])

    @property
    def num_devices(self) -> int:
        return int(self.counts.shape[2])

    @property
    def horizon_s(self) -> float:
        return self.num_periods * self.period_s

    def totals(self) -> IntArray:
        """(tasks, devices): every device's request count per task."""
        totals: IntArray = self.counts.sum(axis=0, dtype=np.int64)
        return totals

    @classmethod
    def from_arrivals(
        cls, workloads: Sequence[Arrivals], period_s: float, num_periods: int | None = None
    ) -> FleetArrivals:
        """Bin each device's arrivals; the horizon is the longest duration, in whole periods."""
        if not workloads:
            raise ConfigError("a fleet needs at least one device workload")
        names = workloads[0].task_names
        for w in workloads:
            if w.task_names != names:
                raise ConfigError(
                    f"every device must serve the same tasks; got {list(w.task_names)} and {list(names)}"
                )
        if num_periods is None:
            num_periods = max(1, max(math.ceil(w.duration_s / period_s - 1e-9) for w in workloads))
        counts = np.zeros((num_periods, len(names), len(workloads)), dtype=np.int32)
        for d, w in enumerate(workloads):
            counts[:, :, d] = bin_arrivals(w, period_s, num_periods)
        return cls(counts, names, period_s)


def bin_arrivals(arrivals: Arrivals, period_s: float, num_periods: int) -> IntArray:
    """(periods, tasks) arrival counts; arrivals past the last period go into it."""
    k_tasks = arrivals.num_tasks
    index = np.minimum((arrivals.times_s / period_s).astype(np.int64), num_periods - 1)
    flat = np.bincount(index * k_tasks + arrivals.tasks, minlength=num_periods * k_tasks)
    counts: IntArray = flat.reshape(num_periods, k_tasks).astype(np.int64, copy=False)
    return counts


@dataclass(frozen=True, eq=False)
class FleetResult:
    """Per-device outcomes of one policy (arrays of shape (devices,) unless noted).

    Counts of requests other than `requests` are fluid estimates (floats). `slo_met` is the
    estimated number answered within their SLO; rejected requests count as misses.
    `trained_per_task` has shape (devices, tasks).
    """

    policy: str
    task_names: tuple[str, ...]
    horizon_s: float
    requests: IntArray
    rejected: FloatArray
    completed: FloatArray
    queued_end: FloatArray
    slo_met: FloatArray
    trained_samples: FloatArray
    trained_per_task: FloatArray
    training_busy_s: FloatArray
    inference_busy_s: FloatArray
    fluid_trainable: FloatArray
    max_backlog: FloatArray
    mean_latency_s: FloatArray
    rounds_met: FloatArray = field(default_factory=lambda: np.zeros(0))  # fraction; empty: no target
    rounds: int = 0  # FL rounds that ended by the horizon (the same for every device)

    @property
    def num_devices(self) -> int:
        return int(self.requests.size)

    @property
    def slo_attainment(self) -> FloatArray:
        out: FloatArray = np.where(self.requests > 0, self.slo_met / np.maximum(self.requests, 1), 1.0)
        return out

    @property
    def harvest_efficiency(self) -> FloatArray:
        """Per device; NaN where the fluid limit is 0 (undefined, as in `dartfl.metrics`)."""
        out: FloatArray = np.where(
            self.fluid_trainable > 0,
            self.trained_samples / np.maximum(self.fluid_trainable, 1e-300),
            math.nan,
        )
        return out

    def device(self, index: int) -> dict[str, Any]:
        """One device's outcome as plain numbers (NaN where undefined, as in `aggregates`;
        `dartfl.store.to_jsonable` turns it into JSON null)."""
        return {
            "requests": int(self.requests[index]),
            "rejected": float(self.rejected[index]),
            "completed": float(self.completed[index]),
            "queued_end": float(self.queued_end[index]),
            "slo_attainment": float(self.slo_attainment[index]),
            "train_samples": float(self.trained_samples[index]),
            "harvest_efficiency": float(self.harvest_efficiency[index]),
            "max_backlog": float(self.max_backlog[index]),
            "mean_latency_s": float(self.mean_latency_s[index]),
        }

    def aggregates(self) -> dict[str, Any]:
        """Fleet totals plus mean and percentiles across devices, JSON-ready."""
        slo, harvest = self.slo_attainment, self.harvest_efficiency
        total = int(self.requests.sum())
        out: dict[str, Any] = {
            "policy": self.policy,
            "devices": self.num_devices,
            "horizon_s": self.horizon_s,
            "requests": total,
            "rejected": float(self.rejected.sum()),
            "slo_attainment": float(self.slo_met.sum() / total) if total else 1.0,
            "train_samples": float(self.trained_samples.sum()),
            "harvest_efficiency": harvest_efficiency(
                float(self.trained_samples.sum()), float(self.fluid_trainable.sum())
            ),
            "max_backlog": float(self.max_backlog.max()) if self.num_devices else 0.0,
        }
        spreads = (
            ("slo_attainment", slo),
            ("harvest_efficiency", harvest),
            ("train_samples", self.trained_samples),
            ("max_backlog", self.max_backlog),
            ("mean_latency_s", self.mean_latency_s),
        )
        for name, values in spreads:
            defined = values[~np.isnan(values)]  # undefined: no fluid limit, or no request
            out[f"{name}_mean"] = float(defined.mean()) if defined.size else math.nan
            for q in (5, 50, 95):
                out[f"{name}_p{q}"] = float(np.percentile(defined, q)) if defined.size else math.nan
        out["devices_below_99pct_slo"] = int((~(slo >= 0.99)).sum())  # an unknown (NaN) one too
        if self.rounds_met.size:
            out["rounds"] = self.rounds
            out["rounds_met_mean"] = float(self.rounds_met.mean())
        return out

    @classmethod
    def concat(cls, parts: Sequence[FleetResult]) -> FleetResult:
        """Join results of device chunks (in order) into one fleet."""
        if not parts:
            raise ConfigError("nothing to concatenate")
        first = parts[0]
        arrays = {
            name: np.concatenate([getattr(p, name) for p in parts])
            for name in (
                "requests",
                "rejected",
                "completed",
                "queued_end",
                "slo_met",
                "trained_samples",
                "trained_per_task",
                "training_busy_s",
                "inference_busy_s",
                "fluid_trainable",
                "max_backlog",
                "mean_latency_s",
                "rounds_met",
            )
        }
        return cls(
            policy=first.policy,
            task_names=first.task_names,
            horizon_s=first.horizon_s,
            rounds=first.rounds,
            **arrays,
        )
