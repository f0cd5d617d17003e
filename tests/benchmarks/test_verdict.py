"""benchmarks/verdict.py: judging DART against stored rivals (`--rivals-from`) gives the
verdict of a full run, uses the stored figures instead of simulating the rivals again, and
refuses a stored row of other arrivals."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import workloads
from dartfl.arrivals import Arrivals
from dartfl.policies import DartPolicy
from dartfl.profiles import get_profile

# The benchmarks are scripts that import each other by name, from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import verdict

PROFILE = get_profile("x86-1core")
SLO_S = 0.05
RIVALS = ["inference-first:4", "static:0.5"]


@pytest.fixture
def arrivals() -> Arrivals:
    trace = workloads.generate(
        "pareto-onoff", duration_s=60.0, rate_per_s=50.0, task_names=["a", "b"], rng=np.random.default_rng(3)
    )
    return workloads.rescale_to_load(trace, PROFILE, 0.5)


@pytest.fixture
def full_row(arrivals: Arrivals, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # Today's DART stands in for the base commit's, so the test needs no git history.
    monkeypatch.setattr(verdict, "load_base_dart", lambda: types.SimpleNamespace(DartPolicy=DartPolicy))
    results, bound = verdict.simulate_all(arrivals, PROFILE, SLO_S, seed=1, rivals=RIVALS)
    row: dict[str, Any] = verdict.verdict("case", results, bound)
    return row


def judge(arrivals: Arrivals, stored: dict[str, Any], spec: str = "dart") -> dict[str, Any]:
    judged = verdict.Judged(spec, stored)
    results, bound = verdict.simulate_all(arrivals, PROFILE, SLO_S, seed=1, judged=judged)
    row: dict[str, Any] = verdict.verdict("case", results, bound)
    return row


def test_stored_rivals_give_the_full_runs_verdict(arrivals: Arrivals, full_row: dict[str, Any]) -> None:
    row = judge(arrivals, full_row)
    for key in ("dart_slo", "dart_harvest", "io_slo", "best_rival", "dominated_by", "verdict"):
        assert row[key] == full_row[key], key


def test_the_rivals_figures_come_from_the_stored_row(arrivals: Arrivals, full_row: dict[str, Any]) -> None:
    full_row["policies"]["static:0.5"] = {"slo_attainment": 1.0, "harvest_efficiency": 99.0}
    row = judge(arrivals, full_row)
    assert row["dominated_by"] == ["static:0.5"] and row["verdict"].endswith("dominated")


def test_another_dart_spec_is_judged(arrivals: Arrivals, full_row: dict[str, Any]) -> None:
    row = judge(arrivals, full_row, "dart:budget=0.008")
    assert row["miss_budget"] == 0.008 and full_row["miss_budget"] == 0.005


def test_a_row_of_other_arrivals_or_a_policy_that_is_not_dart_is_refused(
    arrivals: Arrivals, full_row: dict[str, Any]
) -> None:
    with pytest.raises(SystemExit, match="another --seed"):
        judge(arrivals, {**full_row, "requests": full_row["requests"] + 1})
    with pytest.raises(SystemExit, match="--dart takes a DART spec"):
        judge(arrivals, full_row, "inference-first:4")


def test_a_results_file_that_is_missing_broken_or_short_of_a_case_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not a results file"):
        verdict.stored_rows(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"no scenario": 1}]')
    with pytest.raises(SystemExit, match="not a results file"):
        verdict.stored_rows(broken)
    good = tmp_path / "good.json"
    good.write_text('[{"scenario": "a/pi4/250ms"}]')
    stored = verdict.stored_rows(good)
    assert verdict.stored_row(stored, good, "a/pi4/250ms") == {"scenario": "a/pi4/250ms"}
    with pytest.raises(SystemExit, match="no row for b/pi4/250ms"):
        verdict.stored_row(stored, good, "b/pi4/250ms")
