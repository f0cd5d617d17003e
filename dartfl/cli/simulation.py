"""Glue between parsed flags and the core simulator, shared by `sim` and the benchmarks."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.metrics import RunRecord, summarize
from dartfl.policies import make_policy
from dartfl.profiles import resolve_profile
from dartfl.sim import SimConfig, simulate
from dartfl.store import to_jsonable
from dartfl.types import DeviceProfile, TaskSpec


@dataclass(frozen=True)
class Outcome:
    records: list[RunRecord]
    summaries: list[dict[str, Any]]


def device_setup(args: argparse.Namespace) -> tuple[DeviceProfile, SimConfig]:
    """The profile and simulator config from the device flags (tasks come with the workload)."""
    if args.profile is None and args.profile_file is None:
        raise ConfigError("give a device profile: --profile NAME (pi4, pi5, ...) or --profile-file F.toml")
    profile = resolve_profile(args.profile, args.profile_file)
    if not (math.isfinite(args.slo_ms) and args.slo_ms > 0):
        raise ConfigError(f"--slo-ms must be > 0, got {args.slo_ms}")
    if args.queue_capacity < 1:
        raise ConfigError(f"--queue-capacity must be >= 1, got {args.queue_capacity}")
    config = SimConfig(period_s=args.period_s, round_s=args.round_s, round_target_samples=args.round_target)
    return profile, config


def task_specs(arrivals: Arrivals, slo_s: float, queue_capacity: int) -> list[TaskSpec]:
    return [TaskSpec(name, slo_s, queue_capacity) for name in arrivals.task_names]


def run_policies(
    arrivals: Arrivals,
    profile: DeviceProfile,
    tasks: Sequence[TaskSpec] | None,
    specs: Sequence[str],
    config: SimConfig,
    loss_weighting: str | None = None,
    *,
    seed: int = 1,
    slo_s: float | None = None,
    queue_capacity: int = 1024,
    progress: bool = True,
) -> Outcome:
    """Simulate every policy on the same arrivals (each with the same seed) and summarise."""
    policies = [make_policy(spec, loss_weighting) for spec in specs]  # fail fast on a bad name
    if tasks is None:
        if slo_s is None:
            raise ConfigError("tasks or slo_s must be given")
        tasks = task_specs(arrivals, slo_s, queue_capacity)
    records: list[RunRecord] = []
    summaries: list[dict[str, Any]] = []
    from rich.progress import Progress

    with Progress(transient=True, disable=not progress) as bar:
        job = bar.add_task("simulating", total=len(policies))
        for policy in policies:
            bar.update(job, description=f"simulating {policy.name}")
            record = simulate(arrivals, profile, tasks, policy, config, np.random.default_rng(seed))
            records.append(record)
            summaries.append(to_jsonable(summarize(record, burst_threshold=profile.max_batch)))
            bar.advance(job)
    return Outcome(records, summaries)
