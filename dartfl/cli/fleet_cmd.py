"""`dartfl fleet`: many devices at once, each with its own bursty workload (docs/fleet.md).

Device i gets a workload from the mix (round-robin, or drawn at random), its own seed and a
load jittered around --target-load; every policy runs on the same per-device arrivals through
the vectorised fleet simulator (`dartfl.sim.fleet`). The contract outsiders script against:
`--json` prints one object `{"results": [...], "run_id": ...}` with one entry per policy, each
with at least `policy`, `devices`, `requests`, `rejected`, `slo_attainment`,
`slo_attainment_p5`, `slo_attainment_p50`, `train_samples`, `harvest_efficiency`,
`harvest_efficiency_p5`, `harvest_efficiency_p50`, `max_backlog`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Any

from dartfl.cli.sim_cmd import add_control_arguments, add_store_arguments
from dartfl.cli.workload_args import WORKLOAD_NAMES, parse_tasks, seed_arg
from dartfl.errors import ConfigError
from dartfl.registry import distinct

if TYPE_CHECKING:
    from dartfl.sim.fleet import FleetResult
    from dartfl.types import DeviceProfile
    from workloads.fleet import FleetWorkloads

DEFAULT_POLICIES = ("dart", "inference-first:4")
# workloads.fleet's, spelt out so `dartfl --help` need not import the generators (a test checks).
DEFAULT_MIX = "pareto-onoff,mmpp,gamma,poisson"
ASSIGNMENTS = ("round-robin", "random")
# A worker holds a chunk of devices' per-period counts at once: at most this many periods x
# tasks (1,000 devices x 1 hour x 3 tasks in chunks of 500 is 2.2e7). And the most device-periods
# a run may take.
CHUNK_CELLS = 25_000_000
DEVICE_PERIODS = 1e9
# The fluid model orders a period's batches over every pair of tasks (`turn_fraction`), so a
# chunk's arrays hold tasks^2 cells per device: at most this many per array (32 MB), which
# bounds the chunk; and at most this many tasks, past which a device-period alone is too dear.
PAIR_CELLS = 4_000_000
MAX_TASKS = 256


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fleet",
        help="simulate a fleet of devices, each with its own workload, and compare policies",
        description="Run many devices at once (a vectorised fluid model, docs/fleet.md) and report "
        "fleet-wide SLO attainment and harvest per policy.",
    )
    g = p.add_argument_group("fleet")
    g.add_argument("--devices", type=int, default=100, help="number of devices (default 100)")
    g.add_argument("--duration-s", type=float, default=600.0, help="simulated seconds (default 600)")
    g.add_argument(
        "--workload-mix",
        default=DEFAULT_MIX,
        metavar="A,B,...",
        help=f"workloads the devices draw from (default {DEFAULT_MIX}); any of: {', '.join(WORKLOAD_NAMES)}",
    )
    g.add_argument(
        "--assign",
        choices=ASSIGNMENTS,
        default="round-robin",
        help="how devices get a workload from the mix (default round-robin)",
    )
    g.add_argument(
        "--target-load", type=float, default=0.5, help="mean offered load per device (default 0.5)"
    )
    g.add_argument(
        "--load-jitter",
        type=float,
        default=0.2,
        help="each device's load is target x U(1 - j, 1 + j) (default 0.2)",
    )
    g.add_argument(
        "--tasks", default="digits,fashion,uci-digits", help="task names (default digits,fashion,uci-digits)"
    )
    g.add_argument("--zipf", type=float, default=0.0, help="Zipf exponent of task popularity (default 0)")
    g.add_argument("--seed", type=seed_arg, default=1, help="random seed (default 1)")
    d = p.add_argument_group("device")
    d.add_argument(
        "--profile",
        help="built-in device profile: pi4, pi5, jetson-orin-nano, x86-1core (this or --profile-file)",
    )
    d.add_argument("--profile-file", help="device profile TOML (see docs/profiles.md; this or --profile)")
    d.add_argument(
        "--cores",
        type=int,
        metavar="N",
        help="run the profile on its first N cores (1: one-core time sharing; the fleet model "
        "time-shares all of a device's cores, so DART runs there as dart:split=off)",
    )
    add_control_arguments(d)
    d.add_argument("--round-target", type=int, default=0, help="samples owed per round (default 0)")
    p.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="SPEC",
        help=f"policy (repeatable; default: {' '.join(DEFAULT_POLICIES)}); "
        "dart[:V | :key=value,...], inference-only, inference-first[:m], static:<x> (docs/allocator.md)",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: up to 2, one per CPU)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    add_store_arguments(p)
    p.set_defaults(handler=run)


def _check(args: argparse.Namespace) -> None:
    from dartfl.cli.simulation import check_slo_and_queue

    if args.devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {args.devices}")
    if not (math.isfinite(args.duration_s) and args.duration_s > 0):
        raise ConfigError(f"--duration-s must be > 0, got {args.duration_s}")
    if not (math.isfinite(args.target_load) and args.target_load > 0):
        raise ConfigError(
            f"--target-load must be > 0 (a fraction of device capacity, e.g. 0.5), got {args.target_load}"
        )
    if not 0.0 <= args.load_jitter < 1.0:
        raise ConfigError(f"--load-jitter must lie in [0, 1), got {args.load_jitter}")
    check_slo_and_queue(args)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if not (math.isfinite(args.period_s) and args.period_s > 0):
        raise ConfigError(f"--period-s must be > 0, got {args.period_s}")
    if args.period_s >= args.duration_s:
        raise ConfigError(
            f"--period-s {args.period_s:g} is not shorter than --duration-s {args.duration_s:g}: "
            "a run of one control period trains nothing; lengthen --duration-s or shorten --period-s"
        )
    periods = args.duration_s / args.period_s
    if abs(periods - round(periods)) > 1e-6 * periods:
        raise ConfigError(
            f"--duration-s {args.duration_s:g} is not a whole number of --period-s {args.period_s:g} "
            f"periods ({periods:.4g}), and the fleet simulates whole periods; use --duration-s "
            f"{math.ceil(periods) * args.period_s:g} or a --period-s that divides it"
        )
    n_tasks = len(parse_tasks(args.tasks))
    if n_tasks > MAX_TASKS:
        raise ConfigError(
            f"--tasks names {n_tasks:,} tasks; the fleet simulator models at most {MAX_TASKS} per device "
            "(each period orders every pair of tasks' batches); name fewer tasks"
        )
    cells = periods * n_tasks
    if cells > CHUNK_CELLS:
        raise ConfigError(
            f"one device's {args.duration_s:g} s at --period-s {args.period_s:g} is {periods:.3g} "
            f"periods, more than a worker holds ({CHUNK_CELLS:,} periods x tasks); shorten "
            "--duration-s or lengthen --period-s"
        )
    if args.devices * periods > DEVICE_PERIODS:
        raise ConfigError(
            f"{args.devices:,} devices x {periods:.3g} periods is more than the {DEVICE_PERIODS:.0e} "
            "device-periods the fleet simulator runs (about an hour on 2 cores; 1,000 devices x 1 hour "
            "is 1.4e7); use fewer --devices or a shorter --duration-s"
        )


def _mix(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    unknown = [n or "(an empty name)" for n in names if n not in WORKLOAD_NAMES]
    if not names or unknown:
        raise ConfigError(
            f"--workload-mix: unknown workload(s) {', '.join(unknown) or '(none given)'}; "
            f"valid: {', '.join(WORKLOAD_NAMES)}"
        )
    return names


def run(args: argparse.Namespace) -> int:
    from dartfl.cli.simulation import device_profile, say_unused_task_costs
    from dartfl.sim.fleet import FleetConfig, run_fleet
    from dartfl.sim.fleet_policies import make_fleet_policy
    from dartfl.types import TaskSpec
    from workloads.fleet import FleetWorkloads, device_counts

    _check(args)
    profile = device_profile(args)
    specs = distinct(_time_shared(spec, profile) for spec in args.policies or DEFAULT_POLICIES)
    for spec in specs:
        make_fleet_policy(spec)  # a bad name fails before any work
    if not args.no_store:
        from dartfl.cli.recording import check_store

        check_store(args.store)  # and a damaged or read-only store
    task_names = parse_tasks(args.tasks)
    say_unused_task_costs(profile, task_names)
    config = FleetConfig(period_s=args.period_s, round_s=args.round_s, round_target_samples=args.round_target)
    tasks = [TaskSpec(name, args.slo_ms / 1e3, args.queue_capacity) for name in task_names]
    workloads = FleetWorkloads(
        mix=_mix(args.workload_mix),
        assignment=args.assign,
        duration_s=float(args.duration_s),
        target_load=float(args.target_load),
        load_jitter=float(args.load_jitter),
        task_names=task_names,
        zipf=float(args.zipf),
        seed=int(args.seed),
        period_s=float(args.period_s),
        profile=profile,
    )
    workers = args.workers or max(1, min(2, os.cpu_count() or 1))
    cells = args.duration_s / args.period_s * len(task_names)
    chunk = max(
        1,
        min(
            500,
            math.ceil(args.devices / workers),
            int(CHUNK_CELLS // cells),
            PAIR_CELLS // len(task_names) ** 2,
        ),
    )
    started = time.perf_counter()
    results = _with_progress(
        sys.stderr.isatty() and not args.json,
        lambda report: run_fleet(
            partial(device_counts, workloads),
            args.devices,
            profile,
            tasks,
            specs,
            config,
            workers=workers,
            chunk_devices=chunk,
            on_progress=report,
        ),
    )
    wall_s = time.perf_counter() - started
    summaries = [_summary(results[spec], spec) for spec in specs]
    run_id = None if args.no_store else _record(args, workloads, summaries, wall_s)
    if args.json:
        json.dump({"results": summaries, "run_id": run_id, "wall_s": wall_s}, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_table(summaries, args, profile, wall_s)
        if run_id is not None:
            print(f"recorded as run {run_id} in the run store")
    return 0


def _time_shared(spec: str, profile: DeviceProfile) -> str:
    """`spec`, or the same DART with its split off where it would split `profile`'s cores.

    The fleet model time-shares every core of a device (docs/fleet.md), so DART runs here as
    `dart:split=off`, under that name, and a note says so; `dartfl sim` models the split. Any
    other splitting spec (`dart:V`, whose knobs cannot be mixed with keys) is left for the
    simulator's own error, which names the ways out."""
    from dartfl.sim.fleet_policies import make_fleet_policy

    if not (profile.cores.can_split and make_fleet_policy(spec).splits_cores):
        return spec
    name, sep, knobs = spec.partition(":")
    if sep and "=" not in knobs:
        return spec
    # An explicit split=on is replaced, not followed by a second split key (refused as given twice).
    others = [k for k in knobs.split(",") if k.partition("=")[0].strip() != "split"] if sep else []
    shared = f"{name}:" + ",".join([*(k.strip() for k in others), "split=off"])
    print(
        f"note: the fleet model time-shares the {profile.cores.count} cores of {profile.name}, so "
        f"{spec} runs as {shared}; `dartfl sim` models the split",
        file=sys.stderr,
    )
    return shared


