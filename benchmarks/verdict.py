"""Issue 12's targets for one workload on one device, shared by stress.py, sim_targets.py and
smooth.py (with the command line the three take).

`simulate_all` runs DART at its default knob, `inference-only`, today's DART (loaded from git,
base_dart.py) and every rival on the same arrivals; `verdict` checks:
1. DART's SLO attainment within 1 point of inference-only's;
2. DART not dominated: no rival has SLO attainment >= DART's and harvest >= DART's + 0.01;
3. the promise: DART's training-caused misses <= budget x arrivals + H_max + E.

To judge a change to DART, `--dart SPEC` judges another DART spec (`dart:budget=0.008`) and
`--rivals-from FILE` reuses every other policy's results from a results file of the same
benchmark and seed, so only DART is simulated (the stress suite in well under a minute,
instead of about ten).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from base_dart import BASE_COMMIT, load_base_dart

from dartfl.arrivals import Arrivals
from dartfl.metrics import MissBudgetBound, miss_budget_bound, summarize
from dartfl.policies import DartPolicy, make_policy
from dartfl.policies.base import Policy
from dartfl.sim import SimConfig, simulate
from dartfl.types import DeviceProfile, TaskSpec

RIVALS = (
    [f"static:{x}" for x in (0.3, 0.5, 0.7, 0.9)]
    + [f"inference-first:{m}" for m in (1, 2, 4, 8, 16)]
    + ["threshold", "proportional"]
)
BASE = f"dart@{BASE_COMMIT}"
HARVEST_MARGIN = 0.01  # a rival dominates with SLO >= DART's and harvest >= DART's + this


@dataclass(frozen=True)
class Judged:
    """Which DART a row judges (`dart_spec`), and the stored row whose other policies it
    reuses instead of simulating them again (`stored`, from --rivals-from)."""

    dart_spec: str = "dart"
    stored: dict[str, Any] | None = None


DART_AT_DEFAULTS = Judged()  # DART at its default knob, every policy simulated


def simulate_all(
    arrivals: Arrivals,
    profile: DeviceProfile,
    slo_s: float,
    seed: int = 1,
    rivals: list[str] | None = None,
    judged: Judged = DART_AT_DEFAULTS,
) -> tuple[dict[str, dict[str, Any]], MissBudgetBound]:
    """Summaries per policy name (the judged DART's under "dart"), and DART's miss-budget bound."""
    tasks = [TaskSpec(name, slo_s) for name in arrivals.task_names]
    dart = make_policy(judged.dart_spec)
    if not isinstance(dart, DartPolicy):
        raise SystemExit(f"--dart takes a DART spec (dart or dart:knob=value), got {judged.dart_spec!r}")
    record = simulate(arrivals, profile, tasks, dart, SimConfig(), np.random.default_rng(seed))
    results = {"dart": summarize(record)}
    bound = miss_budget_bound(record, dart.config.miss_budget, dart.debt.debt_limit)
    if judged.stored is not None:
        results.update(stored_rivals(judged.stored, results["dart"]["requests"]))
        return results, bound
    base: Policy = load_base_dart().DartPolicy()
    base.name = BASE
    policies: list[Policy] = [make_policy("inference-only"), base]
    policies += [make_policy(spec) for spec in (RIVALS if rivals is None else rivals)]
    for policy in policies:
        record = simulate(arrivals, profile, tasks, policy, SimConfig(), np.random.default_rng(seed))
        results[policy.name] = summarize(record)
    return results, bound


def stored_rivals(row: dict[str, Any], requests: int) -> dict[str, dict[str, Any]]:
    """Every policy but DART from a stored verdict row, once it is sure to be the same run:
    the same arrivals (request count) and the same base commit."""
    name = row["scenario"]
    if row["requests"] != requests:
        raise SystemExit(
            f"{name}: the stored row has {row['requests']} requests and these arrivals {requests}; "
            "was it written with another --seed? Pass the results file of this seed, or drop --rivals-from"
        )
    if BASE not in row["policies"]:
        raise SystemExit(
            f"{name}: the stored row was judged against another base commit than {BASE}; "
            "rerun the benchmark without --rivals-from to refresh it"
        )
    return {p: r for p, r in row["policies"].items() if p != "dart"}


def verdict(name: str, results: dict[str, dict[str, Any]], bound: MissBudgetBound) -> dict[str, Any]:
    dart, io, base = results["dart"], results["inference-only"], results[BASE]
    slo, harvest = dart["slo_attainment"], dart["harvest_efficiency"]
    at_least = [(p, r) for p, r in results.items() if p in RIVALS and r["slo_attainment"] >= slo]
    best_p, best = max(at_least, key=lambda pr: pr[1]["harvest_efficiency"], default=("-", None))
    dominators = [p for p, r in at_least if r["harvest_efficiency"] >= harvest + HARVEST_MARGIN]
    slo_ok = slo >= io["slo_attainment"] - 0.01
    failed = [
        label
        for label, ok in (("SLO", slo_ok), ("dominated", not dominators), ("promise", bound.holds))
        if not ok
    ]
    return {
        "scenario": name,
        "requests": dart["requests"],
        "io_slo": io["slo_attainment"],
        "dart_slo": slo,
        "dart_harvest": harvest,
        "base_slo": base["slo_attainment"],
        "base_harvest": base["harvest_efficiency"],
        "training_miss_fraction": bound.measured,
        "miss_budget": bound.budget,
        "miss_slack": bound.slack,
        "miss_bound": bound.budget + bound.slack,
        "debt_limit": bound.debt_limit,
        "overshoot": bound.overshoot,
        "best_rival": best_p,
        "best_rival_slo": best["slo_attainment"] if best else float("nan"),
        "best_rival_harvest": best["harvest_efficiency"] if best else float("nan"),
        "dominated_by": dominators,
        "slo_ok": slo_ok,
        "undominated": not dominators,
        "promise_kept": bound.holds,
        "verdict": "met" if not failed else "not met: " + ", ".join(failed),
        "decision_us_p50": dart["decision_us_p50"],
        "decision_us_p99": dart["decision_us_p99"],
        "policies": {
            p: {k: r[k] for k in ("slo_attainment", "harvest_efficiency", "training_miss_fraction") if k in r}
            for p, r in results.items()
        },
    }


Rows = list[dict[str, Any]]


def bench_parser(doc: str | None, cases: bool = True) -> argparse.ArgumentParser:
    """The options of every verdict benchmark; `cases` adds --filter and --seed."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--table", type=Path, help="print the markdown table of a JSON file and exit")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    if cases:
        parser.add_argument("--filter", default="", help="only cases whose name contains this")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--dart", default="dart", help="the DART spec to judge (e.g. dart:budget=0.008)")
        parser.add_argument(
            "--rivals-from",
            type=Path,
            help="reuse every other policy's results from this file (this benchmark's --json at the "
            "same --seed): only DART is simulated",
        )
    return parser


