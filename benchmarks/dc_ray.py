"""The Ray engine's targets: DART against sync and verl-dynamic in the same run.

    scripts/loopback-run .venv/bin/python benchmarks/dc_ray.py [--json benchmarks/results/dc_ray.json]

Starts Ray, so run it inside the loopback-only namespace. For each task, worker count and
seed (default: the multi-turn `tools` task, 3 workers, seeds 1 2 3), one `run_ray` session runs
`sync`, `verl-dynamic` and `dart` for 120 steps, one after the other, each on fresh warmed-up
workers (the machine has 2 cores: nothing else should run beside it). 120 steps, about 30 s
an asynchronous run and 3 minutes of `sync`, because 30-step runs (8-13 s) of one and the same
layout differ by up to 15% on the 2-core VM, more than the policies do (docs/datacenter.md,
"Longer runs"). Targets on `tools`:
DART >= 1.2x verl-dynamic and >= 1.3x sync in samples/s, reward rising, no trained sample
past the staleness bound. Prints the ratios (samples/s and trained tokens/s), the reward
curves' first value and last-five mean, switches, migrated sequences and idle ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from ray_engine import RayRunConfig, run_ray

POLICIES = ("sync", "verl-dynamic", "dart")


def same_run(task: str, workers: int, seed: int, steps: int) -> dict[str, Any]:
    runs = run_ray(RayRunConfig(workers=workers, steps=steps, seed=seed, task=task), list(POLICIES))
    out: dict[str, Any] = {"task": task, "workers": workers, "seed": seed, "steps": steps}
    for spec, run in zip(POLICIES, runs, strict=True):
        out[spec] = run.summary()
    dart = out["dart"]
    for rival in ("sync", "verl-dynamic"):
        out[f"dart_over_{rival}"] = dart["samples_per_s"] / out[rival]["samples_per_s"]
        out[f"dart_over_{rival}_tokens"] = dart["tokens_per_s"] / out[rival]["tokens_per_s"]
    return out


def machine() -> dict[str, Any]:
    cpu = platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--tasks", nargs="+", default=["tools"], choices=("sort", "tools"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, nargs="+", default=[3])
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()
    rows = []
    for task in args.tasks:
        for w in args.workers:
            for s in args.seeds:
                r = same_run(task, w, s, args.steps)
                rows.append(r)
                line = ", ".join(
                    f"{p} {r[p]['samples_per_s']:.1f} (sw {r[p]['switches']}, stale {r[p]['staleness_max']}, "
                    f"reward {r[p]['reward_first']:.3f} -> {r[p]['reward_last5']:.3f})"
                    for p in POLICIES
                )
                print(
                    f"{task} {w} workers seed {s}: {line}; "
                    f"DART/verl-dynamic {r['dart_over_verl-dynamic']:.2f}x, "
                    f"DART/sync {r['dart_over_sync']:.2f}x",
                    flush=True,
                )
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(
                        json.dumps({"machine": machine(), "runs": rows}, indent=1, default=float)
                    )
    for rival, target in (("verl-dynamic", 1.2), ("sync", 1.3)):
        ratios = [r[f"dart_over_{rival}"] for r in rows]
        met = "met" if min(ratios) >= target else "NOT met"
        print(
            f"DART/{rival}: min {min(ratios):.2f}x, mean {sum(ratios) / len(ratios):.2f}x; "
            f"target >= {target}x {met}"
        )


if __name__ == "__main__":
    main()
