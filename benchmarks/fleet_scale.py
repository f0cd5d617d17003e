"""Fleet simulator at scale: wall time for N devices x T simulated seconds (default 1,000 x 1 h).

Each device gets its own workload from the mix (round-robin, own seed, load 0.5 +-20%), as
`dartfl fleet` builds it; the time covers generating every device's arrivals, binning them,
and running every policy over the whole fleet. Prints a line per run and appends one JSON line
to --out (default: print only).

    .venv/bin/python benchmarks/fleet_scale.py [--devices 1000] [--duration-s 3600] [--workers 2]
        [--policy dart] [--out fleet_scale.jsonl]

`--validate` instead runs one device per (profile, workload, load, policy) through both the
fleet model and the exact event simulator and prints how far apart they are (docs/fleet.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.metrics import summarize
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.sim.fleet import FleetArrivals, FleetConfig, run_fleet, simulate_fleet
from dartfl.sim.fleet_policies import make_fleet_policy
from dartfl.types import TaskSpec
from workloads.fleet import DEFAULT_MIX, FleetWorkloads, device_counts

VALIDATION_POLICIES = ("dart", "inference-only", "inference-first:4", "inference-first:16", "static:0.7")


def validate_one(
    profile_name: str, workload: str, load: float, spec: str, duration_s: float, cores: int = 1
) -> dict[str, Any]:
    """One device through the exact simulator and the fleet model, same arrivals."""
    from workloads import generate, rate_for_load

    names = ("digits", "fashion", "letters")
    profile = get_profile(profile_name).with_cores(cores)
    rate = rate_for_load(profile, names, (1 / 3, 1 / 3, 1 / 3), load)
    arrivals = generate(
        workload, duration_s=duration_s, rate_per_s=rate, task_names=names, rng=np.random.default_rng(3)
    )
    tasks = [TaskSpec(n, 0.25) for n in names]
    # The fluid model does not refuse by deadline (docs/fleet.md): nor does the exact run here.
    exact = summarize(
        simulate(arrivals, profile, tasks, make_policy(spec), SimConfig(deadline_admission=False))
    )
    fleet = simulate_fleet(
        FleetArrivals.from_arrivals([arrivals], 0.25), profile, tasks, make_fleet_policy(spec)
    )
    return {
        "profile": profile_name,
        "workload": workload,
        "load": load,
        "policy": spec,
        "exact_slo": exact["slo_attainment"],
        "fleet_slo": float(fleet.slo_attainment[0]),
        "exact_train": exact["train_samples"],
        "fleet_train": float(fleet.trained_samples[0]),
        "exact_rejected": exact["rejected"],
        "fleet_rejected": float(fleet.rejected[0]),
    }


def validate(args: argparse.Namespace) -> None:
    grid = list(
        itertools.product(
            args.profiles.split(","),
            args.workloads.split(","),
            [float(x) for x in args.loads.split(",")],
            args.policies or VALIDATION_POLICIES,
            [args.duration_s],
            [args.cores],
        )
    )
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(validate_one, *zip(*grid, strict=True)))
    header = f"{'profile':17s}{'workload':13s}{'load':>5s}  {'policy':19s}{'SLO exact':>10s}{'fleet':>8s}"
    print(header + f"{'diff':>7s}{'trained exact':>15s}{'fleet':>10s}{'ratio':>7s}")
    for r in rows:
        ratio = r["fleet_train"] / r["exact_train"] if r["exact_train"] else float("nan")
        print(
            f"{r['profile']:17s}{r['workload']:13s}{r['load']:5.1f}  {r['policy']:19s}{r['exact_slo']:10.4f}"
            f"{r['fleet_slo']:8.4f}{r['fleet_slo'] - r['exact_slo']:+7.3f}{r['exact_train']:15d}"
            f"{r['fleet_train']:10.0f}{ratio:7.3f}"
        )
    diffs = [abs(r["fleet_slo"] - r["exact_slo"]) for r in rows]
    ratios = [r["fleet_train"] / r["exact_train"] for r in rows if r["exact_train"] > 1000]
    print(
        f"|SLO diff| median {np.median(diffs):.3f}, p90 {np.percentile(diffs, 90):.3f}, "
        f"max {max(diffs):.3f}; "
        f"trained ratio median {np.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
    )
    if args.out:
        with args.out.open("a") as f:
            for r in rows:
                f.write(json.dumps({"benchmark": "fleet_validation", **r}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--duration-s", type=float, default=3600.0)
    parser.add_argument("--profile", default="pi4")
    parser.add_argument(
        "--cores", type=int, default=1, help="the profile's cores (1, the default: the figures before cores)"
    )
    parser.add_argument("--policy", action="append", dest="policies", help="repeatable (default: dart)")
    parser.add_argument("--mix", default=DEFAULT_MIX)
    parser.add_argument("--target-load", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="append the JSON line here")
    parser.add_argument("--validate", action="store_true", help="compare with the exact simulator instead")
    parser.add_argument("--profiles", default="pi4,pi5", help="--validate: profiles")
    parser.add_argument(
        "--workloads", default="poisson,mmpp,pareto-onoff,gamma", help="--validate: workloads"
    )
    parser.add_argument("--loads", default="0.3,0.5,0.7", help="--validate: loads")
    args = parser.parse_args()
    if args.validate:
        if args.duration_s == 3600.0:
            args.duration_s = 600.0  # the exact simulator is the slow side
        validate(args)
        return

    profile = get_profile(args.profile).with_cores(args.cores)
    names = ("digits", "fashion", "letters")
    specs = args.policies or ["dart"]
    workloads = FleetWorkloads(
        mix=tuple(args.mix.split(",")),
        assignment="round-robin",
        duration_s=args.duration_s,
        target_load=args.target_load,
        load_jitter=0.2,
        task_names=names,
        zipf=0.0,
        seed=args.seed,
        period_s=0.25,
        profile=profile,
    )
    tasks = [TaskSpec(n, 0.25) for n in names]
    chunk = min(500, math.ceil(args.devices / args.workers))
    started = time.perf_counter()
    results = run_fleet(
        partial(device_counts, workloads),
        args.devices,
        profile,
        tasks,
        specs,
        FleetConfig(),
        workers=args.workers,
        chunk_devices=chunk,
    )
    wall_s = time.perf_counter() - started
    row = {
        "benchmark": "fleet_scale",
        "devices": args.devices,
        "duration_s": args.duration_s,
        "device_hours": args.devices * args.duration_s / 3600.0,
        "policies": specs,
        "workers": args.workers,
        "profile": args.profile,
        "mix": args.mix,
        "wall_s": round(wall_s, 2),
        "requests": int(next(iter(results.values())).requests.sum()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "slo_attainment": {s: round(r.aggregates()["slo_attainment"], 4) for s, r in results.items()},
        "harvest_efficiency": {s: round(r.aggregates()["harvest_efficiency"], 4) for s, r in results.items()},
    }
    print(
        f"{args.devices} devices x {args.duration_s:g} s, {len(specs)} policies ({', '.join(specs)}), "
        f"{args.workers} workers: {wall_s:.1f} s wall ({row['requests']:,} requests)"
    )
    line = json.dumps(row)
    print(line)
    if args.out:
        with args.out.open("a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
