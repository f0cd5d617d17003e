"""Speed of the core: allocator decision time and simulator throughput.

1. DART's decision (update + decide) for 8 tasks on observations recorded from a real
   simulation, median and p99 in microseconds (CPython, one core).
2. One hour of the bundled Azure trace through 6 policies with `dartfl sim` (end to end:
   trace parsing, simulation, metrics), wall time.

    .venv/bin/python benchmarks/perf.py
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import workloads
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.types import Observation

TASKS8 = tuple(f"task{k}" for k in range(8))


def decision_times_us(samples: int = 20_000) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    policy = make_policy("dart")
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
    observations = []
    for _ in range(200):  # varied states: idle, busy, backlogged, behind on the round
        rates = rng.gamma(0.5, 20.0, 8)
        backlog = rng.poisson(rates * rng.uniform(0, 0.5))
        observations.append(
            dataclasses.replace(
                base,
                arrival_rate_per_s=tuple(rates.tolist()),
                arrivals_since_last=tuple(rng.poisson(rates * 0.25).tolist()),
                backlog=tuple(backlog.tolist()),
                oldest_age_s=tuple(np.where(backlog > 0, rng.uniform(0, 0.2, 8), 0.0).tolist()),
            )
        )
    times = np.empty(samples)
    for i in range(samples):
        obs = observations[i % len(observations)]
        t0 = time.perf_counter_ns()
        policy.update(obs)
        policy.decide(obs)
        times[i] = time.perf_counter_ns() - t0
    return float(np.median(times) / 1e3), float(np.percentile(times, 99) / 1e3)


def azure_hour_seconds() -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "azure.csv"
        tasks = ("digits", "fashion", "uci-digits")
        workloads.write_time_task_csv(workloads.bundled_azure_conv(tasks), trace)
        cmd = [
            str(Path(sys.executable).parent / "dartfl"),
            "sim",
            "--trace",
            str(trace),
            "--profile",
            "pi4",
            "--slo-ms",
            "250",
            "--no-store",
            "--json",
        ]
        for spec in (
            "dart",
            "inference-only",
            "inference-first:4",
            "static:0.5",
            "threshold",
            "proportional",
        ):
            cmd += ["--policy", spec]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        requests = json.loads(out.stdout)["results"][0]["requests"]
    return elapsed, requests


def main() -> None:
    p50, p99 = decision_times_us()
    wall, requests = azure_hour_seconds()
    profile = get_profile("pi4")
    print(
        json.dumps(
            {
                "decision_us_p50_8_tasks": round(p50, 2),
                "decision_us_p99_8_tasks": round(p99, 2),
                "azure_hour_6_policies_s": round(wall, 2),
                "azure_requests": requests,
                "profile": profile.name,
            }
        )
    )


if __name__ == "__main__":
    main()
