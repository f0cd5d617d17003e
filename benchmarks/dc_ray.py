"""The Ray engine's target: DART's measured samples/s at least 1.3x `sync` in the same run.

    scripts/loopback-run .venv/bin/python benchmarks/dc_ray.py [--json benchmarks/results/dc_ray.json]

Starts Ray, so run it inside the loopback-only namespace. For each worker count and seed
(default 3 workers, seeds 1 2 3), one `run_ray` session runs `sync` then `dart` for 30 steps
on the toy sorting task, one after the other (the machine has 2 cores: nothing else should
run beside it). Prints DART/sync in samples/s and in trained tokens/s, and the reward
curves' first value and last-five mean.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from dartfl.datacenter.ray_engine import RayRunConfig, run_ray


def same_run(workers: int, seed: int, steps: int) -> dict[str, Any]:
    runs = run_ray(RayRunConfig(workers=workers, steps=steps, seed=seed), ["sync", "dart"])
    sync, dart = (r.summary() for r in runs)
    return {
        "workers": workers,
        "seed": seed,
        "steps": steps,
        "sync": sync,
        "dart": dart,
        "dart_over_sync": dart["samples_per_s"] / sync["samples_per_s"],
        "dart_over_sync_tokens": dart["tokens_per_s"] / sync["tokens_per_s"],
    }


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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, nargs="+", default=[3])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    rows = [same_run(w, s, args.steps) for w in args.workers for s in args.seeds]
    for r in rows:
        sync, dart = r["sync"], r["dart"]
        print(
            f"{r['workers']} workers, seed {r['seed']}: sync {sync['samples_per_s']:.1f} samples/s, "
            f"dart {dart['samples_per_s']:.1f}; dart/sync {r['dart_over_sync']:.2f}x "
            f"(tokens {r['dart_over_sync_tokens']:.2f}x); reward sync {sync['reward_first']:.3f} -> "
            f"{sync['reward_last5']:.3f}, dart {dart['reward_first']:.3f} -> {dart['reward_last5']:.3f}; "
            f"dart switches {dart['switches']}, staleness max {dart['staleness_max']}, "
            f"dropped {dart['dropped_samples']}"
        )
    ratios = [r["dart_over_sync"] for r in rows]
    print(f"dart/sync: min {min(ratios):.2f}x, target >= 1.3x {'met' if min(ratios) >= 1.3 else 'NOT met'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), "runs": rows}, indent=1, default=float))


if __name__ == "__main__":
    main()
