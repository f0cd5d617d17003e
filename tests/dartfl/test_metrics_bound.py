"""The promise's terms computed from a run: training-caused misses, the overshoot E, the bound."""

from __future__ import annotations

import numpy as np
import pytest

from dartfl.fluid import FluidTerms
from dartfl.metrics import RunRecord, miss_budget_bound, training_caused_misses


def _record(arrival: list[float], finish: list[float], delay: list[float], cause: list[float]) -> RunRecord:
    n = len(arrival)
    return RunRecord(
        policy="p",
        task_names=("a",),
        slo_s=(0.1,),
        horizon_s=2.0,
        arrival_s=np.array(arrival),
        finish_s=np.array(finish),
        tasks=np.zeros(n, dtype=np.int64),
        rejected=np.isnan(np.array(finish)),
        trained_per_task=(0,),
        training_busy_s=0.0,
        fluid=FluidTerms(inference_min_s=0.0, cheapest_sample_s=1.0),
        max_backlog=0,
        decision_us=np.zeros(0),
        periods={"t_s": np.arange(1, 9) * 0.25},  # ticks at 0.25, 0.5, ..., 2.0
        training_delay_s=np.array(delay),
        delay_cause_s=np.array(cause),
    )


def test_a_miss_is_training_caused_when_the_delay_explains_it_or_training_made_it_refused() -> None:
    # The executor stamps a refused request with a delay only when training made it refuse it.
    run = _record(
        arrival=[0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        finish=[0.15, 0.5, 0.05, 0.15, float("nan"), float("nan")],
        delay=[0.1, 0.1, 0.1, 0.0, 0.1, 0.0],
        cause=[0.0, 0.0, 0.0, np.nan, 0.0, np.nan],
    )
    caused = training_caused_misses(run)
    assert caused is not None
    assert caused.tolist() == [True, False, False, False, True, False]


def _four_training_misses() -> RunRecord:
    """Three misses caused by a step allowed at tick 0.25 and counted at ticks 0.5, 1.0, 1.0;
    one caused by a step allowed at tick 1.5 and counted at 1.75; one request on time."""
    return _record(
        arrival=[0.3, 0.6, 0.7, 1.6, 0.1],
        finish=[0.45, 0.8, 0.85, 1.72, 0.15],
        delay=[0.1, 0.15, 0.1, 0.1, 0.0],
        cause=[0.3, 0.3, 0.3, 1.6, np.nan],
    )


def test_the_overshoot_counts_the_misses_still_to_come_at_one_tick() -> None:
    # At tick 0.25 all three of the first misses are still to come: E = 3.
    run = _four_training_misses()
    bound = miss_budget_bound(run, budget=0.01, debt_limit=2.0)
    assert bound.training_misses == 4 and bound.overshoot == 3
    assert bound.arrivals == 5
    assert bound.slack == pytest.approx((2.0 + 3) / 5)
    assert bound.holds and bound.measured == pytest.approx(0.8)


def test_the_bound_fails_when_misses_exceed_budget_debt_and_overshoot() -> None:
    run = _four_training_misses()
    assert not miss_budget_bound(run, budget=0.0, debt_limit=0.5).holds  # 4 > 0 + 0.5 + 3
