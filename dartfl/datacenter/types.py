"""Value types of the datacenter mode: the run config, what a policy sees, what it decides.

Units are in field names; counts of prompts are `groups` (a GRPO group is one prompt's n
samples), counts of sequences are `samples`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dartfl.datacenter.model import ModelSpec
from dartfl.errors import ConfigError

__all__ = [
    "MAX_GPUS",
    "MAX_STEPS",
    "QUANTILE_LEVELS",
    "SYNC_MODES",
    "DcAllocation",
    "DcConfig",
    "DcObservation",
    "StepReport",
]

SYNC_MODES = ("blocking", "interrupt", "overlapped")
# The levels of DcObservation.length_quantiles: 31 even steps, then finer towards the maximum,
# where the tail a tight staleness bound waits on is decided.
QUANTILE_LEVELS = np.concatenate((np.arange(1, 32) / 32, [0.98, 0.99, 0.995, 0.998, 1.0]))


MIN_PERIOD_S = 0.1  # the allocator's shortest control period, seconds
# Sequences of one step, all held at once: 131,072 GPUs at 4 prompts of 8, more than MAX_GPUS
# allows, so the default batch always fits (the 1,024-GPU benchmark is 32,768).
MAX_STEP_SAMPLES = 1 << 22
# Training steps of one run. The documented scale target is 1,024 GPUs x 1,000 steps, and RL
# post-training runs are hundreds to a few thousand steps: 1,000x the target is a mistyped
# number, not a study (a larger one would be refused anyway, later, by the simulator's span
# limit, simulator.MAX_SPAN_S, after minutes of work).
MAX_STEPS = 1_000_000
# GPUs of the simulated cluster. RL post-training is reported on up to tens of thousands of
# GPUs; a cluster of 100,000 still simulates a step in seconds (tens of seconds agentic, figures
# in docs/datacenter.md), while 10^8 took a minute a step and 10^12 asked DART's candidate
# splits for terabytes.
MAX_GPUS = 100_000


def _check(name: str, value: float, low: float, *, strict: bool = False) -> None:
    ok = value > low if strict else value >= low
    if not (isinstance(value, int | float) and math.isfinite(value) and ok):
        raise ConfigError(f"{name} must be a finite number {'>' if strict else '>='} {low}, got {value!r}")


@dataclass(frozen=True)
class DcConfig:
    """One simulated asynchronous-RL run: cluster, model, batch and staleness bound."""

    gpus: int
    model: ModelSpec
    steps: int
    eta: int = 2
    batch_groups: int = 0  # prompts per training step; 0: 4 per GPU
    group_size: int = 8  # samples per prompt (GRPO n)
    prompt_tokens: int = 512
    minibatches: int = 4  # PPO minibatches per step
    sync_mode: str = "interrupt"
    period_s: float = 10.0  # control period of the allocator
    tick_s: float = 1.0  # longest fluid step of decode progress between events
    colocated_switch_s: float = 3.0  # sync mode: offload/onload between phases, per phase

    def __post_init__(self) -> None:
        if not (isinstance(self.gpus, int) and 2 <= self.gpus <= MAX_GPUS):
            raise ConfigError(f"--gpus must be an integer from 2 to {MAX_GPUS:,}, got {self.gpus!r}")
        if self.gpus < self.model.tp + self.model.train_min_gpus:
            raise ConfigError(
                f"--gpus {self.gpus} is too few for a {self.model.name} model: one rollout engine needs "
                f"{self.model.tp} and the trainer at least {self.model.train_min_gpus}"
            )
        if not (isinstance(self.steps, int) and 1 <= self.steps <= MAX_STEPS):
            raise ConfigError(f"--steps must be an integer from 1 to {MAX_STEPS:,}, got {self.steps!r}")
        if not (isinstance(self.eta, int) and self.eta >= 0):
            raise ConfigError(f"--eta must be an integer >= 0, got {self.eta!r}")
        by_gpus = self.batch_groups == 0  # the batch follows --gpus unless --batch-prompts set it
        if by_gpus:
            object.__setattr__(self, "batch_groups", 4 * self.gpus)
        if not (isinstance(self.batch_groups, int) and self.batch_groups >= 1):
            raise ConfigError(f"--batch-prompts must be an integer >= 1, got {self.batch_groups!r}")
        if not (isinstance(self.group_size, int) and self.group_size >= 1):
            raise ConfigError(f"--group-size must be an integer >= 1, got {self.group_size!r}")
        _check("--prompt-tokens", self.prompt_tokens, 0)
        if not (isinstance(self.minibatches, int) and self.minibatches >= 1):
            raise ConfigError(f"minibatches must be an integer >= 1, got {self.minibatches!r}")
        if self.sync_mode not in SYNC_MODES:
            raise ConfigError(f"unknown --sync-mode {self.sync_mode!r}; valid: {', '.join(SYNC_MODES)}")
        # The controller is simulated period by period: ten a second is faster than any
        # cluster allocator decides, and below it a run takes minutes per step.
        _check("--period-s", self.period_s, MIN_PERIOD_S)
        if self.batch_samples > MAX_STEP_SAMPLES:
            # Name the factor that is out of range: a group alone too large is --group-size's
            # fault, whatever the batch; otherwise either factor can give.
            if self.group_size > MAX_STEP_SAMPLES:
                fix = "lower --group-size"
            else:
                prompts = "--gpus (4 prompts per GPU) or --batch-prompts" if by_gpus else "--batch-prompts"
                fix = f"lower --group-size or {prompts}"
            raise ConfigError(
                f"a step of {self.batch_samples:,} sequences ({self.batch_groups:,} prompts x "
                f"--group-size {self.group_size:,}) is more than the {MAX_STEP_SAMPLES:,} the simulator "
                f"holds in memory; {fix}"
            )
        _check("tick_s", self.tick_s, 0, strict=True)
        _check("colocated_switch_s", self.colocated_switch_s, 0)

    @property
    def batch_samples(self) -> int:
        return self.batch_groups * self.group_size


@dataclass(frozen=True, slots=True)
class DcObservation:
    """What the allocator sees at the start of a control period.

    Rates are measured over recent periods (0 before any measurement). `mean_response_tokens`
    is the mean length of recently completed groups' samples (the trainer sees those).
    """

    now_s: float
    period_s: float
    gpus: int
    tp: int
    train_min_gpus: int
    rollout_gpus: int
    train_gpus: int
    switching_gpus: int
    buffer_groups: int
    inflight_groups: int
    batch_groups: int
    group_size: int
    eta: int
    version: int
    steps_left: int
    mean_response_tokens: float
    prompt_tokens: int
    measured_rollout_groups_per_s: float
    measured_train_groups_per_s: float
    admission_blocked_share: float  # share of the last period rollout could admit nothing
    active_context_tokens: float  # mean KV context of an active sequence (engines report it)
    model: ModelSpec  # the profiled costs, as the edge observation carries its cost model
    sync_mode: str = "overlapped"
    # Agentic episodes (0 / False for single-turn work), measured on recently finished groups:
    multi_turn: bool = False
    kv_kept: bool = True  # KV cache kept through a tool call (else evicted and recomputed)
    mean_extra_tokens: float = 0.0  # tool-output tokens per sample (the trainer trains through them)
    mean_env_wait_s: float = 0.0  # seconds per sample spent waiting for tools
    mean_prefill_tokens: float = 0.0  # tokens per sample prefilled (prompt, tool outputs, recomputes)
    running_share: float = 0.0  # share of in-flight groups' samples not finished yet (0: unknown)
    hybrid_gpus: int = 0  # trainer GPUs lent to rollout (verl-dynamic), counted in switching/train otherwise
    # Quantiles of recent samples' lengths (single-turn; empty until measured), for the tail a
    # batch waits on under a tight staleness bound (dartfl/datacenter/drain.py).
    length_quantiles: tuple[float, ...] = ()
    quantile_mean_tokens: float = 0.0  # the mean length of the same samples

    def __post_init__(self) -> None:
        if self.rollout_gpus + self.hybrid_gpus + self.train_gpus + self.switching_gpus != self.gpus:
            raise ConfigError(
                f"observation: {self.rollout_gpus} rollout + {self.hybrid_gpus} lent + {self.train_gpus} "
                f"train + {self.switching_gpus} switching GPUs do not add up to {self.gpus}"
            )
        if min(self.buffer_groups, self.inflight_groups, self.rollout_gpus, self.train_gpus) < 0:
            raise ConfigError("observation: counts must be >= 0")


@dataclass(frozen=True, slots=True)
class DcAllocation:
    """The GPUs that should hold the rollout role (a multiple of the engine's TP size)."""

    rollout_gpus: int

    def __post_init__(self) -> None:
        if not (isinstance(self.rollout_gpus, int) and self.rollout_gpus >= 0):
            raise ConfigError(f"rollout_gpus must be an integer >= 0, got {self.rollout_gpus!r}")


@dataclass(frozen=True, slots=True)
class StepReport:
    """What a lending policy (verl-dynamic) sees when a training step ends.

    `sampleable_groups`: groups the next step could train on; `wait_s` / `wait_groups`: how
    long the trainer (holding its GPUs) waited for data in the step that ended, and how many
    groups short it was when it started waiting; `lend_s` / `reclaim_s`: the dead time of the
    last switch each way (0 before the first); GPU counts of the two pools.
    """

    version: int
    steps_left: int
    batch_groups: int
    minibatches: int
    sampleable_groups: int
    wait_s: float
    wait_groups: int
    lend_s: float
    reclaim_s: float
    standalone_gpus: int
    trainer_gpus: int