def _with_progress(show: bool, work: Any) -> dict[str, FleetResult]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("simulating fleet"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True, disable=not show) as bar:
        job = bar.add_task("fleet", total=1.0)
        out: dict[str, FleetResult] = work(lambda fraction: bar.update(job, completed=fraction))
    return out


def _summary(result: FleetResult, spec: str) -> dict[str, Any]:
    from dartfl.store import to_jsonable

    summary: dict[str, Any] = to_jsonable(result.aggregates())
    summary["policy"] = spec  # keyed by the spec as written, as `dartfl sim` does
    return summary


def _record(
    args: argparse.Namespace, workloads: FleetWorkloads, summaries: list[dict[str, Any]], wall_s: float
) -> int:
    from pathlib import Path

    from dartfl.cli.recording import run_config
    from dartfl.paths import default_store_path
    from dartfl.profiles import profile_to_toml
    from dartfl.store import RunStore

    config = run_config(args, leave_out=frozenset({"store"}))
    spec = asdict(workloads)
    spec["profile"] = workloads.profile.name
    config["workloads"] = spec
    config["profile_toml"] = profile_to_toml(workloads.profile)  # the profile as run: files move
    config["wall_s"] = wall_s
    label = f"fleet of {args.devices} x {args.duration_s:g} s on {workloads.profile.name}"
    path = Path(args.store) if args.store else default_store_path()
    with RunStore(path) as store:
        run_id = store.start_run("fleet", label, config, started_s=time.time() - wall_s)
        for summary in summaries:
            store.add_result(run_id, summary["policy"], summary)
        store.finish_run(run_id, "ok")
    return run_id


