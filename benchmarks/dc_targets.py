"""The datacenter-mode targets: DART vs sync and vs the best static split, eta ablation, speed.

    .venv/bin/python benchmarks/dc_targets.py [--json benchmarks/results/dc_targets.json]

Scenarios: 64 and 256 simulated GPUs, 7B-class model, log-normal lengths (p99/median 10,
truncated at 8192) whose median grows 3x over 200 steps, eta = 2. Targets: DART >= 1.6x
sync and >= 1.1x the best static split of a sweep, staleness never above eta; 1,024 GPUs x
1,000 steps simulated in under 60 s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.datacenter import DcConfig, LogNormalLengths, make_dc_policy, model_spec, simulate
from dartfl.datacenter.sweep import sweep_static


def targets(gpus: int, steps: int, drift: float, seed: int) -> dict[str, Any]:
    cfg = DcConfig(gpus=gpus, model=model_spec("7b"), steps=steps, eta=2)
    lengths = LogNormalLengths(drift=drift)
    out: dict[str, Any] = {"gpus": gpus, "steps": steps, "drift": drift, "seed": seed}
    for spec in ("sync", "one-step", "dart"):
        out[spec] = simulate(cfg, make_dc_policy(spec), lengths, np.random.default_rng(seed)).summary()
    best, curve = sweep_static(cfg, lengths, seed)
    out["best_static"] = best.summary()
    out["static_curve"] = curve
    dart = out["dart"]["samples_per_s"]
    out["dart_over_sync"] = dart / out["sync"]["samples_per_s"]
    out["dart_over_best_static"] = dart / out["best_static"]["samples_per_s"]
    return out


def eta_ablation(gpus: int, steps: int, seed: int) -> list[dict[str, Any]]:
    """Best static throughput per staleness bound (the shape of verl's s ablation)."""
    rows = []
    lengths = LogNormalLengths()
    for eta in (0, 1, 2, 3, 4, 6):
        cfg = DcConfig(gpus=gpus, model=model_spec("7b"), steps=steps, eta=eta)
        best, _ = sweep_static(cfg, lengths, seed)
        dart = simulate(cfg, make_dc_policy("dart"), lengths, np.random.default_rng(seed)).summary()
        rows.append(
            {
                "eta": eta,
                "best_static": best.policy,
                "best_static_samples_per_s": best.trained_samples / best.makespan_s,
                "dart_samples_per_s": dart["samples_per_s"],
            }
        )
    return rows


def speed(seed: int) -> dict[str, Any]:
    cfg = DcConfig(gpus=1024, model=model_spec("7b"), steps=1000, eta=2)
    start = time.perf_counter()
    run = simulate(cfg, make_dc_policy("dart"), LogNormalLengths(drift=3), np.random.default_rng(seed))
    return {"gpus": 1024, "steps": run.steps, "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    results = {
        "targets": [targets(g, 200, 3.0, args.seed) for g in (64, 256)],
        "eta_ablation": eta_ablation(64, 100, args.seed),
        "speed": speed(args.seed),
    }
    for t in results["targets"]:
        print(
            f"{t['gpus']} GPUs: dart {t['dart']['samples_per_s']:.1f} samples/s, sync "
            f"{t['sync']['samples_per_s']:.1f}, best static {t['best_static']['policy']} "
            f"{t['best_static']['samples_per_s']:.1f}; dart/sync {t['dart_over_sync']:.2f}x, "
            f"dart/best-static {t['dart_over_best_static']:.2f}x, staleness max {t['dart']['staleness_max']}"
        )
    for row in results["eta_ablation"]:
        print(
            f"eta {row['eta']}: best static {row['best_static_samples_per_s']:.1f}, "
            f"dart {row['dart_samples_per_s']:.1f}"
        )
    print(f"1024 GPUs x {results['speed']['steps']} steps: {results['speed']['wall_s']:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
