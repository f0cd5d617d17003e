"""The warm-up before a `--target-load` replay prices a request by what the agent really spends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import orchestration.pricing as pricing
from dartfl.protocol import Telemetry
from dartfl.types import DeviceProfile, InferenceCost, RequestPathCost, TrainingCost
from orchestration.replay import ReplayOptions

TASKS = ("digits", "fashion")
MIX = (1.0, 1.0)


def _metered(per_request_s: float) -> DeviceProfile:
    """A width-1-like agent's published price: model 40 us, the rest on the request path."""
    return DeviceProfile(
        name="agent",
        inference=InferenceCost(0.0, 40e-6),
        max_batch=32,
        training=TrainingCost(0.004, 0.0002, 32),
        request_path=RequestPathCost(receive_s=per_request_s - 90e-6, ingress_s=30e-6, egress_s=20e-6),
    )


def _snapshot(t: float, requests: int, cpu_s: float, **more: Any) -> Telemetry:
    return Telemetry(device="edge-1", t=t, uptime_s=t, requests=requests, process_cpu_s=cpu_s, **more)


def test_serving_cpu_per_request_takes_out_what_training_spent() -> None:
    snaps = [
        _snapshot(100.0, 10, 5.0, training_cpu_s=1.0, training_busy_s=1.0),
        _snapshot(104.0, 3010, 8.0, training_cpu_s=2.2, training_busy_s=2.3),
    ]
    assert pricing.serving_cpu_per_request_s(snaps) == pytest.approx((3.0 - 1.2) / 3000)


@pytest.mark.parametrize(
    "snaps",
    [
        [_snapshot(100.0, 0, 5.0)],  # one snapshot
        [_snapshot(100.0, 0, 5.0), _snapshot(104.0, 5, 5.1)],  # too few requests
        [_snapshot(100.0, 0, 5.0), _snapshot(3.0, 3000, 1.0)],  # restarted in between
        # an agent that trained and does not report training_cpu_s
        [_snapshot(100.0, 0, 5.0, training_busy_s=0.0), _snapshot(104.0, 3000, 8.0, training_busy_s=1.0)],
    ],
)
def test_serving_cpu_per_request_is_unknown_when_it_cannot_be_told(snaps: list[Telemetry]) -> None:
    assert pricing.serving_cpu_per_request_s(snaps) is None


def test_a_dearer_process_cpu_raises_the_price_to_it_and_a_cheaper_one_leaves_it() -> None:
    profile = _metered(400e-6)
    raised = pricing.price_at_least(profile, TASKS, MIX, 650e-6)
    assert raised.capacity_per_s(TASKS, MIX) == pytest.approx(1 / 650e-6)
    assert raised.inference == profile.inference  # the model's price stays the model's
    assert pricing.price_at_least(profile, TASKS, MIX, 300e-6) == profile


def test_the_warm_up_sizes_by_the_process_cpu_when_the_metered_terms_leave_work_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 13 at width 1: the agent's metered terms said 400 us a request, its process spent
    # 650 us of CPU on each; a replay sized by the 400 us flooded it.
    published = _metered(400e-6)
    snaps = (
        _snapshot(100.0, 1, 5.0, training_cpu_s=0.0),
        _snapshot(105.0, 3001, 5.0 + 3000 * 650e-6, training_cpu_s=0.0, profile=published),
    )

    def fake_replay(*args: Any, **kwargs: Any) -> Any:
        return type("Outcome", (), {"last_telemetry": snaps[-1], "telemetry": snaps})()

    monkeypatch.setattr(pricing, "replay", fake_replay)
    options = ReplayOptions("mqtt://127.0.0.1:1883", "edge-1", 0.15)
    images = {t: (np.zeros((1, 28, 28), np.uint8), np.zeros(1, np.int64)) for t in TASKS}
    calibrated = replace(published, request_path=RequestPathCost(receive_s=60e-6))
    learnt = pricing.price_under_traffic(options, images, calibrated, TASKS, "inference-only")
    assert learnt.metered == published  # what the agent's own meter says stays available
    priced = learnt.priced(TASKS)
    assert priced.capacity_per_s(TASKS, MIX) == pytest.approx(1 / 650e-6)


def test_a_warm_up_that_could_not_read_the_process_cpu_sizes_by_the_metered_terms() -> None:
    metered = _metered(400e-6)
    assert pricing.TrafficPrice(metered, None).priced(TASKS) == metered
    assert pricing.TrafficPrice(metered, 300e-6).priced(TASKS) == metered  # cheaper: the meter stands
