"""Where a device's time went: shares of a window from the cumulative time-use counters, the
tiles' minute from the live feed and from the run store, and how the tiles say it."""

from __future__ import annotations

import dataclasses

import pytest

from dartfl.protocol import Telemetry
from dartfl.store import RunStore
from dashboard import synthetic, tiles
from dashboard.data import fleet_tiles
from dashboard.feed import LiveFeed
from dashboard.telemetry import Liveness, row_from_snapshot
from dashboard.timeuse import TimeCounters, time_use
from messaging.link import Message

NOW = 1_800_000_000.0


def _counters(up: float, serve: float, train: float, **per_task: float) -> TimeCounters:
    return TimeCounters(up, serve, train, per_task)


def test_a_window_splits_into_serving_training_per_task_and_idle() -> None:
    use = time_use(_counters(100, 10, 50, a=20, b=30), _counters(160, 25, 80, a=30, b=50))
    assert use is not None and use.window_s == 60
    assert (use.serving, use.training, use.idle) == pytest.approx((0.25, 0.5, 0.25))
    assert use.training_per_task == pytest.approx({"a": 1 / 6, "b": 1 / 3})


def test_a_round_end_flush_outside_the_per_task_figures_still_counts_as_training() -> None:
    # 30 s trained, 20 of them booked to tasks: the split scales to the whole training share.
    use = time_use(_counters(0, 0, 0, a=0, b=0), _counters(60, 0, 30, a=10, b=10))
    assert use is not None and use.training_per_task == pytest.approx({"a": 0.25, "b": 0.25})


@pytest.mark.parametrize(
    "later",
    [_counters(100, 10, 50), _counters(90, 12, 60), _counters(200, 5, 60), _counters(200, 20, 40)],
    ids=["empty window", "uptime went back", "serving went back", "training went back"],
)
def test_a_window_across_a_restart_is_unknown_not_negative(later: TimeCounters) -> None:
    assert time_use(_counters(100, 10, 50), later) is None


def test_busy_time_a_hair_over_the_uptime_still_reads_as_shares() -> None:
    use = time_use(_counters(0, 0, 0), _counters(10, 4, 6.001))
    assert use is not None and use.serving + use.training <= 1.0 and use.idle == 0.0


def test_a_device_without_time_use_counters_has_none() -> None:
    assert TimeCounters.of_snapshot(Telemetry("old-agent", NOW)) is None
    assert TimeCounters.of_payload({"uptime_s": 5, "inference_busy_s": "x", "training_busy_s": 1}) is None


def _message(snapshot: Telemetry) -> Message:
    from dartfl import protocol

    return Message(protocol.telemetry_topic(snapshot.device), protocol.encode_telemetry(snapshot), 1, False)


def test_the_live_feed_keeps_the_start_of_each_devices_last_minute() -> None:
    feed = LiveFeed("mqtt://127.0.0.1:1", clock=lambda: NOW, retry_s=0.2)
    try:
        for i in range(90):
            feed.handle(_message(synthetic.snapshot("pi-1", NOW - 90 + i, i)))
        feed.handle(_message(synthetic.snapshot("pi-2", NOW, 5)))
        state = feed.state()
    finally:
        feed.close()
    live = state.devices["pi-1"]
    assert live.baseline is not None and live.snapshot.t - live.baseline.t == 60.0
    assert state.devices["pi-2"].baseline is None  # one snapshot: no window yet
    (tile, _) = fleet_tiles([], state, NOW, Liveness(10, 60))
    assert tile.device == "pi-1" and tile.time_use is not None and tile.time_use.window_s == 60.0


def test_recorded_tiles_take_their_minute_from_the_run_store(tmp_store: RunStore) -> None:
    synthetic.fill_telemetry(tmp_store, devices=2, seconds=120, end_s=NOW)
    history = tmp_store.telemetry_latest()
    found = fleet_tiles(history, None, NOW, Liveness(10, 60), baselines=tmp_store.telemetry_before)
    assert [t.time_use is not None and t.time_use.window_s for t in found] == [60.0, 60.0]
    without = fleet_tiles(history, None, NOW, Liveness(10, 60))
    assert [t.time_use for t in without] == [None, None]


def test_a_tile_headlines_time_use_and_says_when_a_device_was_last_heard() -> None:
    row = row_from_snapshot(synthetic.snapshot("pi-1", NOW - 26, 10))
    (tile,) = fleet_tiles([row], None, NOW, Liveness(5, 20))
    use = time_use(_counters(0, 0, 0), _counters(60, 3, 57))
    text = tiles.tile_html(dataclasses.replace(tile, time_use=use))
    assert "serving 5%" in text and "training 95%" in text and "idle 0%" in text and ">last min<" in text
    assert ">gone<" in text and "last heard 26 s ago, from the run store" in text
    assert "live" not in text.replace("dfl-", "")
    assert ">waiting for a second snapshot<" in tiles.tile_html(tile)
    old_agent = dataclasses.replace(tile, reports_time_use=False)
    assert ">not reported<" in tiles.tile_html(old_agent)
    assert 'href="device?device=pi-1"' in text  # the name opens the device's page


@pytest.mark.parametrize(
    ("seconds", "said"), [(26, "26 s"), (240, "4 min"), (3 * 3600, "3 h"), (2 * 86400, "2 days")]
)
def test_ages_read_as_people_say_them(seconds: float, said: str) -> None:
    assert tiles.ago(seconds) == said
