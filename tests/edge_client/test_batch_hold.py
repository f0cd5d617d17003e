"""The batch hold: under dense traffic a few requests wait a moment to share a batch."""

from __future__ import annotations

import pytest

from edge_client.batch_hold import HOLD_BATCH, BatchHold


def test_a_few_requests_under_dense_traffic_wait_out_one_hold_from_when_they_were_found() -> None:
    hold = BatchHold(slo_s=0.25)
    assert hold.hold_s == pytest.approx(0.010)
    assert hold.wait_for_s(2, 10.0, rate_per_s=2000.0) == pytest.approx(0.010)
    assert hold.wait_for_s(3, 10.0075, rate_per_s=2000.0) == pytest.approx(0.0025)
    assert hold.wait_for_s(3, 10.0101, rate_per_s=2000.0) == 0.0  # held long enough: serve them
    assert hold.wait_for_s(1, 10.011, rate_per_s=2000.0) == pytest.approx(0.010)  # the next few anew


def test_no_hold_when_nobody_would_join_or_the_batch_is_full_or_the_slo_is_tight() -> None:
    hold = BatchHold(slo_s=0.25)
    assert hold.wait_for_s(1, 0.0, rate_per_s=50.0) == 0.0  # one arrival per 20 ms: no company coming
    assert hold.wait_for_s(HOLD_BATCH, 0.0, rate_per_s=5000.0) == 0.0
    assert hold.wait_for_s(0, 0.0, rate_per_s=5000.0) == 0.0
    assert BatchHold(slo_s=0.03).hold_s == pytest.approx(0.003)  # 10% of a tight SLO


def test_the_ingress_wakes_the_executor_when_a_queue_starts_or_a_batch_is_full_only() -> None:
    hold = BatchHold(slo_s=0.25)
    assert [n for n in range(1, 40) if hold.wake(n)] == [1, HOLD_BATCH]


def test_no_hold_for_a_model_whose_full_batch_outlasts_the_hold() -> None:
    quick = BatchHold(slo_s=0.15, model_per_request_s=30e-6)  # width 1: 32 of them take ~1 ms
    assert quick.wait_for_s(2, 0.0, rate_per_s=2000.0) == pytest.approx(0.010)
    slow = BatchHold(slo_s=0.15, model_per_request_s=8e-3)  # width 24: a full batch is 256 ms
    assert slow.hold_s == 0.0
    assert slow.wait_for_s(2, 0.0, rate_per_s=2000.0) == 0.0