def _print_table(
    summaries: list[dict[str, Any]], args: argparse.Namespace, profile: DeviceProfile, wall_s: float
) -> None:
    from rich.console import Console
    from rich.table import Table

    from dartfl.cli.tables import cell

    table = Table(
        title=f"fleet of {args.devices} devices x {args.duration_s:g} s, profile {profile.name}, "
        f"load {args.target_load:g} +-{args.load_jitter:g}, SLO {args.slo_ms:g} ms ({wall_s:.1f} s wall)"
    )
    columns = (
        "policy",
        "SLO met",
        "SLO p5/p50",
        "< 99% SLO",
        "harvest",
        "harvest p5/p50/p95",
        "trained",
        "rejected",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in summaries:
        table.add_row(
            r["policy"],
            f"{100 * r['slo_attainment']:.2f}%",
            f"{100 * r['slo_attainment_p5']:.1f}% / {100 * r['slo_attainment_p50']:.1f}%",
            str(r["devices_below_99pct_slo"]),
            cell(r["harvest_efficiency"], ".3f"),
            " / ".join(cell(r[f"harvest_efficiency_p{q}"], ".2f") for q in (5, 50, 95)),
            f"{r['train_samples']:.3g}",
            f"{r['rejected']:.0f}",
        )
    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print(table)
    console.print("estimates of a fluid model; docs/fleet.md gives its approximations and validation")