def run_rows(
    args: argparse.Namespace,
    evaluate: Callable[..., dict[str, Any]],
    jobs: Sequence[Any],
    markdown: Callable[[Rows], str],
    progress: Callable[[dict[str, Any]], str] | None = None,
) -> None:
    """--table: print a saved table. Otherwise evaluate every job in a process pool (with
    --seed where the parser has one), print a line per row (or the whole table), write --json."""
    if args.table:
        print(markdown(json.loads(args.table.read_text())))
        return
    named_cases = hasattr(args, "seed")  # the options bench_parser adds with `cases`
    extra: list[list[Any]] = []
    if named_cases:
        stored = stored_rows(args.rivals_from) if args.rivals_from else None
        judged = [
            Judged(args.dart, None if stored is None else stored_row(stored, args.rivals_from, job.name))
            for job in jobs
        ]
        extra = [[args.seed] * len(jobs), judged]
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(evaluate, jobs, *extra))
    for row in rows if named_cases else []:
        row["dart_spec"] = args.dart
    if progress is None:
        print(markdown(rows))
    else:
        for row in rows:
            print(progress(row), flush=True)
        print(markdown(rows).splitlines()[-1].strip())
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


def stored_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of a results file, by case name."""
    try:
        rows = json.loads(path.read_text())
        return {row["scenario"]: row for row in rows}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise SystemExit(f"--rivals-from {path}: not a results file of this benchmark ({exc})") from None


def stored_row(stored: dict[str, dict[str, Any]], path: Path, name: str) -> dict[str, Any]:
    """The stored row of case `name`, or a one-line exit naming the file."""
    if name not in stored:
        raise SystemExit(f"--rivals-from {path} has no row for {name}: write it with --json first")
    return stored[name]


def run_cases(
    doc: str | None,
    evaluate: Callable[..., dict[str, Any]],
    cases: Callable[[], Sequence[Any]],
    markdown: Callable[[Rows], str],
    progress: Callable[[dict[str, Any]], str],
) -> None:
    """The command line of a benchmark over named cases: `run_rows` on those whose name
    contains --filter."""
    args = bench_parser(doc).parse_args()
    run_rows(args, evaluate, [c for c in cases() if args.filter in c.name], markdown, progress)


def progress_line(r: dict[str, Any], name_width: int, detail: str) -> str:
    """A verdict row's progress line: the verdict, the row's name, inference-only's SLO,
    DART's SLO / harvest, the benchmark's own `detail`, the strongest rival."""
    return (
        f"{r['verdict']:28s} {r['scenario']:{name_width}s} io {r['io_slo']:.4f} dart {r['dart_slo']:.4f}/"
        f"{r['dart_harvest']:.3f} {detail} "
        f"rival {r['best_rival']} {r['best_rival_slo']:.4f}/{r['best_rival_harvest']:.3f}"
    )


def verdict_cells(r: dict[str, Any]) -> str:
    """The columns a verdict row shares in every table, from inference-only's SLO to the verdict."""
    rival = f"{r['best_rival']} {r['best_rival_slo']:.4f} / {r['best_rival_harvest']:.3f}"
    if r["best_rival"] == "-":
        rival = "-"
    return (
        f"| {r['io_slo']:.4f} | {r['dart_slo']:.4f} / {r['dart_harvest']:.3f} "
        f"| {r['base_slo']:.4f} / {r['base_harvest']:.3f} "
        f"| {r['training_miss_fraction']:.4f} ({r['miss_bound']:.4f}) | {rival} | {r['verdict']} |"
    )


def verdict_counts(rows: Rows, noun: str) -> str:
    """The line under a verdict table: how many rows meet each target."""
    met = {k: sum(r[k] for r in rows) for k in ("slo_ok", "undominated", "promise_kept")}
    return (
        f"\n{len(rows)} {noun}: SLO within 1 point {met['slo_ok']}, not dominated {met['undominated']}, "
        f"promise kept {met['promise_kept']}"
    )
