"""Smooth traffic keeps today's harvest: DART against today's DART (from git, base_dart.py).

Poisson, the bundled Azure conversation trace and Pareto on/off, each at mean load 0.5, on
the scenario profiles (benchmarks/scenarios.py) and the Jetson, seed 1; the target is a
harvest at least 97% of today's DART's on every row.

    .venv/bin/python benchmarks/smooth.py [--json out.json] [--jobs 2]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from base_dart import BASE_COMMIT, load_base_dart
from scenarios import TASKS, profiles_and_slos
from verdict import bench_parser, run_rows

import workloads
from dartfl.metrics import summarize
from dartfl.policies import DartPolicy
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.types import DeviceProfile, TaskSpec

WORKLOADS = ("poisson", "azure-conv", "pareto-onoff")
TARGET = 0.97


def evaluate(job: tuple[str, DeviceProfile, float]) -> dict[str, Any]:
    workload, profile, slo_s = job
    if workload == "azure-conv":
        base = workloads.bundled_azure_conv(TASKS)
    else:
        base = workloads.generate(
            workload,
            duration_s=600.0,
            rate_per_s=100.0,
            task_names=TASKS,
            rng=np.random.default_rng(1),
            zipf=0.8,
        )
    arrivals = workloads.rescale_to_load(base, profile, 0.5)
    tasks = [TaskSpec(name, slo_s) for name in TASKS]
    row: dict[str, Any] = {"scenario": f"{workload}/{profile.name}/{slo_s * 1e3:g}ms"}
    for label, policy in (("dart", DartPolicy()), ("base", load_base_dart().DartPolicy())):
        m = summarize(simulate(arrivals, profile, tasks, policy, SimConfig(), np.random.default_rng(1)))
        row[f"{label}_slo"], row[f"{label}_harvest"] = m["slo_attainment"], m["harvest_efficiency"]
    row["harvest_ratio"] = row["dart_harvest"] / row["base_harvest"]
    row["ok"] = row["harvest_ratio"] >= TARGET
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"| scenario | DART SLO / harvest | DART@{BASE_COMMIT} SLO / harvest | harvest ratio |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['dart_slo']:.4f} / {r['dart_harvest']:.3f} "
            f"| {r['base_slo']:.4f} / {r['base_harvest']:.3f} | {r['harvest_ratio']:.3f} |"
        )
    worst = min(rows, key=lambda r: r["harvest_ratio"])
    lines.append(
        f"\n{sum(r['ok'] for r in rows)} of {len(rows)} rows keep >= {TARGET:.0%} of today's harvest; "
        f"the lowest ratio is {worst['harvest_ratio']:.3f} ({worst['scenario']})."
    )
    return "\n".join(lines)


def main() -> None:
    args = bench_parser(__doc__, cases=False).parse_args()
    profiles = [*profiles_and_slos(), (get_profile("jetson-orin-nano"), 0.03)]
    run_rows(args, evaluate, [(w, p, slo) for p, slo in profiles for w in WORKLOADS], markdown)


if __name__ == "__main__":
    main()
