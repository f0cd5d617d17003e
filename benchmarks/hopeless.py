"""The hopeless regime: a single training sample already takes longer than the SLO slack.

pi4 profile on one core (a one-sample step takes 35 ms) with a 30 ms SLO: any step at all delays a
request that arrives during it past its SLO. We compare what DART does with and without owed
work (a round target of N samples per 60 s round) against inference-only and
inference-first:1, on Poisson arrivals at load 0.5 for 600 s.

    .venv/bin/python benchmarks/hopeless.py
"""

from __future__ import annotations

import json

import numpy as np

import workloads
from dartfl.metrics import summarize
from dartfl.policies import make_policy
from dartfl.profiles import get_profile
from dartfl.sim import SimConfig, simulate
from dartfl.types import TaskSpec

ROUND_S = 60.0


def main() -> None:
    profile = get_profile("pi4").with_cores(1)  # one time-shared core; spatial.py has all four
    slo = 0.030
    tasks = ("digits", "fashion", "uci-digits")
    base = workloads.generate(
        "poisson", duration_s=600, rate_per_s=50, task_names=tasks, rng=np.random.default_rng(1)
    )
    arrivals = workloads.rescale_to_load(base, profile, 0.5)
    specs = [TaskSpec(n, slo) for n in tasks]
    step1 = profile.training.microbatch_s(1)
    rows = []
    for spec, target in [
        ("inference-only", 0),
        ("inference-first:1", 0),
        ("dart", 0),
        ("dart", 300),
        ("dart", 800),
    ]:
        config = SimConfig(round_s=ROUND_S, round_target_samples=target)
        record = simulate(arrivals, profile, specs, make_policy(spec), config)
        m = summarize(record)
        rows.append(
            {
                "policy": spec,
                "round_target": target,
                "slo_attainment": round(m["slo_attainment"], 4),
                "p99_latency_ms": round(1e3 * m["p99_latency_s"], 1),
                "train_samples": m["train_samples"],
                "harvest_efficiency": round(m["harvest_efficiency"], 3),
                "rounds_met": f"{m['rounds_met']}/{m['rounds']}" if target else "-",
            }
        )
    print(json.dumps({"one_sample_step_ms": 1e3 * step1, "slo_ms": 1e3 * slo, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
