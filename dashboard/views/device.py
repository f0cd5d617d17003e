"""Device detail: where its time went, its queue, latency against the SLO and what it trained,
all over one time window (every chart spans the same minutes)."""

from __future__ import annotations

import time
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from dartfl.store import RunStore, TelemetryDevice, TelemetryPoint
from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import TimeWindow, device_frames, points_from_snapshots
from dashboard.feed import FeedState
from dashboard.views.common import (
    feed_banner,
    get_feed,
    get_live_history,
    get_store,
    how_to_record,
    store_is_new,
    store_part,
)

WINDOWS_S = {"5 min": 300.0, "15 min": 900.0, "1 h": 3600.0, "6 h": 21600.0, "24 h": 86400.0}
MAX_POINTS = 400


def render(cfg: DashboardConfig) -> None:
    st.title("Device")
    feed = get_feed(cfg)
    feed_banner(feed)
    store = get_store(cfg)
    recorded: dict[str, TelemetryDevice] = {}
    with store_part() as reading:  # a damaged store still leaves the live devices to show
        recorded = {d.device: d for d in (store.telemetry_devices() if store is not None else [])}
    names = sorted(set(recorded) | set(feed.devices if feed is not None else {}))
    if not names:
        if reading.failed or (store is None and not store_is_new(cfg)):
            return  # the store's error is shown; "no telemetry yet" would be wrong
        st.info("No device telemetry yet.\n\n" + how_to_record(cfg))
        return
    device, span_s, label = _choose(names)
    if feed is not None and device in feed.devices:  # a live device's charts move with it

        @st.fragment(run_every=cfg.refresh_s)
        def live_part() -> None:
            _device_part(cfg, store, get_feed(cfg), device, span_s, label, fetch=True)

        live_part()
    else:
        _device_part(cfg, store, feed, device, span_s, label, recorded.get(device))


def _device_part(
    cfg: DashboardConfig,
    store: RunStore | None,
    feed: FeedState | None,
    device: str,
    span_s: float,
    label: str,
    info: TelemetryDevice | None = None,
    *,
    fetch: bool = False,
) -> None:
    """The caption and charts of one device over the window (`fetch`: read its recorded
    span now, as a live refresh does, instead of taking `info`)."""
    if fetch and store is not None:
        with store_part() as reading:
            info = store.telemetry_device(device)
        if reading.failed:
            return
    loaded = _points(cfg, store, feed, info, device, span_s)
    if loaded is None:
        return
    points, window, source = loaded
    live = feed is not None and device in feed.devices
    st.caption(
        f"{device}: {len(points)} points, {_clock(window.start_s)} to {_clock(window.end_s)} "
        f"({label}{', live' if live else ', ending at its newest snapshot'}); source: {source}"
    )
    if not points:
        st.info(f"No telemetry from {device} in the last {label}; pick a longer window.")
        return
    _charts(device_frames(points), window, cfg)


def _choose(names: list[str]) -> tuple[str, float, str]:
    """The device (from the URL's `?device=`, so a page can be shared) and the window."""
    wanted = st.query_params.get("device")
    left, right = st.columns([2, 3])
    device = left.selectbox(
        "device", names, index=names.index(wanted) if wanted in names else 0, key="device"
    )
    st.query_params["device"] = device
    label = right.segmented_control("window", list(WINDOWS_S), default="15 min", key="window") or "15 min"
    return device, WINDOWS_S[label], label


def _points(
    cfg: DashboardConfig,
    store: RunStore | None,
    feed: FeedState | None,
    info: TelemetryDevice | None,
    device: str,
    span_s: float,
) -> tuple[list[TelemetryPoint], TimeWindow, str] | None:
    """The device's points over the window, the window, and where they come from (None: the
    store failed, its error is shown). The window ends now for a live device, else at its
    newest snapshot, so a device that went away still shows its last minutes."""
    live = feed is not None and device in feed.devices
    if info is not None and store is not None:
        until = max(info.last_t_s, time.time()) if live else info.last_t_s
        window = TimeWindow(until - span_s, until)
        points: list[TelemetryPoint] = []
        with store_part() as part:
            points = store.telemetry_series(device, window.start_s, window.end_s, max_points=MAX_POINTS)
        if part.failed:
            return None
        return [_numbers_only(p) for p in points], window, f"run store, {info.rows:,} snapshots recorded"
    points = points_from_snapshots(get_live_history(cfg, device))
    until = max(time.time(), points[-1].t_s) if points else time.time()
    window = TimeWindow(until - span_s, until)
    points = [p for p in points if p.t_s >= window.start_s]
    return points, window, "live feed only (not recorded: start `dartfl record` to keep history)"


def _numbers_only(point: TelemetryPoint) -> TelemetryPoint:
    """`point` without the text a damaged row's column gives SQL's MAX and AVG (SQLite keeps any
    value in any column): a chart shows a gap there, as for a figure not reported. The Fleet
    page names such rows."""
    text: dict[str, Any] = {
        f.name: None for f in fields(point) if isinstance(getattr(point, f.name), str | bytes)
    }
    return replace(point, **text) if text else point


def _charts(frames: dict[str, pd.DataFrame], window: TimeWindow, cfg: DashboardConfig) -> None:
    series = frames["series"]
    slo_ms = series["slo_ms"].dropna().max() if series["slo_ms"].notna().any() else None
    a, b = st.columns(2)
    if len(frames["time_use"]):
        a.altair_chart(
            charts.time_use_area(frames["time_use"], "Where its time went", window), width="stretch"
        )
    elif len(frames["allocation"]):
        a.altair_chart(
            charts.time_use_area(
                frames["allocation"], "The policy's allocation (this device reports no time use)", window
            ),
            width="stretch",
        )
    b.altair_chart(charts.backlog_area(series, window), width="stretch")
    c, d = st.columns(2)
    if len(frames["latency"]):
        lat = charts.lines(frames["latency"], "t", "ms", "percentile", "Latency", window=window, y_title="ms")
        c.altair_chart(charts.with_rule(lat, slo_ms, "SLO"), width="stretch")
    else:
        c.info("No latency percentiles reported yet (no request answered in the window).")
    if series["slo_attainment"].notna().any():
        att = charts.lines(
            series, "t", "slo_attainment", None, "SLO attainment", window=window, y_title="fraction"
        )
        d.altair_chart(charts.with_rule(att, cfg.slo_target, "target"), width="stretch")
    st.caption(
        "Latency and SLO attainment: each point is the agent's figure over the minute before it. "
        "Time use: each interval's share between two snapshots."
    )
    if len(frames["trained"]):
        st.altair_chart(
            charts.stacked_samples(frames["trained"], "Samples trained per task (since start)", window),
            width="stretch",
        )


def _clock(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).strftime("%H:%M:%S UTC")
