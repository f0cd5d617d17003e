"""The core's value types: device profiles, tasks, observations and allocations.

All are frozen and validate themselves, so a bad value fails where it is made, with a
message that names it. Per-task fields are tuples indexed like the workload's task names.
Units are in the field names: `_s` seconds, `_per_s` per second, `share` a fraction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from dartfl.errors import ConfigError

__all__ = [
    "Allocation",
    "DeviceProfile",
    "InferenceCost",
    "Observation",
    "RequestPathCost",
    "TaskSpec",
    "TrainingCost",
]


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not (isinstance(value, int | float) and math.isfinite(value) and ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class InferenceCost:
    """t(b) = batch_fixed_s + per_request_s * b for an inference batch of b requests."""

    batch_fixed_s: float
    per_request_s: float

    def __post_init__(self) -> None:
        _positive("inference batch-fixed-s", self.batch_fixed_s, allow_zero=True)
        _positive("inference per-request-s", self.per_request_s)

    def batch_s(self, batch: int) -> float:
        return self.batch_fixed_s + self.per_request_s * batch

    def cheapest_per_request_s(self, max_batch: int) -> float:
        """Per-request cost at the largest batch: the fluid limit's inference price."""
        return self.per_request_s + self.batch_fixed_s / max_batch


@dataclass(frozen=True)
class TrainingCost:
    """s(m) = microbatch_fixed_s + per_sample_s * m for a training microbatch of m samples."""

    microbatch_fixed_s: float
    per_sample_s: float
    max_microbatch: int

    def __post_init__(self) -> None:
        _positive("training microbatch-fixed-s", self.microbatch_fixed_s, allow_zero=True)
        _positive("training per-sample-s", self.per_sample_s)
        if not (isinstance(self.max_microbatch, int) and self.max_microbatch >= 1):
            raise ConfigError(f"training max-microbatch must be an integer >= 1, got {self.max_microbatch!r}")

    def microbatch_s(self, samples: int) -> float:
        return self.microbatch_fixed_s + self.per_sample_s * samples

    def cheapest_per_sample_s(self) -> float:
        return self.per_sample_s + self.microbatch_fixed_s / self.max_microbatch


@dataclass(frozen=True)
class RequestPathCost:
    """What a device spends on a request outside the model (docs/profiles.md), per request:
    receiving it off the network (`receive_s`), decoding and admitting it (`ingress_s`),
    encoding and publishing its reply (`egress_s`); and per batch (`per_batch_s`)."""

    receive_s: float = 0.0
    ingress_s: float = 0.0
    egress_s: float = 0.0
    per_batch_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("receive_s", "ingress_s", "egress_s", "per_batch_s"):
            _positive(f"request-path {name.replace('_', '-')}", getattr(self, name), allow_zero=True)

    @property
    def per_request_s(self) -> float:
        return self.receive_s + self.ingress_s + self.egress_s


@dataclass(frozen=True)
class DeviceProfile:
    """What one device's work costs: the inference and training cost models of docs/allocator.md.

    `inference` is the model's default per-request cost; `task_inference` overrides it per task
    name (a bigger head, a larger input). `request_path` is what serving a request costs
    besides the model; `inference_for` adds the two, the end-to-end price everything plans with.
    """

    name: str
    inference: InferenceCost
    max_batch: int
    training: TrainingCost
    task_inference: Mapping[str, InferenceCost] = field(default_factory=dict)
    description: str = ""
    request_path: RequestPathCost = field(default_factory=RequestPathCost)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a device profile needs a non-empty name")
        if not (isinstance(self.max_batch, int) and self.max_batch >= 1):
            raise ConfigError(f"inference max-batch must be an integer >= 1, got {self.max_batch!r}")
        # A plain dict, whatever mapping was passed, so profiles pickle into worker processes.
        object.__setattr__(self, "task_inference", dict(self.task_inference))

    def model_inference_for(self, task: str) -> InferenceCost:
        """The model's own cost for `task` (without the request path)."""
        return self.task_inference.get(task, self.inference)

    def inference_for(self, task: str) -> InferenceCost:
        """What serving a batch of `task` costs end to end: the model plus the request path."""
        model, path = self.model_inference_for(task), self.request_path
        if path.per_batch_s == 0.0 and path.per_request_s == 0.0:
            return model
        return InferenceCost(model.batch_fixed_s + path.per_batch_s, model.per_request_s + path.per_request_s)

    def capacity_per_s(self, task_names: tuple[str, ...], task_mix: tuple[float, ...]) -> float:
        """Requests per second the device serves at its cheapest per-request cost for a task mix."""
        total = sum(task_mix)
        if total <= 0:
            raise ConfigError("task mix must have positive total weight")
        mean_cost = sum(
            w / total * self.inference_for(t).cheapest_per_request_s(self.max_batch)
            for t, w in zip(task_names, task_mix, strict=True)
        )
        return 1.0 / mean_cost


