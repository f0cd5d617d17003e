"""The foundation issue's simulator targets, scenario by scenario.

For each scenario: DART at its default knob against inference-only and every static:<x> and
inference-first:<m>. Targets: SLO attainment within 1 point of inference-only; harvest
efficiency >= 1.2x that of every rival whose SLO attainment is at least DART's; harvest >= 0.3.

    .venv/bin/python benchmarks/sim_targets.py [--json out.json] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import Scenario, arrivals_for, scenarios

from dartfl.sim import SimConfig
from dartfl.sim.compare import compare_policies, task_specs

RIVALS = [f"static:{x}" for x in (0.3, 0.5, 0.7, 0.9)] + [
    f"inference-first:{m}" for m in (1, 2, 4, 8, 16, 32)
]
# The rivals of the project's public acceptance check (kept outside this repository).
PUBLIC_RIVALS = [f"static:{x}" for x in (0.3, 0.5, 0.7, 0.9)] + [
    f"inference-first:{m}" for m in (1, 2, 4, 16)
]


def evaluate(
    scenario: Scenario, dart_spec: str = "dart", seed: int = 1, public: bool = False
) -> dict[str, Any]:
    rivals = PUBLIC_RIVALS if public else RIVALS
    arrivals = arrivals_for(scenario, seed=seed)
    specs = [dart_spec, "inference-only", *RIVALS]
    tasks = task_specs(arrivals, scenario.slo_s)
    out = compare_policies(arrivals, scenario.profile, tasks, specs, SimConfig(), seed=seed)
    res = {r["policy"]: r for r in out.summaries}
    dart, io = res[dart_spec], res["inference-only"]
    dominating = [
        (p, res[p]["harvest_efficiency"])
        for p in rivals
        if res[p]["slo_attainment"] >= dart["slo_attainment"]
    ]
    best_p, best = max(dominating, key=lambda x: x[1], default=("-", 0.0))
    ok = (
        dart["slo_attainment"] >= io["slo_attainment"] - 0.01
        and dart["harvest_efficiency"] >= 0.3
        and dart["harvest_efficiency"] >= 1.2 * best
    )
    return {
        "scenario": scenario.name,
        "requests": dart["requests"],
        "dart_slo": dart["slo_attainment"],
        "io_slo": io["slo_attainment"],
        "dart_harvest": dart["harvest_efficiency"],
        "best_rival": best_p,
        "best_rival_harvest": best,
        "ratio": dart["harvest_efficiency"] / best if best > 0 else float("inf"),
        "decision_us_p50": dart["decision_us_p50"],
        "ok": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dart", default="dart")
    parser.add_argument("--filter", default="")
    parser.add_argument("--public", action="store_true", help="only the public check's rivals")
    args = parser.parse_args()
    todo = [s for s in scenarios() if args.filter in s.name]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(
            pool.map(evaluate, todo, [args.dart] * len(todo), [1] * len(todo), [args.public] * len(todo))
        )
    for r in rows:
        print(
            f"{'ok ' if r['ok'] else 'BAD'} {r['scenario']:42s} "
            f"dart slo {r['dart_slo']:.4f} io {r['io_slo']:.4f} "
            f"harvest {r['dart_harvest']:.3f} best rival {r['best_rival']:18s} {r['best_rival_harvest']:.3f} "
            f"ratio {r['ratio']:.2f}"
        )
    print(f"{sum(r['ok'] for r in rows)}/{len(rows)} scenarios meet all targets")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
