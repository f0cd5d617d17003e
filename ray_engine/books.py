"""The Ray engine's run config and books: what one policy's run measured, and its summary
(the same keys as the simulator's `dartfl dc sim --json`, plus the reward curve)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dartfl.datacenter.policies import RAY_POLICIES
from dartfl.errors import ConfigError
from ray_engine.task import TASKS

__all__ = ["RAY_CPUS", "SERIES_KEYS", "RayRun", "RayRunConfig", "shards"]

RAY_CPUS = 2  # the development machine's cores
# Time series per control period; the first six match the simulator's, so `plot_dc` draws both.
SERIES_KEYS = (
    "t_s",
    "rollout_gpus",
    "train_gpus",
    "switching_gpus",
    "buffer_groups",
    "staleness_max",
    "reward",
    "trained_samples",  # trained since the previous row
)


@dataclass(frozen=True)
class RayRunConfig:
    workers: int = 3
    eta: int = 2
    steps: int = 30
    batch_groups: int = 12
    group_size: int = 4
    period_s: float = 0.25  # control period: DART decides and the series is sampled
    seed: int = 1
    lr: float = 0.01
    task: str = "sort"  # or "tools": multi-turn episodes that wait for a simulated checker
    dart_start_rollout: int | None = None  # DART's first layout (default: from the warm-up profile)

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise ConfigError(f"--workers must be >= 2 (one rollout, one trainer), got {self.workers}")
        if self.workers > 100 * RAY_CPUS:
            raise ConfigError(f"--workers must be <= {100 * RAY_CPUS} on {RAY_CPUS} CPUs, got {self.workers}")
        if self.eta < 0 or self.steps < 1:
            raise ConfigError(f"--eta must be >= 0 and --steps >= 1, got {self.eta}, {self.steps}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise ConfigError(f"period_s must be a finite number > 0, got {self.period_s}")
        if self.task not in TASKS:
            raise ConfigError(f"unknown --task {self.task!r}; valid: {', '.join(TASKS)}")


def check_specs(specs: list[str]) -> None:
    """Fail on a spec the Ray engine cannot run, before Ray starts (the error lists the valid ones)."""
    for spec in specs:
        RAY_POLICIES.build(spec)  # its DART takes no smooth: the controller smooths no score


@dataclass
class RayRun:
    """The books of one policy's run: `summary()` gives the CLI's JSON; `series` (one row per
    control period) and `reward_curve` feed `plot_dc`."""

    policy: str
    eta: int
    rewards: list[float] = field(default_factory=list)  # mean reward of each trained batch
    staleness: list[int] = field(default_factory=list)  # of every trained group
    last_staleness: int = 0  # most stale group of the last batch
    trained_samples: int = 0
    trained_tokens: int = 0  # response tokens of the trained samples
    layouts: set[str] = field(default_factory=set)
    switches: int = 0
    migrated: int = 0  # sequences a switching worker handed to the other rollout workers
    dropped_groups: int = 0  # past the staleness bound when their turn came
    recompute_s: float = 0.0  # worker-seconds spent recomputing migrated sequences' contexts
    busy_s: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "train": 0.0})
    role_s: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "train": 0.0, "switching": 0.0})
    wall_s: float = 0.0
    group_size: int = 1
    series: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SERIES_KEYS})
    _trained_recorded: int = field(default=0, repr=False)

    @property
    def reward_curve(self) -> list[float]:
        return self.rewards

    def trained(self, batch: list[dict[str, Any]], version: int) -> None:
        """Book one training step on `batch` at policy version `version`."""
        self.rewards.append(float(np.mean([g["reward"].mean() for g in batch])))
        staleness = [version - g["version"] for g in batch]
        self.staleness += staleness
        self.last_staleness = max(staleness)
        self.trained_samples += sum(g["tokens"].shape[0] for g in batch)
        self.trained_tokens += sum(g["tokens"].size for g in batch)

    def record(self, t_s: float, rollout: int, train: int, switching: int, buffer_groups: float) -> None:
        """One row of the time series; staleness and reward are those of the last trained batch."""
        for key, value in (
            ("t_s", t_s),
            ("rollout_gpus", rollout),
            ("train_gpus", train),
            ("switching_gpus", switching),
            ("buffer_groups", buffer_groups),
            ("staleness_max", self.last_staleness),
            ("reward", self.rewards[-1] if self.rewards else 0.0),
            ("trained_samples", self.trained_samples - self._trained_recorded),
        ):
            self.series[key].append(float(value))
        self._trained_recorded = self.trained_samples

    def summary(self) -> dict[str, Any]:
        wall = max(self.wall_s, 1e-9)
        rewards = self.rewards
        idle_s = sum(self.role_s[r] - self.busy_s[r] for r in ("rollout", "train"))
        return {
            "policy": self.policy,
            "samples_per_s": self.trained_samples / wall,
            "tokens_per_s": self.trained_tokens / wall,
            "steps": len(rewards),
            "rollout_idle_ratio": _idle(self.busy_s["rollout"], self.role_s["rollout"]),
            "trainer_idle_ratio": _idle(self.busy_s["train"], self.role_s["train"]),
            "staleness_max": max(self.staleness, default=0),
            "staleness_mean": float(np.mean(self.staleness)) if self.staleness else 0.0,
            "staleness_histogram": {
                str(k): int(v) for k, v in zip(*np.unique(self.staleness, return_counts=True), strict=True)
            }
            if self.staleness
            else {},
            "dropped_samples": self.dropped_groups * self.group_size,
            "switches": self.switches,
            "aborted_gpu_s": self.recompute_s,  # worker-seconds; the toy has no GPUs
            "idle_gpu_s": max(0.0, idle_s),
            "switching_gpu_s": self.role_s["switching"],
            "migrated_sequences": self.migrated,
            "reward_curve": rewards,
            "reward_first": rewards[0] if rewards else 0.0,
            "reward_last5": float(np.mean(rewards[-5:])) if rewards else 0.0,
            "role_layouts": sorted(self.layouts),
            "wall_s": self.wall_s,
        }


def _idle(busy_s: float, allocated_s: float) -> float:
    return min(1.0, max(0.0, 1.0 - busy_s / allocated_s)) if allocated_s > 0 else 0.0


def shards(batch: list[dict[str, Any]], k: int) -> list[list[dict[str, Any]]]:
    """Split a batch over k trainers, balancing tokens (longest group first to the least
    loaded shard): a step lasts as long as its largest shard, and lengths are heavy-tailed."""
    parts: list[list[dict[str, Any]]] = [[] for _ in range(k)]
    load = [0] * k
    for group in sorted(batch, key=lambda g: -g["tokens"].size):
        i = load.index(min(load))
        parts[i].append(group)
        load[i] += group["tokens"].size
    return [p for p in parts if p]
