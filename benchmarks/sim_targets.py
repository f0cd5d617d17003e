"""The simulator targets, scenario by scenario (benchmarks/scenarios.py).

For each scenario, DART at its default knob against inference-only, today's DART (from git,
base_dart.py) and the rivals of verdict.RIVALS (statics, inference-first, threshold,
proportional):

- issue 12's targets (verdict.py): SLO attainment within 1 point of inference-only; not
  dominated (no rival with SLO >= DART's and harvest >= DART's + 0.01); training-caused
  misses within the miss budget plus the bound's slack;
- the foundation targets: harvest efficiency >= 1.2x that of every rival whose SLO
  attainment is at least DART's, and >= 0.3 (`foundation_ok`).

    .venv/bin/python benchmarks/sim_targets.py [--json out.json] [--jobs 2] [--filter pi4]
    .venv/bin/python benchmarks/sim_targets.py --table out.json   # markdown
    .venv/bin/python benchmarks/sim_targets.py --rivals-from out.json [--dart SPEC]   # DART alone
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from base_dart import BASE_COMMIT
from scenarios import Scenario, arrivals_for, scenarios
from verdict import Judged, progress_line, run_cases, simulate_all, verdict, verdict_cells, verdict_counts


def evaluate(scenario: Scenario, seed: int, judged: Judged) -> dict[str, Any]:
    arrivals = arrivals_for(scenario, seed=seed)
    results, bound = simulate_all(arrivals, scenario.profile, scenario.slo_s, seed, judged=judged)
    row = verdict(scenario.name, results, bound)
    best = row["best_rival_harvest"] if row["best_rival"] != "-" else 0.0
    row["ratio"] = row["dart_harvest"] / best if best > 0 else float("inf")
    row["foundation_ok"] = bool(
        row["slo_ok"] and row["dart_harvest"] >= 0.3 and row["dart_harvest"] >= 1.2 * best
    )
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | requests | inference-only SLO | DART SLO / harvest "
        f"| DART@{BASE_COMMIT} SLO / harvest | training-caused misses (bound) "
        "| strongest rival at >= DART's SLO | issue-12 targets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['requests']} {verdict_cells(r)}")
    foundation = sum(r["foundation_ok"] for r in rows)
    lines.append(f"{verdict_counts(rows, 'scenarios')}; the foundation's 1.2x harvest target {foundation}.")
    return "\n".join(lines)


def progress(r: dict[str, Any]) -> str:
    return progress_line(r, 40, f"base {r['base_slo']:.4f}/{r['base_harvest']:.3f}")


def main() -> None:
    run_cases(__doc__, evaluate, scenarios, markdown, progress)


if __name__ == "__main__":
    main()
