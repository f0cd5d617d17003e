"""The datacenter-mode targets: DART vs sync and vs the best static split, eta ablation, speed.

    .venv/bin/python benchmarks/dc_targets.py [--json benchmarks/results/dc_targets.json]

Scenarios (64 and 256 simulated GPUs, 7B-class model, log-normal lengths with p99/median 10,
eta = 2, 200 steps):
- `issue`: median 1,024 tokens growing 3x, truncated at 8,192, 512-token prompts (the
  issue's and the public check's workload);
- `r1-growth`: median 256 growing 16x, truncated at 32,768, as reasoning lengths grow in
  R1-style training (DeepSeek-R1-Zero's mean response grows from hundreds to thousands);
- `long-prompt`: the same growth with 4,096-token prompts (code, documents, agent context).
Targets: DART >= 1.6x sync and >= 1.1x the best static split of a sweep, staleness never
above eta; 1,024 GPUs x 1,000 steps simulated in under 60 s. For each scenario the oracle
headroom (`reallocation_headroom`: free switches to each quarter's best split) bounds what
any reallocation could gain over the best static split.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from dartfl.datacenter import DcConfig, LogNormalLengths, make_dc_policy, model_spec, simulate
from dartfl.datacenter.sweep import reallocation_headroom, sweep_static

# name -> (median tokens at step 0, drift factor, max tokens, prompt tokens)
SCENARIOS: dict[str, tuple[float, float, int, int]] = {
    "issue": (1024.0, 3.0, 8192, 512),
    "r1-growth": (256.0, 16.0, 32768, 512),
    "long-prompt": (256.0, 16.0, 32768, 4096),
}


def targets(scenario: str, gpus: int, steps: int, seed: int) -> dict[str, Any]:
    median, drift, max_tokens, prompt = SCENARIOS[scenario]
    cfg = DcConfig(gpus=gpus, model=model_spec("7b"), steps=steps, eta=2, prompt_tokens=prompt)
    lengths = LogNormalLengths(median_tokens=median, drift=drift, max_tokens=max_tokens)
    out: dict[str, Any] = {"scenario": scenario, "gpus": gpus, "steps": steps, "drift": drift, "seed": seed}
    for spec in ("sync", "one-step", "dart"):
        out[spec] = simulate(cfg, make_dc_policy(spec), lengths, np.random.default_rng(seed)).summary()
    best, curve = sweep_static(cfg, lengths, seed)
    out["best_static"] = best.summary()
    out["static_curve"] = curve
    dart = out["dart"]["samples_per_s"]
    out["dart_over_sync"] = dart / out["sync"]["samples_per_s"]
    out["dart_over_best_static"] = dart / out["best_static"]["samples_per_s"]
    headroom = reallocation_headroom(cfg, lengths, seed)
    out["headroom"] = {
        "ratio": headroom.ratio,
        "best_fixed": headroom.best_fixed,
        "phase_best": list(headroom.phase_best),
    }
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
        "targets": [targets(name, g, 200, args.seed) for name in SCENARIOS for g in (64, 256)],
        "eta_ablation": eta_ablation(64, 100, args.seed),
        "speed": speed(args.seed),
    }
    for t in results["targets"]:
        print(
            f"{t['scenario']:11s} {t['gpus']:3d} GPUs: dart {t['dart']['samples_per_s']:.1f} samples/s, sync "
            f"{t['sync']['samples_per_s']:.1f}, best static {t['best_static']['policy']} "
            f"{t['best_static']['samples_per_s']:.1f}; dart/sync {t['dart_over_sync']:.2f}x, "
            f"dart/best-static {t['dart_over_best_static']:.3f}x, "
            f"staleness max {t['dart']['staleness_max']}; "
            f"headroom {t['headroom']['ratio']:.3f}x (best split per quarter {t['headroom']['phase_best']})"
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
