"""Fleet simulator at scale: wall time for N devices x T simulated seconds (default 1,000 x 1 h).

Each device gets its own workload from the mix (round-robin, own seed, load 0.5 +-20%), as
`dartfl fleet` builds it; the time covers generating every device's arrivals, binning them,
and running every policy over the whole fleet. Prints a line per run and appends one JSON line
to --out (default: print only).

    .venv/bin/python benchmarks/fleet_scale.py [--devices 1000] [--duration-s 3600] [--workers 2]
        [--policy dart] [--out fleet_scale.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from functools import partial
from pathlib import Path

from dartfl.cli.fleet_cmd import DEFAULT_MIX, FleetWorkloads, device_counts
from dartfl.profiles import get_profile
from dartfl.sim.fleet import FleetConfig, run_fleet
from dartfl.types import TaskSpec


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--duration-s", type=float, default=3600.0)
    parser.add_argument("--profile", default="pi4")
    parser.add_argument("--policy", action="append", dest="policies", help="repeatable (default: dart)")
    parser.add_argument("--mix", default=DEFAULT_MIX)
    parser.add_argument("--target-load", type=float, default=0.5)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="append the JSON line here")
    args = parser.parse_args()

    profile = get_profile(args.profile)
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
