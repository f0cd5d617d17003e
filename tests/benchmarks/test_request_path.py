"""benchmarks/request_path.py: a step is sustained only if nothing was lost, refused or late and
its p99 is within the SLO (a device that refuses part of a rate does not carry it)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import request_path


def _step(rate: float, **faults: Any) -> dict[str, Any]:
    row = {"rate_per_s": rate, "lost": 0, "rejected": 0, "late": 0, "p99_latency_s": 0.02}
    return row | faults


def test_the_highest_clean_step_is_the_sustained_rate() -> None:
    rows = [_step(3000), _step(4000), _step(5000, p99_latency_s=0.3)]
    assert request_path.sustained(rows) == 4000


def test_a_step_with_refusals_is_not_sustained() -> None:
    # Before the agent froze its start-up heap, a collector pause refused 423 requests of a
    # 3,000/s step whose p99 (75 ms) was within the SLO: that step counted as sustained.
    rows = [_step(2000), _step(3000, rejected=423, p99_latency_s=0.075), _step(4000, lost=1)]
    assert request_path.sustained(rows) == 2000
    assert request_path.sustained([*rows, _step(5000, late=3)]) == 2000


def test_no_clean_step_sustains_nothing() -> None:
    assert request_path.sustained([_step(3000, rejected=1)]) == 0.0
