"""What a policy sees and decides each control period: the Observation, the Allocation, and
the split-lane prices a multi-core device adds to the Observation (`CoreCosts`).

Frozen and self-validating, as every core value type (`dartfl.types` re-exports them).
Per-task fields are tuples indexed like the workload's task names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dartfl.errors import ConfigError

__all__ = ["PER_TASK_FIELDS", "Allocation", "CoreCosts", "Observation"]

# The Observation's fields with one entry per task, besides `backlog` (which sets the count).
PER_TASK_FIELDS = (
    "oldest_age_s",
    "arrivals_since_last",
    "slo_misses_since_last",
    "arrival_rate_per_s",
    "slo_s",
    "batch_fixed_s",
    "per_request_s",
)


@dataclass(frozen=True, slots=True)
class CoreCosts:
    """What a policy needs to split the cores of a device (`Observation.split`).

    The costs of one item on a lane of j cores of a *split* device: an inference batch of b
    requests of task k takes (batch_fixed_s[k] + per_request_s[k] b) / inference_speedup[j-1],
    a microbatch of m samples (microbatch_fixed_s + per_sample_s m) / training_speedup[j-1];
    while the other lane runs, each takes (1 + its interference) times as long. The time-shared
    device (all cores on one lane) is priced by the Observation's own cost fields.
    """

    cores: int
    batch_fixed_s: tuple[float, ...]
    per_request_s: tuple[float, ...]
    microbatch_fixed_s: float
    per_sample_s: float
    inference_speedup: tuple[float, ...]
    training_speedup: tuple[float, ...]
    inference_interference: float = 0.0
    training_interference: float = 0.0
    switch_s: float = 0.0
    # Whether the serving lane may train in its idle time while the training lane trains: not
    # on a GPU device, whose one GPU the training lane keeps (a step on the serving lane
    # would need it too).
    serving_lane_trains: bool = True

    def __post_init__(self) -> None:
        if self.cores < 2:
            raise ConfigError(f"a split needs a device of >= 2 cores, got {self.cores}")
        if len(self.inference_speedup) != self.cores or len(self.training_speedup) != self.cores:
            raise ConfigError(f"speedups need one entry per core count 1..{self.cores}")
        if len(self.batch_fixed_s) != len(self.per_request_s):
            raise ConfigError("split batch_fixed_s and per_request_s need one entry per task each")


@dataclass(frozen=True, slots=True)
class Observation:
    """What the allocator sees at the start of a control period.

    Per-task tuples are indexed like the workload's task names. Counts "since last" cover
    the previous control period. The training fields describe the current FL round: the
    device owes `round_target_samples` by `round_deadline_s` (absolute time; inf if none).
    Costs are the executor's current estimates (profiled or configured).
    `training_misses_since_last` counts the misses of requests that waited while a training
    step ran (empty: the executor cannot tell, so every miss counts).
    `split` prices the lanes of a device whose cores can be split (None: one core, time
    sharing only); `inference_cores` is the split in force (all cores: time-shared);
    `split_misses_since_last` counts the misses that the slower serving lane of a split alone
    explains, however long its busy period (dartfl.attribution).
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
    inference_cores: int = 1
    split: CoreCosts | None = None
    split_misses_since_last: tuple[int, ...] = ()  # misses a core split's slower lane explains

    def __post_init__(self) -> None:
        k = len(self.backlog)
        if k == 0:
            raise ConfigError("an observation needs at least one task")
        for name in PER_TASK_FIELDS:
            if len(getattr(self, name)) != k:
                raise ConfigError(
                    f"observation field {name} has {len(getattr(self, name))} entries, expected {k}"
                )
        for name in ("training_misses_since_last", "split_misses_since_last"):
            if getattr(self, name) and len(getattr(self, name)) != k:
                raise ConfigError(f"observation field {name} must have {k} entries or none")
        if not self.period_s > 0:
            raise ConfigError(f"period_s must be > 0, got {self.period_s}")
        if self.max_batch < 1 or self.max_microbatch < 1:
            raise ConfigError("max_batch and max_microbatch must be >= 1")
        if min(self.backlog) < 0 or min(self.arrival_rate_per_s) < 0:
            raise ConfigError("backlogs and arrival rates must be >= 0")
        cores = self.split.cores if self.split is not None else 1
        if not 1 <= self.inference_cores <= cores:
            raise ConfigError(f"inference_cores must lie in 1..{cores}, got {self.inference_cores}")
        if self.split is not None and len(self.split.per_request_s) != k:
            raise ConfigError(f"observation split costs need {k} tasks, got {len(self.split.per_request_s)}")

    @property
    def cores(self) -> int:
        return self.split.cores if self.split is not None else 1

    def with_costs(
        self,
        batch_fixed_s: tuple[float, ...],
        per_request_s: tuple[float, ...],
        microbatch_fixed_s: float,
        per_sample_s: float,
        round_target_samples: int,
    ) -> Observation:
        """This observation of one lane of a split device: other costs, no split of its own.

        A policy decides a lane as it decides a whole device. This runs every control period
        inside a decision, so it copies the checked fields instead of checking them again:
        the caller passes positive costs, one per task."""
        lane = object.__new__(Observation)
        for name in Observation.__slots__:
            object.__setattr__(lane, name, getattr(self, name))
        for name, value in (
            ("batch_fixed_s", batch_fixed_s),
            ("per_request_s", per_request_s),
            ("microbatch_fixed_s", microbatch_fixed_s),
            ("per_sample_s", per_sample_s),
            ("round_target_samples", round_target_samples),
            ("inference_cores", 1),
            ("split", None),
        ):
            object.__setattr__(lane, name, value)
        return lane

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
    `inference_cores` k splits a multi-core device: inference runs on k cores (their lane
    time-shares them with training steps of `microbatch`, the rule above) and training on the
    other N - k, concurrently, in steps of `split_microbatch` (None: the largest). None, or
    k >= N, is time sharing on every core: what every policy that knows nothing of cores gets.
    `reclaim_when_behind`: once the serving lane falls behind, the training lane hands its
    cores back at its next step's boundary rather than at the next period (a split held as
    asked, as a static baseline's, does not).
    """

    inference_share: float
    task_shares: tuple[float, ...]
    loss_weights: tuple[float, ...]
    microbatch: int
    max_batch: int
    inference_cores: int | None = None
    split_microbatch: int | None = None
    reclaim_when_behind: bool = False

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
        if self.inference_cores is not None and self.inference_cores < 1:
            raise ConfigError(
                f"inference_cores must be >= 1 or None (all, time-shared), got {self.inference_cores}"
            )
        if self.split_microbatch is not None and self.split_microbatch < 0:
            raise ConfigError(
                f"split_microbatch must be >= 0 or None (the largest), got {self.split_microbatch}"
            )
