"""`dartfl sim`: run several policies on one workload and compare them.

The contract outsiders script against (keep it stable): `--json` prints one object
`{"results": [...]}` with one entry per policy, each with at least `policy`, `requests`,
`completed`, `rejected`, `slo_attainment`, `p50_latency_s`, `p99_latency_s`,
`train_samples`, `train_samples_per_task`, `harvest_efficiency`, `max_backlog`,
`decision_us_p50`. A policy that fails while it runs (a plugin's bug, docs/plugins.md) has no
entry; the object then also has `failed`, a `{policy, error}` object per such policy, and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dartfl.cli.workload_args import add_workload_arguments, arrivals_from_args

if TYPE_CHECKING:
    from dartfl.arrivals import Arrivals

DEFAULT_POLICIES = ("dart", "inference-only", "inference-first", "static:0.5")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate policies on a workload and compare them",
        description="Replay one workload through a simulated device under each policy and compare.",
    )
    add_workload_arguments(p)
    add_device_arguments(p)
    p.add_argument(
        "--policy",
        action="append",
        dest="policies",
        metavar="SPEC",
        help=f"policy to run (repeatable; default: {' '.join(DEFAULT_POLICIES)}); see docs/allocator.md, "
        "or an installed plugin's name (docs/plugins.md)",
    )
    p.add_argument(
        "--loss-weights", choices=("uniform", "demand"), help="override each policy's loss weighting"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", type=Path, metavar="F.png", help="write the over-time PNG here (default: none)")
    p.add_argument(
        "--no-plot", action="store_true", help="write no PNG, whatever --plot says (kept for old scripts)"
    )
    add_store_arguments(p)
    p.set_defaults(handler=run)


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("device", "one of --profile or --profile-file is required")
    g.add_argument(
        "--profile", metavar="NAME", help="built-in device profile: pi4, pi5, jetson-orin-nano, x86-1core"
    )
    g.add_argument(
        "--profile-file", type=Path, metavar="F.toml", help="device profile TOML (see docs/profiles.md)"
    )
    g.add_argument(
        "--cores",
        type=int,
        metavar="N",
        help="run the profile on its first N cores (1: one-core time sharing, as before cores were modelled)",
    )
    add_control_arguments(g)
    g.add_argument(
        "--round-target", type=int, default=0, help="samples owed per round (default 0: no deadline pressure)"
    )
    g.add_argument(
        "--no-deadline-admission",
        action="store_true",
        help="admit every request a queue has room for, even one that cannot make its SLO "
        "(the behaviour before deadline-aware admission; docs/allocator.md)",
    )
    g.add_argument(
        "--batch-hold",
        action="store_true",
        help="hold a few waiting requests up to 10 ms under dense traffic so they share a batch, "
        "as the real agent does (for predicting an agent; dartfl/executor/batch_hold.py)",
    )
    g.add_argument(
        "--network-thread",
        action="store_true",
        help="receive and admit requests on a thread of their own ahead of the executor, as the "
        "real agent does on a core its compute leaves free: the profile's receive-s and "
        "ingress-s delay a request on its way in instead of taking the executor's time",
    )


def add_control_arguments(g: argparse._ArgumentGroup) -> None:
    """What a simulated device is held to and how often it decides; `sim` and `fleet` share them."""
    g.add_argument(
        "--slo-ms", type=float, default=250.0, help="latency SLO of every task in ms (default 250)"
    )
    g.add_argument("--queue-capacity", type=int, default=1024, help="per-task queue bound (default 1024)")
    g.add_argument("--period-s", type=float, default=0.25, help="control period in s (default 0.25)")
    g.add_argument("--round-s", type=float, default=60.0, help="FL round length in s (default 60)")


def add_store_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, help="run store (default: $DARTFL_STORE or the per-user data dir)")
    p.add_argument("--no-store", action="store_true", help="do not record the run")


def run(args: argparse.Namespace) -> int:
    from dartfl.cli.output_paths import check_image_path
    from dartfl.cli.simulation import device_setup, run_policies, say_unused_task_costs

    plot_path = None if args.no_plot or args.plot is None else check_image_path(args.plot, "--plot")
    profile, config = device_setup(args)
    arrivals = arrivals_from_args(args, profile)
    say_unused_task_costs(profile, arrivals.task_names)
    specs = args.policies or list(DEFAULT_POLICIES)
    if not args.no_store:
        from dartfl.cli.recording import check_store

        check_store(args.store)  # a damaged or read-only store is named before the simulation
    started_s = time.time()  # the run store's start of the run, which is recorded once it is over
    outcome = run_policies(
        arrivals,
        profile,
        specs,
        config,
        args.loss_weights,
        seed=args.seed,
        slo_s=args.slo_ms / 1e3,
        queue_capacity=args.queue_capacity,
        progress=sys.stderr.isatty(),
    )
    for failure in outcome.failures:  # the others' results stand, and are shown and recorded
        print(f"dartfl: failed: {failure['error']}", file=sys.stderr)
    for summary in outcome.summaries:
        slow = _slow_decisions(summary, config.period_s)
        if slow:
            print(f"dartfl: warning: {slow}", file=sys.stderr)
    run_id = None
    if not outcome.summaries:
        if args.json:
            json.dump({"results": [], "run_id": run_id, "failed": outcome.failures}, sys.stdout)
            sys.stdout.write("\n")
        return 1
    if not args.no_store:
        from dartfl.cli.recording import record_sim

        run_id = record_sim(args.store, args, arrivals, profile, outcome, started_s=started_s)
    if plot_path is not None:
        from dartfl.cli.plots import plot_sim

        plot_sim(outcome.records, plot_path, title=_title(args, arrivals, profile.name))
    if args.json:
        failed = {"failed": outcome.failures} if outcome.failures else {}
        json.dump({"results": outcome.summaries, "run_id": run_id, **failed}, sys.stdout, default=float)
        sys.stdout.write("\n")
    else:
        from dartfl.cli.tables import print_sim_table

        print_sim_table(outcome.summaries, arrivals, profile)
        if run_id is not None:
            print(f"recorded as run {run_id} in the run store")
        if plot_path is not None:
            print(f"plot: {plot_path}")
    return 1 if outcome.failures else 0


def _slow_decisions(summary: dict[str, Any], period_s: float) -> str:
    """A warning for a policy whose decisions are slow enough to matter on a device ("" if not)."""
    from dartfl.policies.base import SLOW_DECISION_SHARE

    p99_us = summary.get("decision_us_p99")
    if p99_us is None or p99_us * 1e-6 <= SLOW_DECISION_SHARE * period_s:
        return ""
    return (
        f"policy {summary['policy']!r} took {p99_us / 1e3:.1f} ms per decision (p99), "
        f"{p99_us * 1e-4 / period_s:.0f}% of the {period_s * 1e3:g} ms control period: the simulator "
        "does not charge it, but on a device every request waits it out (docs/plugins.md)"
    )


def _title(args: argparse.Namespace, arrivals: Arrivals, profile: str) -> str:
    """What the run was, for the plot: workload, load, length, device and SLO."""
    trace = getattr(args, "trace", None)
    source = f"trace {Path(trace).name}" if trace else f"{args.workload} workload"
    load = getattr(args, "target_load", None)
    at = f" at load {load:g}" if load is not None else ""
    return (
        f"dartfl sim: {source}{at}, {arrivals.duration_s:g} s, {len(arrivals.times_s):,} requests, "
        f"on {profile}, SLO {args.slo_ms:g} ms"
    )
