"""Harvest-vs-SLO frontiers: DART's knob swept against the baselines' own knobs.

One PNG per workload (docs/img/frontier-<workload>-<profile>.png): each policy family is a
line through its knob settings (DART: slack margin; inference-first: step size m; static:
inference share x), with inference-only, the clairvoyant reference and the fluid limit
(harvest 1.0) beside them. Prints a JSON summary, including DART's gap to the clairvoyant.

    .venv/bin/python benchmarks/frontier.py [--profile public-small] [--out docs/img] [--jobs 2]

`--stress CASE` (repeatable) draws a row of the stress suite instead (benchmarks/stress.py,
seed 1): DART at its default against the fixed steps of `inference-first` from 1 to 32
samples, zoomed in on the last point of attainment below inference-only, where the rows are
decided (docs/benchmarks.md, "The stress suite"); `--json` keeps the points.
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

from dartfl.arrivals import Arrivals
from dartfl.sim import SimConfig
from dartfl.sim.compare import compare_policies, task_specs
from dartfl.types import DeviceProfile

FAMILIES = {
    "dart (slack margin)": [f"dart:margin={g}" for g in (0.4, 0.3, 0.2, 0.1, 0.0, -0.2, -0.4)],
    "inference-first (m)": [f"inference-first:{m}" for m in (1, 2, 4, 8, 16, 32)],
    "static (x)": [f"static:{x}" for x in (0.3, 0.5, 0.7, 0.9)],
}
REFERENCES = ["dart", "inference-only", "clairvoyant"]
# A stress row is decided within a point of inference-only, between neighbouring step sizes.
STRESS_FAMILIES = {
    "inference-first (m)": [f"inference-first:{m}" for m in (1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 24, 32)]
}
STRESS_REFERENCES = ("dart", "inference-only")


def points_of(
    arrivals: Arrivals, profile: DeviceProfile, slo_s: float, specs: list[str]
) -> dict[str, tuple[float, float]]:
    """(SLO attainment, harvest) of every policy of `specs` on the same arrivals."""
    out = compare_policies(arrivals, profile, task_specs(arrivals, slo_s), specs, SimConfig())
    return {r["policy"]: (r["slo_attainment"], r["harvest_efficiency"]) for r in out.summaries}


def sweep(scenario: Scenario) -> dict[str, Any]:
    specs = [s for family in FAMILIES.values() for s in family] + REFERENCES
    points = points_of(arrivals_for(scenario), scenario.profile, scenario.slo_s, specs)
    return {"scenario": scenario.name, "workload": scenario.workload, "points": points}


def stress_sweep(name: str) -> dict[str, Any]:
    import stress

    case = next((c for c in stress.cases() if c.name == name), None)
    if case is None:
        raise SystemExit(f"no stress case {name!r}; the cases are named like {stress.cases()[0].name}")
    specs = [s for family in STRESS_FAMILIES.values() for s in family] + list(STRESS_REFERENCES)
    points = points_of(stress.arrivals_for(case), case.profile, case.slo_s, specs)
    return {"scenario": name, "workload": case.workload, "points": points}


def plot(
    result: dict[str, Any],
    path: Path,
    families: dict[str, list[str]] = FAMILIES,
    references: tuple[str, ...] = ("dart", "clairvoyant", "inference-only"),
    below_points: float = 12.0,
    label_points: bool = False,
) -> None:
    """One workload's families and references; x spans `below_points` of attainment under
    inference-only's (harvest from 0 to the fluid limit, or to the largest point above it);
    `label_points` writes each family point's knob beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, specs in families.items():
        xs = [100 * pts[s][0] for s in specs]
        ys = [pts[s][1] for s in specs]
        ax.plot(xs, ys, marker="o", ms=4, lw=1, label=label)
        if label_points:
            for spec, x, y in zip(specs, xs, ys, strict=True):
                ax.annotate(spec.split(":")[1], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    markers = {"dart": "*", "clairvoyant": "D", "inference-only": "s"}
    for name in references:
        marker = markers[name]
        slo, harvest = pts[name]
        ax.plot([100 * slo], [harvest], marker=marker, ms=11 if name == "dart" else 7, ls="", label=name)
    ax.axhline(1.0, color="k", ls=":", lw=1, label="fluid limit")
    ax.set_xlabel("SLO attainment (%)")
    ax.set_ylabel("harvest efficiency (samples / fluid limit)")
    io_slo = 100 * pts["inference-only"][0]
    ax.set_xlim(max(0.0, io_slo - below_points), io_slo + below_points / 24)
    ax.set_ylim(0, max(1.05, 1.05 * max(h for _, h in pts.values())))
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
    parser.add_argument("--stress", action="append", metavar="CASE", help="a stress-suite row instead")
    parser.add_argument("--json", type=Path, help="with --stress: write the points here")
    args = parser.parse_args()
    if args.json and not args.stress:
        parser.error("--json keeps the points of --stress rows; name at least one --stress CASE")
    if args.stress:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(stress_sweep, args.stress))
        for row in rows:
            path = args.out / f"frontier-stress-{row['scenario'].replace('/', '-')}.png"
            # Labelled, zoomed to a point: a stress row turns on neighbouring step sizes.
            plot(row, path, STRESS_FAMILIES, STRESS_REFERENCES, below_points=1.0, label_points=True)
            print(f"{row['scenario']}: {path}")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return
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
