"""Device detail: backlog, allocation, latency against the SLO and training over a window."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import device_frames, points_from_snapshots
from dashboard.views.common import (
    HOW_TO_RECORD,
    feed_banner,
    get_feed,
    get_live_history,
    get_store,
    store_part,
)

WINDOWS_S = {"5 min": 300.0, "15 min": 900.0, "1 h": 3600.0, "6 h": 21600.0, "24 h": 86400.0}


def render(cfg: DashboardConfig) -> None:
    st.title("Device")
    feed = get_feed(cfg)
    feed_banner(feed)
    store = get_store(cfg)
    recorded = {}
    with store_part() as reading:  # a damaged store still leaves the live devices to show
        recorded = {d.device: d for d in (store.telemetry_devices() if store is not None else [])}
    names = sorted(set(recorded) | set(feed.devices if feed is not None else {}))
    if not names:
        if reading.failed or (store is None and cfg.store_path.exists()):
            return  # the store's error is shown; "no telemetry yet" would be wrong
        st.info("No device telemetry yet.\n\n" + HOW_TO_RECORD.format(store=cfg.store_path))
        return
    left, right = st.columns([2, 3])
    device = left.selectbox("device", names, key="device")
    window = right.segmented_control("window", list(WINDOWS_S), default="15 min", key="window") or "15 min"
    span_s = WINDOWS_S[window]

    info = recorded.get(device)
    if info is not None and store is not None:
        # The window ends at the device's newest snapshot, so a device that went away still shows.
        until = (
            max(info.last_t_s, time.time()) if feed is not None and device in feed.devices else info.last_t_s
        )
        points = []
        with store_part() as part:
            points = store.telemetry_series(device, until - span_s, until, max_points=400)
        if part.failed:
            return
        source = f"run store, {info.rows:,} snapshots recorded"
    else:
        snapshots = get_live_history(cfg, device)
        points = points_from_snapshots(snapshots)
        if points:
            points = [p for p in points if p.t_s >= points[-1].t_s - span_s]
        source = "live feed only (not recorded: start `dartfl record` to keep history)"
    st.caption(f"{device}: {len(points)} points over the last {window}; source: {source}")
    if not points:
        st.info(f"No telemetry from {device} in the last {window}; pick a longer window.")
        return
    frames = device_frames(points)
    series = frames["series"]
    slo_ms = series["slo_ms"].dropna().max() if series["slo_ms"].notna().any() else None

    a, b = st.columns(2)
    a.altair_chart(charts.backlog_area(series), width="stretch")
    if len(frames["allocation"]):
        b.altair_chart(
            charts.area_shares(frames["allocation"], "Allocation: inference vs training per task"),
            width="stretch",
        )
    c, d = st.columns(2)
    if len(frames["latency"]):
        lat = charts.lines(
            frames["latency"], "t", "ms", "percentile", "Latency percentiles (last-minute window)"
        )
        c.altair_chart(charts.with_rule(lat, slo_ms, "SLO"), width="stretch")
    else:
        c.info("No latency percentiles reported yet (no request answered in the window).")
    if len(frames["trained"]):
        d.altair_chart(
            charts.lines(frames["trained"], "t", "samples", "task", "Samples trained per task (cumulative)"),
            width="stretch",
        )
    if series["slo_attainment"].notna().any():
        att = charts.lines(
            series, "t", "slo_attainment", None, "SLO attainment (last-minute window)", y_title="fraction"
        )
        st.altair_chart(charts.with_rule(att, cfg.slo_target, "target"), width="stretch")
