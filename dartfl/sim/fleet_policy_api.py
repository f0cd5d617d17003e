"""The interface between the fleet simulator and its policies: what every device's allocator
sees (`FleetObservation`), what it decides (`FleetAllocation`) and the policy itself
(`FleetPolicy`). Per-device fields are numpy arrays: shape (devices, tasks) for per-task
values, (devices,) for per-device ones."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dartfl.decisions import PER_TASK_FIELDS
from dartfl.errors import ConfigError
from dartfl.sim.fleet_types import FloatArray, IntArray
from dartfl.types import Observation

__all__ = ["FleetAllocation", "FleetObservation", "FleetPolicy"]

# The observation's per-device arrays, shape (devices,); the per-task ones, besides the
# backlog, are the scalar Observation's (`PER_TASK_FIELDS`), shape (devices, tasks).
_PER_DEVICE = ("max_batch", "microbatch_fixed_s", "per_sample_s", "max_microbatch")


@dataclass(frozen=True, eq=False)
class FleetObservation:
    """What every device's allocator sees at the start of a control period.

    The fields mean what `dartfl.types.Observation`'s do, one row per device. The clock,
    period and FL round are fleet-wide (rounds are synchronised by the server); progress
    towards the round's target is per device. Backlogs and miss counts may be fractional:
    the fleet simulator is a fluid model.
    """

    now_s: float
    period_s: float
    backlog: FloatArray  # (devices, tasks)
    oldest_age_s: FloatArray
    arrivals_since_last: FloatArray
    slo_misses_since_last: FloatArray
    arrival_rate_per_s: FloatArray
    slo_s: FloatArray
    batch_fixed_s: FloatArray
    per_request_s: FloatArray
    max_batch: IntArray  # (devices,)
    microbatch_fixed_s: FloatArray
    per_sample_s: FloatArray
    max_microbatch: IntArray
    round_start_s: float = 0.0
    round_deadline_s: float = math.inf
    round_target_samples: float = 0.0
    round_trained_samples: FloatArray | None = None  # (devices,); None: nothing trained
    training_misses_since_last: FloatArray | None = None  # None: cannot tell, every miss counts

    def __post_init__(self) -> None:
        if self.backlog.ndim != 2 or self.backlog.shape[1] == 0:
            raise ConfigError(f"fleet backlog must have shape (devices, tasks), got {self.backlog.shape}")
        shape = self.backlog.shape
        for names, expected in ((PER_TASK_FIELDS, shape), (_PER_DEVICE, shape[:1])):
            for name in names:
                if getattr(self, name).shape != expected:
                    raise ConfigError(
                        f"fleet observation {name} has shape {getattr(self, name).shape}, expected {expected}"
                    )
        if not self.period_s > 0:
            raise ConfigError(f"period_s must be > 0, got {self.period_s}")

    @property
    def num_devices(self) -> int:
        return int(self.backlog.shape[0])

    @property
    def num_tasks(self) -> int:
        return int(self.backlog.shape[1])

    @classmethod
    def stack(cls, observations: Sequence[Observation]) -> FleetObservation:
        """One fleet observation from per-device scalar ones that share clock, period and round."""
        if not observations:
            raise ConfigError("stack needs at least one observation")
        first = observations[0]
        for o in observations:
            same = (o.now_s, o.period_s, o.round_start_s, o.round_deadline_s, o.round_target_samples)
            if same != (first.now_s, first.period_s, first.round_start_s, first.round_deadline_s,
                        first.round_target_samples):  # fmt: skip
                raise ConfigError("stacked observations must share now_s, period_s and the FL round")

        def rows(name: str) -> FloatArray:
            return np.array([getattr(o, name) for o in observations], dtype=np.float64)

        def ints(name: str) -> IntArray:
            return np.array([getattr(o, name) for o in observations], dtype=np.int64)

        # The per-task fields (PER_TASK_FIELDS, checked in __post_init__): one row per device.
        per_task = {name: rows(name) for name in ("backlog", *PER_TASK_FIELDS)}
        return cls(
            now_s=first.now_s,
            period_s=first.period_s,
            **per_task,
            max_batch=ints("max_batch"),
            microbatch_fixed_s=rows("microbatch_fixed_s"),
            per_sample_s=rows("per_sample_s"),
            max_microbatch=ints("max_microbatch"),
            round_trained_samples=rows("round_trained_samples"),
            round_start_s=first.round_start_s,
            round_deadline_s=first.round_deadline_s,
            round_target_samples=float(first.round_target_samples),
            # Per device, as the scalar policy reads it: training-caused misses when given.
            training_misses_since_last=np.array(
                [o.training_misses_since_last or o.slo_misses_since_last for o in observations],
                dtype=np.float64,
            ),
        )


@dataclass(frozen=True, eq=False)
class FleetAllocation:
    """Every device's decision: `Allocation`'s fields, one row per device (loss weights omitted:
    the fleet simulator does not train a model)."""

    inference_share: FloatArray  # (devices,)
    microbatch: IntArray  # (devices,)
    max_batch: IntArray  # (devices,)
    task_shares: FloatArray  # (devices, tasks)


class FleetPolicy(ABC):
    """A policy over a fleet: `update` folds in the last period, `decide` allocates."""

    name: str = "policy"
    splits_cores: bool = False  # it would split a multi-core device's cores (not modelled here)

    def reset(self) -> None:  # noqa: B027 - stateless policies need nothing
        """Forget all state (the fleet simulator calls it before each run)."""

    def update(self, obs: FleetObservation) -> None:  # noqa: B027 - stateless policies need nothing
        """Fold the last period's outcome into the per-device state."""

    @abstractmethod
    def decide(self, obs: FleetObservation) -> FleetAllocation:
        """Every device's allocation for the period that starts at `obs.now_s`."""
