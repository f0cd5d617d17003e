"""The core's value types: device profiles, tasks, observations and allocations.

All are frozen and validate themselves, so a bad value fails where it is made, with a
message that names it. Per-task fields are tuples indexed like the workload's task names.
Units are in the field names: `_s` seconds, `_per_s` per second, `share` a fraction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dartfl.decisions import Allocation, CoreCosts, Observation
from dartfl.errors import ConfigError

__all__ = [
    "Allocation",
    "CoreCosts",
    "CoreModel",
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


def _speedups(name: str, curve: tuple[float, ...], count: int) -> None:
    if len(curve) != count:
        raise ConfigError(f"{name} needs one entry per core count 1..{count}, got {len(curve)}: {curve}")
    if curve[0] != 1.0:
        raise ConfigError(
            f"{name} starts at 1.0 (one core is the unit it is measured against), got {curve[0]!r}"
        )
    for j, s in enumerate(curve, start=1):
        if not (isinstance(s, int | float) and math.isfinite(s) and s > 0):
            raise ConfigError(f"{name} on {j} cores must be a finite number > 0, got {s!r}")


@dataclass(frozen=True)
class CoreModel:
    """How a device's CPU cores run work: their number, how one work item speeds up on j of
    them, how the two sides slow each other when both run, and what a change of split costs.

    `inference_speedup[j - 1]` is an inference batch's time on one core over its time on j
    cores (fixed and per-request parts alike); `training_speedup` the same for a training
    microbatch. `*_interference` f: an item of that side takes (1 + f) times as long while the
    other side runs on the other cores (shared caches, memory bandwidth). `switch_s`: the dead
    time of a lane whose core count changes (thread pools resized, caches cold).
    `gpu_inference_on_cpu`: set on a device with a GPU. Its [inference] and [training] costs
    then price the GPU, training keeps the GPU when the device is split, and an inference
    batch on j cores costs this one-core cost over `inference_speedup[j - 1]`.
    A one-core model (the default) is today's time-shared device.
    """

    count: int = 1
    inference_speedup: tuple[float, ...] = (1.0,)
    training_speedup: tuple[float, ...] = (1.0,)
    inference_interference: float = 0.0
    training_interference: float = 0.0
    switch_s: float = 0.0
    gpu_inference_on_cpu: InferenceCost | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and not isinstance(self.count, bool) and self.count >= 1):
            raise ConfigError(f"cores count must be an integer >= 1, got {self.count!r}")
        object.__setattr__(self, "inference_speedup", tuple(self.inference_speedup))
        object.__setattr__(self, "training_speedup", tuple(self.training_speedup))
        _speedups("cores inference-speedup", self.inference_speedup, self.count)
        _speedups("cores training-speedup", self.training_speedup, self.count)
        _positive("cores inference-interference", self.inference_interference, allow_zero=True)
        _positive("cores training-interference", self.training_interference, allow_zero=True)
        _positive("cores switch-s", self.switch_s, allow_zero=True)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_inference_on_cpu is not None

    @property
    def can_split(self) -> bool:
        """At least one core for each side (on a GPU device, one hosts the GPU's training)."""
        return self.count >= 2

    def first(self, count: int) -> CoreModel:
        """The same device restricted to its first `count` cores."""
        if not (isinstance(count, int) and 1 <= count <= self.count):
            raise ConfigError(f"cores must be an integer in 1..{self.count} for this profile, got {count!r}")
        return CoreModel(
            count,
            self.inference_speedup[:count],
            self.training_speedup[:count],
            self.inference_interference,
            self.training_interference,
            self.switch_s,
            self.gpu_inference_on_cpu,
        )


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
    The model's costs are those of one work item on one core (on a GPU device: on the GPU);
    `cores` says how the device's cores scale and share them, and `lane_inference` /
    `lane_training` price an item on a lane of j cores (the request path does not scale).
    """

    name: str
    inference: InferenceCost
    max_batch: int
    training: TrainingCost
    task_inference: Mapping[str, InferenceCost] = field(default_factory=dict)
    description: str = ""
    request_path: RequestPathCost = field(default_factory=RequestPathCost)
    cores: CoreModel = field(default_factory=CoreModel)

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

    def lane_inference(self, task: str, cores: int) -> InferenceCost:
        """An inference batch of `task`, end to end, on a lane of `cores` cores; all of them is
        the time-shared device (on a GPU device: the GPU), fewer a split device's serving lane.
        The model runs `inference_speedup` times faster; the request path does not."""
        model = self.cores
        if model.count == 1:
            return self.inference_for(task)
        base = self.model_inference_for(task)
        cpu = model.gpu_inference_on_cpu
        if cpu is not None:
            if cores >= model.count:
                return self.inference_for(task)
            base = cpu
        speedup = model.inference_speedup[min(cores, model.count) - 1]
        path = self.request_path
        return InferenceCost(
            base.batch_fixed_s / speedup + path.per_batch_s, base.per_request_s / speedup + path.per_request_s
        )

    def lane_training(self, cores: int) -> TrainingCost:
        """A training microbatch on a lane of `cores` cores (on a GPU device: the GPU, hosted
        by those cores, whatever their number)."""
        model, base = self.cores, self.training
        if model.count == 1 or model.has_gpu:
            return base
        speedup = model.training_speedup[min(cores, model.count) - 1]
        return TrainingCost(
            base.microbatch_fixed_s / speedup, base.per_sample_s / speedup, base.max_microbatch
        )

    def with_cores(self, count: int) -> DeviceProfile:
        """This device restricted to its first `count` cores (1: today's one-core time sharing)."""
        if count == self.cores.count:
            return self
        return replace(self, cores=self.cores.first(count))

    def time_shared(self) -> DeviceProfile:
        """The whole device as one time-shared resource: every item on all of its cores (or on
        its GPU). This is what a policy that never splits, and the fleet simulator, run on."""
        n = self.cores.count
        if n == 1:
            return self
        return replace(
            self,
            inference=self._shared(self.inference, n),
            training=self.lane_training(n),
            task_inference={t: self._shared(c, n) for t, c in self.task_inference.items()},
            cores=CoreModel(),
        )

    def _shared(self, cost: InferenceCost, n: int) -> InferenceCost:
        """A model cost on all n cores (a GPU device's costs are its GPU's already)."""
        if self.cores.has_gpu:
            return cost
        s = self.cores.inference_speedup[n - 1]
        return InferenceCost(cost.batch_fixed_s / s, cost.per_request_s / s)

    def capacity_per_s(self, task_names: tuple[str, ...], task_mix: tuple[float, ...]) -> float:
        """Requests per second the device serves at its cheapest per-request cost for a task mix,
        time-shared on all of its cores (the load a workload is sized by)."""
        total = sum(task_mix)
        if total <= 0:
            raise ConfigError("task mix must have positive total weight")
        shared = self.time_shared()
        mean_cost = sum(
            w / total * shared.inference_for(t).cheapest_per_request_s(self.max_batch)
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