@dataclass(frozen=True)
class TaskSpec:
    """One inference task served by the device: its name, SLO and queue bound."""

    name: str
    slo_s: float
    queue_capacity: int = 1024

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a task needs a non-empty name")
        _positive(f"SLO of task {self.name!r}", self.slo_s)
        if not (isinstance(self.queue_capacity, int) and self.queue_capacity >= 1):
            raise ConfigError(
                f"queue capacity of task {self.name!r} must be an integer >= 1, got {self.queue_capacity!r}"
            )


@dataclass(frozen=True, slots=True)
class Observation:
    """What the allocator sees at the start of a control period.

    Per-task tuples are indexed like the workload's task names. Counts "since last" cover
    the previous control period. The training fields describe the current FL round: the
    device owes `round_target_samples` by `round_deadline_s` (absolute time; inf if none).
    Costs are the executor's current estimates (profiled or configured).
    `training_misses_since_last` counts the misses of requests that waited while a training
    step ran (empty: the executor cannot tell, so every miss counts).
    """

    now_s: float
    period_s: float
    backlog: tuple[int, ...]
    oldest_age_s: tuple[float, ...]
    arrivals_since_last: tuple[int, ...]
    slo_misses_since_last: tuple[int, ...]
    arrival_rate_per_s: tuple[float, ...]
    slo_s: tuple[float, ...]
    batch_fixed_s: tuple[float, ...]
    per_request_s: tuple[float, ...]
    max_batch: int
    microbatch_fixed_s: float
    per_sample_s: float
    max_microbatch: int
    training_misses_since_last: tuple[int, ...] = ()  # misses that waited behind a training step
    round_start_s: float = 0.0
    round_deadline_s: float = math.inf
    round_target_samples: int = 0
    round_trained_samples: int = 0

    def __post_init__(self) -> None:
        k = len(self.backlog)
        if k == 0:
            raise ConfigError("an observation needs at least one task")
        for name in (
            "oldest_age_s",
            "arrivals_since_last",
            "slo_misses_since_last",
            "arrival_rate_per_s",
            "slo_s",
            "batch_fixed_s",
            "per_request_s",
        ):
            if len(getattr(self, name)) != k:
                raise ConfigError(
                    f"observation field {name} has {len(getattr(self, name))} entries, expected {k}"
                )
        if self.training_misses_since_last and len(self.training_misses_since_last) != k:
            raise ConfigError(f"observation field training_misses_since_last must have {k} entries or none")
        if not self.period_s > 0:
            raise ConfigError(f"period_s must be > 0, got {self.period_s}")
        if self.max_batch < 1 or self.max_microbatch < 1:
            raise ConfigError("max_batch and max_microbatch must be >= 1")
        if min(self.backlog) < 0 or min(self.arrival_rate_per_s) < 0:
            raise ConfigError("backlogs and arrival rates must be >= 0")

    @property
    def num_tasks(self) -> int:
        return len(self.backlog)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The allocator's decision for one control period.

    `inference_share` is the fraction of the device inference may claim while both sides have
    work (the executor is work-conserving). `task_shares` split the training samples among
    tasks (sum 1), `loss_weights` weight the per-task losses (positive, mean 1).
    `microbatch` is the training step size m (0: do not train); `max_batch` caps an
    inference batch.
    """

    inference_share: float
    task_shares: tuple[float, ...]
    loss_weights: tuple[float, ...]
    microbatch: int
    max_batch: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.inference_share <= 1.0:
            raise ConfigError(f"inference_share must lie in [0, 1], got {self.inference_share}")
        k = len(self.task_shares)
        if k == 0 or len(self.loss_weights) != k:
            raise ConfigError("task_shares and loss_weights must be non-empty and of equal length")
        if min(self.task_shares) < 0 or abs(sum(self.task_shares) - 1.0) > 1e-9:
            raise ConfigError(f"task_shares must be >= 0 and sum to 1, got {self.task_shares}")
        if min(self.loss_weights) <= 0 or abs(sum(self.loss_weights) / k - 1.0) > 1e-9:
            raise ConfigError(f"loss_weights must be > 0 with mean 1, got {self.loss_weights}")
        if self.microbatch < 0 or self.max_batch < 1:
            raise ConfigError(
                f"microbatch must be >= 0 and max_batch >= 1, got {self.microbatch}, {self.max_batch}"
            )
