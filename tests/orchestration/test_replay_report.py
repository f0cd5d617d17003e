"""The replay's report from the device's telemetry: harvest against the whole device's fluid
limit, and a split agent's lanes in the same keys as a simulation's."""

from __future__ import annotations

from typing import Any

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.metrics import RunRecord
from dartfl.profiles import get_profile
from dartfl.protocol import Telemetry
from dartfl.types import DeviceProfile
from orchestration.replay_report import Replies, replay_report

TASKS = ("digits",)


def _snapshot(
    t: float, trained: int, training_s: float, serving_s: float, cores: int, switches: int
) -> Telemetry:
    return Telemetry(
        device="edge-1",
        t=1.7e9 + t,
        uptime_s=t + 1.0,
        tasks=TASKS,
        train_samples_per_task={"digits": trained},
        training_busy_s=training_s,
        inference_busy_s=serving_s,
        inference_cores=cores,
        training_cores=4 - cores,
        core_switches=switches,
        core_reclaims=0,
    )


def _report(snapshots: list[Telemetry], profile: DeviceProfile) -> tuple[dict[str, Any], RunRecord]:
    """A 100-s replay of 200 requests, every one answered in 50 ms."""
    n = 200
    times = np.linspace(0.0, 99.0, n)
    arrivals = Arrivals(times, np.zeros(n, dtype=np.int64), TASKS, 100.0)
    replies = Replies(np.full(n, "ok"), times + 0.05, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))
    report, record = replay_report(
        arrivals, times, np.zeros(n), replies, np.zeros(n, dtype=np.int64),
        profile, "dart", 0.25, snapshots, "binary",
    )  # fmt: skip
    return report.to_json(), record


def test_a_split_device_that_trains_while_it_serves_stays_under_its_fluid_limit() -> None:
    # Issue 13/15: harvest was priced on one timeline, so a split agent whose training lane
    # trained through the serving lane's busy time reported 1.13 (a replay on 2026-12-06).
    # Here the training lane is busy the whole 100 s and the serving lane 60 s of it, at a
    # per-sample time no cheaper than the profile's one-core price: at most one core's
    # worth, so well under the 4-core limit.
    profile = get_profile("pi4")
    per_sample = profile.training.cheapest_per_sample_s()
    trained = int(100.0 / per_sample)
    out, record = _report([_snapshot(0, 0, 0, 0, 4, 0), _snapshot(100, trained, 100.0, 60.0, 2, 3)], profile)
    assert record.fluid.units == 4.0
    one_timeline = trained / ((100.0 - 60.0) / per_sample)  # the old limit's figure
    assert one_timeline > 2.0
    assert 0.2 < out["harvest_efficiency"] <= 1.0
    assert out["cores"] == 4 and out["core_switches"] == 3 and out["core_reclaims"] == 0
    assert out["mean_inference_cores"] == 3.0  # the serving lane held 4, then 2 cores


def test_a_one_core_profile_keeps_the_one_timeline_limit() -> None:
    # A time-shared agent on one core: training and serving never overlap, and the limit is
    # the window less the serving time, at the cheaper of the profile's and the achieved price.
    profile = get_profile("pi4").with_cores(1)
    per_sample = profile.training.cheapest_per_sample_s()
    snapshots = [_snapshot(0, 0, 0, 0, 1, 0), _snapshot(100, 1000, 1000 * per_sample * 1.25, 20.0, 1, 0)]
    out, record = _report(snapshots, profile)
    needed = 200 * profile.inference_for("digits").cheapest_per_request_s(profile.max_batch)
    assert record.fluid.units == 1.0
    assert out["harvest_efficiency"] == 1000 / ((100.0 - min(needed, 20.0)) / per_sample)
