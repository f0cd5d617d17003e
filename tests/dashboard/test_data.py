"""The dashboard's data layer, without Streamlit: liveness, tiles, frames, tolerant readers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.protocol import Telemetry
from dartfl.store import RunStore
from dashboard import synthetic, tiles
from dashboard.data import (
    comparison_frame,
    dc_frames,
    decisions_frame,
    device_frames,
    fl_frames,
    fleet_tiles,
    open_store,
    points_from_snapshots,
    run_choices,
)
from dashboard.feed import FeedState, LiveSnapshot
from dashboard.telemetry import Liveness, row_from_snapshot

NOW = 1_800_000_000.0


def test_liveness_classifies_by_age_and_offline_status() -> None:
    live = Liveness(stale_after_s=10, gone_after_s=60)
    assert live.status(NOW - 2, NOW) == "alive"
    assert live.status(NOW - 30, NOW) == "stale"
    assert live.status(NOW - 61, NOW) == "gone"
    assert live.status(NOW - 1, NOW, offline=True) == "gone"
    with pytest.raises(ConfigError, match="stale_after_s < gone_after_s"):
        Liveness(60, 10)


def test_row_from_snapshot_sums_backlogs_and_tolerates_missing_fields() -> None:
    row = row_from_snapshot(synthetic.snapshot("pi-1", NOW, 30))
    assert row.device == "pi-1" and row.t_s == NOW
    assert row.backlog == sum(synthetic.snapshot("pi-1", NOW, 30).backlog.values())
    assert row.slo_ms == 250.0 and row.p99_ms is not None and row.p50_ms is not None
    bare = row_from_snapshot(Telemetry("pi-2", NOW))
    assert (bare.backlog, bare.p99_ms, bare.slo_attainment, bare.train_samples) == (None,) * 4


def _feed(*snaps: LiveSnapshot, connected: bool = True) -> FeedState:
    return FeedState("mqtt://127.0.0.1:1", connected, None, {s.device: s for s in snaps})


def test_tiles_prefer_live_data_and_put_slo_misses_first() -> None:
    history = [
        row_from_snapshot(synthetic.snapshot("a-ok", NOW - 5, 10, load=0.5)),
        row_from_snapshot(synthetic.snapshot("b-old", NOW - 30, 10, load=0.5)),
        row_from_snapshot(synthetic.snapshot("c-slow", NOW - 100, 10, load=0.5)),
    ]
    live = _feed(
        LiveSnapshot("c-slow", NOW - 1, synthetic.snapshot("c-slow", NOW - 1, 11, load=1.4)),
        LiveSnapshot("d-off", NOW - 2, synthetic.snapshot("d-off", NOW - 2, 3), offline=True),
    )
    tiles = fleet_tiles(history, live, NOW, Liveness(10, 60), slo_target=0.95)
    assert [t.device for t in tiles] == ["c-slow", "a-ok", "b-old", "d-off"]
    by_name = {t.device: t for t in tiles}
    assert by_name["c-slow"].source == "broker" and by_name["c-slow"].misses_slo
    assert (by_name["a-ok"].status, by_name["b-old"].status, by_name["d-off"].status) == (
        "alive",
        "stale",
        "gone",
    )
    assert not by_name["a-ok"].misses_slo
    assert by_name["a-ok"].round_target == 2048 and by_name["a-ok"].round_progress is not None


def test_a_fast_device_clock_does_not_let_history_hide_a_live_offline() -> None:
    # The device's clock runs 2 s fast; it shut down cleanly 20 s ago. Its last recorded row
    # (device time NOW - 18) used to "win" over the live snapshot received at NOW - 20 (this
    # host's time), and the tile said "stale" instead of "gone".
    skew = 2.0
    snap = synthetic.snapshot("e-fast", NOW - 20 + skew, 7)
    history = [row_from_snapshot(snap)]
    live = _feed(LiveSnapshot("e-fast", NOW - 20, snap, offline=True))
    (tile,) = fleet_tiles(history, live, NOW, Liveness(10, 60))
    assert tile.source == "broker" and tile.status == "gone" and tile.offline
    # A recorded row newer on the device's clock than the live one still wins.
    newer = [row_from_snapshot(synthetic.snapshot("e-fast", NOW - 5 + skew, 8))]
    (tile,) = fleet_tiles(newer, live, NOW, Liveness(10, 60))
    assert tile.source == "run store"


def test_tile_html_escapes_names_and_marks_misses() -> None:
    # The decoder refuses such a name; a store written by something else may still hold one.
    row = dataclasses.replace(
        row_from_snapshot(synthetic.snapshot("x", NOW, 10, load=1.4)), device="<script>"
    )
    (tile,) = fleet_tiles([row], None, NOW, Liveness(), 0.95)
    html = tiles.tiles_html([tile])
    assert "<script>" not in html.replace("<style>", "") and "&lt;script&gt;" in html
    assert "dfl-miss" in html and "misses SLO" in html


def test_device_frames_split_the_device_between_inference_and_tasks() -> None:
    points = points_from_snapshots([synthetic.snapshot("pi-1", NOW + i, i) for i in range(30)])
    frames = device_frames(points)
    totals = frames["allocation"].groupby("t")["share"].sum()
    assert len(totals) == 30 and totals.round(9).eq(1.0).all()
    use = frames["time_use"].groupby("t")["share"].sum()
    assert len(use) == 29 and use.round(9).eq(1.0).all()  # one row per interval, adding up
    assert set(frames["time_use"]["activity"]) == {"serving", "idle"} | {
        f"training {task}" for task in synthetic.TASKS
    }
    assert set(frames["latency"]["percentile"]) == {"p50", "p95", "p99"}
    assert set(frames["trained"]["task"]) == set(synthetic.TASKS)
    trained = frames["trained"][frames["trained"]["task"] == "digits"]["samples"]
    assert trained.is_monotonic_increasing


def test_fl_frames_compute_demand_weighted_accuracy_and_read_client_lists(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("fl", "x", {"task_demand": {"a": 3, "b": 1}})
    rounds = [
        {"round": 1, "accuracy": {"a": 0.5, "b": 0.9}, "clients": [{"client": "c0", "samples": 10}]},
        {"accuracy": {"a": 0.7, "b": None}, "clients": {"c0": 5, "c1": {"samples": 7}}},
        "garbage",
    ]
    tmp_store.add_result(run_id, "dart", {"rounds": rounds})
    tmp_store.add_result(run_id, "no-rounds", {"slo_attainment": 0.9})
    run = tmp_store.get_run(run_id)
    assert run is not None
    frames = fl_frames(run, tmp_store.results(run_id))
    summary = frames["summary"].set_index(["round", "metric"])["accuracy"]
    assert summary[(1.0, "mean")] == pytest.approx(0.7)
    assert summary[(1.0, "demand-weighted")] == pytest.approx((3 * 0.5 + 0.9) / 4)
    assert summary[(2.0, "demand-weighted")] == pytest.approx(0.7)  # only task a reported
    assert sorted(frames["clients"]["client"]) == ["c0", "c0", "c1"]
    assert set(frames["accuracy"]["policy"]) == {"dart"}


def test_dc_frames_turn_decisions_into_gpu_roles_and_read_staleness(tmp_store: RunStore) -> None:
    run_id = synthetic.record_dc_run(tmp_store, seconds=120, gpus=8)
    run = tmp_store.get_run(run_id)
    assert run is not None
    frames = dc_frames(tmp_store, run)
    per_t = frames["roles"].groupby(["policy", "t_s"])["gpus"].sum()
    assert per_t.round(9).eq(8.0).all()
    assert set(frames["staleness"]["policy"]) == {"dart", "static:0.5"}
    assert (frames["throughput"]["samples_per_s"] >= 0).all() and len(frames["throughput"]) > 100
    empty = tmp_store.start_run("dc", "no data", {})
    bare = tmp_store.get_run(empty)
    assert bare is not None and all(f.empty for f in dc_frames(tmp_store, bare).values())


def test_comparison_and_decisions_read_sim_runs_and_skip_missing_metrics(tmp_store: RunStore) -> None:
    from dartfl.store import DecisionRow

    run_id = tmp_store.start_run("sim", "s", {})
    tmp_store.add_result(run_id, "dart", {"slo_attainment": 0.99, "p99_latency_s": 0.2})
    tmp_store.add_result(run_id, "static:0.5", {"slo_attainment": "n/a"})
    rows = [DecisionRow(float(t), t % 5, 0.5, 8, 32, (1.0,), 2) for t in range(5000)]
    tmp_store.add_decisions(run_id, "dart", rows)
    runs = run_choices(tmp_store, ("sim",))
    frame = comparison_frame(tmp_store, runs)
    assert list(frame["policy"]) == ["dart", "static:0.5"]
    assert frame["slo_attainment"].tolist()[0] == 0.99 and frame["slo_attainment"].isna().tolist()[1]
    timeline = decisions_frame(tmp_store, run_id, ["dart", "static:0.5"], max_points=200)
    assert len(timeline) == 200 and set(timeline["policy"]) == {"dart"}
    assert run_choices(None) == [] and run_choices(tmp_store, ("fl",)) == []


def test_open_store_never_creates_a_store(tmp_path: Path) -> None:
    assert open_store(tmp_path / "none.sqlite") is None
    assert not (tmp_path / "none.sqlite").exists()


def test_synthetic_snapshot_is_valid_telemetry_on_the_wire() -> None:
    from dartfl import protocol

    snap = synthetic.snapshot("pi-1", NOW, 5)
    assert protocol.decode_telemetry(protocol.encode_telemetry(snap)) == snap


def test_fl_frames_read_the_fl_servers_history_shape(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("fl", "server", {})
    history = [
        {"round": 1, "accuracy_per_task": {"a": 0.4, "b": 0.8}, "mean_accuracy": 0.6,
         "demand_weighted_accuracy": 0.5, "samples": 900},
        {"round": 2, "accuracy_per_task": {"a": 0.6, "b": 0.9}, "samples": 1000},
    ]  # fmt: skip
    tmp_store.add_result(
        run_id, "dart", {"rounds": 2, "history": history, "demand_per_task": {"a": 1, "b": 1}}
    )
    run = tmp_store.get_run(run_id)
    assert run is not None
    frames = fl_frames(run, tmp_store.results(run_id))
    summary = frames["summary"].set_index(["round", "metric"])["accuracy"]
    assert summary[(1.0, "demand-weighted")] == 0.5
    assert summary[(2.0, "demand-weighted")] == pytest.approx(0.75)
    assert frames["clients"]["samples"].tolist() == [900, 1000]


def test_dc_frames_read_summary_only_runs(tmp_store: RunStore) -> None:
    run_id = tmp_store.start_run("dc", "sim", {"gpus": 8})
    tmp_store.add_result(run_id, "dart", {"samples_per_s": 40.0, "staleness_mean": 0.4, "staleness_max": 2})
    run = tmp_store.get_run(run_id)
    assert run is not None
    frames = dc_frames(tmp_store, run)
    assert frames["roles"].empty and frames["staleness"].empty
    row = frames["summary"].iloc[0]
    assert (row["throughput_samples_per_s"], row["staleness_mean"], row["staleness_max"]) == (40.0, 0.4, 2)
