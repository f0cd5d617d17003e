"""Speed of the core: allocator decision time and simulator throughput.

1. DART's decision (update + decide) for 8 tasks on 200 varied observations, median and p99
   in microseconds (CPython, one core), side by side with today's DART loaded from git
   (benchmarks/base_dart.py): both time the same observations in alternating blocks, so a
   machine whose speed drifts slows both alike. Then DART alone on the 4-core `pi4`, where
   it also chooses the split of the cores.
2. One hour of the bundled Azure trace through 6 policies with `dartfl sim` (end to end:
   trace parsing, simulation, metrics), wall time, on the 4-core `pi4` and on one core.
   With `--base COMMIT` the same runs of that commit's tree (git archive) alternate with
   this tree's, so a machine whose speed drifts slows both alike.

    .venv/bin/python benchmarks/perf.py [--json out.json] [--base e0a8b55] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from base_dart import BASE_COMMIT, load_base_dart
from bench_output import print_json

import workloads
from dartfl.executor import StaticCosts
from dartfl.policies import make_policy
from dartfl.policies.base import Policy
from dartfl.profiles import get_profile
from dartfl.types import Observation

TASKS8 = tuple(f"task{k}" for k in range(8))
BLOCK = 1_000  # decisions per block; the two policies alternate blocks


def observations_8_tasks(cores: bool = False) -> list[Observation]:
    """200 varied states (idle, busy, backlogged, behind on the round), seeded. `cores`: of
    the 4-core pi4, as its executor tells a policy (whole-device costs and the split's)."""
    rng = np.random.default_rng(0)
    static = StaticCosts(get_profile("pi4"), TASKS8) if cores else None
    split = static.split if static is not None else None
    base = Observation(
        now_s=30.0,
        period_s=0.25,
        backlog=(0,) * 8,
        oldest_age_s=(0.0,) * 8,
        arrivals_since_last=(0,) * 8,
        slo_misses_since_last=(0,) * 8,
        arrival_rate_per_s=(0.0,) * 8,
        slo_s=(0.25,) * 8,
        batch_fixed_s=(0.001,) * 8,
        per_request_s=(0.005,) * 8,
        max_batch=32,
        microbatch_fixed_s=0.012,
        per_sample_s=0.023,
        max_microbatch=32,
        round_deadline_s=60.0,
        round_target_samples=2000,
        round_trained_samples=500,
    )
    if static is not None:
        base = dataclasses.replace(
            base,
            batch_fixed_s=static.batch_fixed_s,
            per_request_s=static.per_request_s,
            microbatch_fixed_s=static.microbatch_fixed_s,
            per_sample_s=static.per_sample_s,
        )
    observations = []
    for _ in range(200):
        rates = rng.gamma(0.5, 20.0, 8)
        backlog = rng.poisson(rates * rng.uniform(0, 0.5))
        observations.append(
            dataclasses.replace(
                base,
                arrival_rate_per_s=tuple(rates.tolist()),
                arrivals_since_last=tuple(rng.poisson(rates * 0.25).tolist()),
                backlog=tuple(backlog.tolist()),
                oldest_age_s=tuple(np.where(backlog > 0, rng.uniform(0, 0.2, 8), 0.0).tolist()),
                inference_cores=int(rng.integers(1, 5)) if split is not None else 1,
                split=split,
            )
        )
    return observations


def decision_times_us(
    factories: dict[str, Callable[[], Policy]], samples: int = 20_000, cores: bool = False
) -> dict[str, tuple[float, float]]:
    """Median and p99 of update + decide per policy, alternating BLOCK-decision blocks."""
    observations = observations_8_tasks(cores)
    policies = {name: make() for name, make in factories.items()}
    times = {name: np.empty(samples) for name in factories}
    for start in range(0, samples, BLOCK):
        for name, policy in policies.items():
            out = times[name]
            for i in range(start, min(samples, start + BLOCK)):
                obs = observations[i % len(observations)]
                t0 = time.perf_counter_ns()
                policy.update(obs)
                policy.decide(obs)
                out[i] = time.perf_counter_ns() - t0
    return {name: (float(np.median(t) / 1e3), float(np.percentile(t, 99) / 1e3)) for name, t in times.items()}


def azure_hour_seconds(cores: int | None, tree: Path | None = None) -> tuple[float, int]:
    """`dartfl sim` of the Azure hour on pi4 (`cores` of it); `tree`: another source tree."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "azure.csv"
        tasks = ("digits", "fashion", "uci-digits")
        workloads.write_time_task_csv(workloads.bundled_azure_conv(tasks), trace)
        cmd = [sys.executable, "-m", "dartfl.cli.main", "sim", "--trace", str(trace), "--profile", "pi4"]
        cmd += ["--slo-ms", "250", "--no-store", "--json"]
        if cores is not None:
            cmd += ["--cores", str(cores)]
        for spec in (
            "dart",
            "inference-only",
            "inference-first:4",
            "static:0.5",
            "threshold",
            "proportional",
        ):
            cmd += ["--policy", spec]
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=tree or Path.cwd())
        elapsed = time.perf_counter() - t0
        requests = json.loads(out.stdout)["results"][0]["requests"]
    return elapsed, requests


def _base_tree(commit: str, into: Path) -> Path:
    """The commit's source tree, extracted with git archive (read only, outside the worktree)."""
    archive = subprocess.run(["git", "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--base", help="a commit to time side by side (the simulator runs)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = load_base_dart().DartPolicy
    timed = decision_times_us({"dart": lambda: make_policy("dart"), "base": base})
    (p50, p99), (base_p50, base_p99) = timed["dart"], timed["base"]
    split_p50, split_p99 = decision_times_us({"dart": lambda: make_policy("dart")}, cores=True)["dart"]
    period_us = 0.25e6
    result: dict[str, object] = {
        "decision_us_p50_8_tasks": round(p50, 2),
        "decision_us_p99_8_tasks": round(p99, 2),
        "base_commit": BASE_COMMIT,
        "base_decision_us_p50_8_tasks": round(base_p50, 2),
        "base_decision_us_p99_8_tasks": round(base_p99, 2),
        "decision_p50_ratio_to_base": round(p50 / base_p50, 3),
        "decision_p99_fraction_of_period": round(p99 / period_us, 6),
        "split_decision_us_p50_8_tasks_pi4": round(split_p50, 2),
        "split_decision_us_p99_8_tasks_pi4": round(split_p99, 2),
        "split_decision_p99_fraction_of_period": round(split_p99 / period_us, 6),
        "profile": get_profile("pi4").name,
    }
    with tempfile.TemporaryDirectory() as tmp:
        tree = _base_tree(args.base, Path(tmp)) if args.base else None
        runs: dict[str, list[float]] = {}
        requests = 0
        for _ in range(args.repeats):
            for label, cores, src in (("pi4", None, None), ("pi4_1core", 1, None), ("base_pi4", None, tree)):
                if label.startswith("base") and src is None:
                    continue
                wall, requests = azure_hour_seconds(cores, src)
                runs.setdefault(label, []).append(wall)
    for label, walls in runs.items():
        result[f"azure_hour_6_policies_s_{label}"] = round(float(np.median(walls)), 2)
    result["azure_requests"] = requests
    if args.base:
        result["sim_base_commit"] = args.base
    print_json(result, args.json)


if __name__ == "__main__":
    main()
