"""Harvest-vs-SLO frontiers: DART's knob swept against the baselines' own knobs.

One PNG per workload (docs/img/frontier-<workload>-<profile>.png): each policy family is a
line through its knob settings (DART: slack margin; inference-first: step size m; static:
inference share x), with inference-only, the clairvoyant reference and the fluid limit
(harvest 1.0) beside them. Prints a JSON summary, including DART's gap to the clairvoyant.

    .venv/bin/python benchmarks/frontier.py [--profile public-small] [--out docs/img] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import WORKLOADS, Scenario, arrivals_for, profiles_and_slos

from dartfl.sim import SimConfig
from dartfl.sim.compare import compare_policies, task_specs

FAMILIES = {
    "dart (slack margin)": [f"dart:margin={g}" for g in (0.4, 0.3, 0.2, 0.1, 0.0, -0.2, -0.4)],
    "inference-first (m)": [f"inference-first:{m}" for m in (1, 2, 4, 8, 16, 32)],
    "static (x)": [f"static:{x}" for x in (0.3, 0.5, 0.7, 0.9)],
}
REFERENCES = ["dart", "inference-only", "clairvoyant"]


def sweep(scenario: Scenario) -> dict[str, Any]:
    specs = [s for family in FAMILIES.values() for s in family] + REFERENCES
    arrivals = arrivals_for(scenario)
    out = compare_policies(
        arrivals, scenario.profile, task_specs(arrivals, scenario.slo_s), specs, SimConfig()
    )
    points = {r["policy"]: (r["slo_attainment"], r["harvest_efficiency"]) for r in out.summaries}
    return {"scenario": scenario.name, "workload": scenario.workload, "points": points}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, specs in FAMILIES.items():
        xs = [100 * pts[s][0] for s in specs]
        ys = [pts[s][1] for s in specs]
        ax.plot(xs, ys, marker="o", ms=4, lw=1, label=label)
    for name, marker in (("dart", "*"), ("clairvoyant", "D"), ("inference-only", "s")):
        slo, harvest = pts[name]
        ax.plot([100 * slo], [harvest], marker=marker, ms=11 if name == "dart" else 7, ls="", label=name)
    ax.axhline(1.0, color="k", ls=":", lw=1, label="fluid limit")
    ax.set_xlabel("SLO attainment (%)")
    ax.set_ylabel("harvest efficiency (samples / fluid limit)")
    io_slo = 100 * pts["inference-only"][0]
    ax.set_xlim(max(0.0, io_slo - 12), io_slo + 0.5)
    ax.set_ylim(0, 1.05)
    ax.set_title(result["scenario"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="public-small")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    profile, slo = next((p, s) for p, s in profiles_and_slos() if p.name == args.profile)
    todo = [Scenario(w, profile, slo) for w in [*WORKLOADS, "azure-conv"]]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(sweep, todo))
    summary = []
    for result in results:
        plot(result, args.out / f"frontier-{result['workload']}-{args.profile}.png")
        pts = result["points"]
        summary.append(
            {
                "scenario": result["scenario"],
                "dart": pts["dart"],
                "clairvoyant": pts["clairvoyant"],
                "inference_only_slo": pts["inference-only"][0],
                "harvest_gap_to_clairvoyant": pts["clairvoyant"][1] - pts["dart"][1],
            }
        )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
