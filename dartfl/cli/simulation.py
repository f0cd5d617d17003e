"""Glue between parsed flags and the core simulator for `dartfl sim`."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError
from dartfl.profiles import resolve_profile
from dartfl.sim import SimConfig
from dartfl.sim.compare import Comparison, compare_policies, task_specs
from dartfl.types import DeviceProfile


def device_setup(args: argparse.Namespace) -> tuple[DeviceProfile, SimConfig]:
    """The profile and simulator config from the device flags (tasks come with the workload)."""
    profile = device_profile(args)
    check_slo_and_queue(args)
    config = SimConfig(
        period_s=args.period_s,
        round_s=args.round_s,
        round_target_samples=args.round_target,
        deadline_admission=not args.no_deadline_admission,
        batch_hold=args.batch_hold,
        network_thread=args.network_thread,
    )
    return profile, config


def device_profile(args: argparse.Namespace) -> DeviceProfile:
    """The profile --profile or --profile-file names, on the cores --cores keeps."""
    if args.profile is None and args.profile_file is None:
        raise ConfigError("give a device profile: --profile NAME (pi4, pi5, ...) or --profile-file F.toml")
    return on_cores(resolve_profile(args.profile, args.profile_file), args.cores)


def say_unused_task_costs(profile: DeviceProfile, task_names: Sequence[str]) -> None:
    """Warn of per-task inference costs the profile gives for tasks this run does not have: a
    misspelt `[inference.tasks.NAME]` would otherwise leave its task on the default cost
    without a word. (A profile may price more tasks than one run uses, so this is no error.)"""
    unused = sorted(set(profile.task_inference) - set(task_names))
    if not unused:
        return
    defaulted = [t for t in task_names if t not in profile.task_inference]
    also = f"; {', '.join(defaulted)} cost the default [inference]" if defaulted else ""
    print(
        f"dartfl: warning: profile {profile.name!r} prices task(s) {', '.join(unused)} that this run "
        f"does not have (its tasks: {', '.join(task_names)}){also}; check the names in "
        "[inference.tasks.*]",
        file=sys.stderr,
    )


def check_slo_and_queue(args: argparse.Namespace) -> None:
    """The checks of --slo-ms and --queue-capacity, which every simulated device takes."""
    if not (math.isfinite(args.slo_ms) and args.slo_ms > 0):
        raise ConfigError(f"--slo-ms must be > 0, got {args.slo_ms}")
    if args.queue_capacity < 1:
        raise ConfigError(f"--queue-capacity must be >= 1, got {args.queue_capacity}")


def on_cores(profile: DeviceProfile, cores: int | None) -> DeviceProfile:
    """`profile` on its first `cores` cores (`--cores`; None: all of them)."""
    if cores is None:
        return profile
    if not 1 <= cores <= profile.cores.count:
        raise ConfigError(
            f"--cores must lie in 1..{profile.cores.count} for profile {profile.name!r}, got {cores}"
        )
    return profile.with_cores(cores)


def run_policies(
    arrivals: Arrivals,
    profile: DeviceProfile,
    specs: Sequence[str],
    config: SimConfig,
    loss_weighting: str | None,
    *,
    seed: int,
    slo_s: float,
    queue_capacity: int,
    progress: bool,
) -> Comparison:
    """`compare_policies` with a progress bar on the terminal; a policy that fails while it
    runs is named in `failures` and the others still run."""
    from rich.progress import Progress

    tasks = task_specs(arrivals, slo_s, queue_capacity)
    with Progress(transient=True, disable=not progress) as bar:
        job = bar.add_task("simulating", total=len(specs))

        def next_policy(name: str) -> None:
            if bar.tasks[job].description != "simulating":
                bar.advance(job)
            bar.update(job, description=f"simulating {name}")

        return compare_policies(
            arrivals,
            profile,
            tasks,
            specs,
            config,
            loss_weighting,
            seed=seed,
            on_policy=next_policy,
            keep_going=True,
        )
