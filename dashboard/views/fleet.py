"""Fleet overview: one tile per device, live from MQTT, with recorded history as fallback."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pandas as pd
import streamlit as st

from dartfl.store import RunStore, TelemetryRow
from dashboard import charts, tiles
from dashboard.config import DashboardConfig
from dashboard.data import DeviceTile, TimeWindow, fleet_frame, fleet_tiles, run_choices
from dashboard.views.common import (
    HOW_TO_RECORD,
    feed_banner,
    get_feed,
    get_store,
    point_to_runs,
    store_part,
)

FLEET_HISTORY_S = 3600.0  # the fleet SLO chart's window


def render(cfg: DashboardConfig) -> None:
    st.title("Fleet")

    @st.fragment(run_every=cfg.refresh_s)
    def live_part() -> None:
        now = time.time()
        feed = get_feed(cfg)
        feed_banner(feed)
        store = get_store(cfg)
        history: list[TelemetryRow] = []
        damage: list[str] = []
        with store_part() as part:  # a damaged store still leaves the live tiles to show
            history = store.telemetry_latest(damage=damage) if store is not None else []
        for line in damage:  # a device's newest snapshot did not read: its previous one shows
            st.error(line)

        def baselines(times: Mapping[str, float]) -> Mapping[str, TelemetryRow]:
            if store is not None and not part.failed:
                with store_part(after=part):  # no time use from the store, the tiles still show
                    return store.telemetry_before(times)
            return {}

        found = fleet_tiles(history, feed, now, cfg.liveness, cfg.slo_target, baselines)
        if not found and store is None and cfg.store_path.exists():
            return  # the store did not open (its error is shown) and nothing is live
        if not found and not part.failed:
            _no_devices(cfg, store)
            return
        if found:
            _tiles(found, cfg)
        if store is not None:
            with store_part(after=part):
                _fleet_slo(store, TimeWindow(now - FLEET_HISTORY_S, now), cfg)

    live_part()


def _no_devices(cfg: DashboardConfig, store: RunStore | None) -> None:
    st.info(
        "No device has reported yet. Devices publish telemetry on `dartfl/v1/<device>/telemetry`; "
        "start agents with `dartfl edge run --broker URL` and point the dashboard at the "
        "same broker.\n\n" + HOW_TO_RECORD.format(store=cfg.store_path)
    )
    with store_part():
        point_to_runs(run_choices(store))


def _tiles(found: list[DeviceTile], cfg: DashboardConfig) -> None:
    counts = {s: sum(t.status == s for t in found) for s in ("alive", "stale", "gone")}
    missing = sum(t.misses_slo for t in found)
    cols = st.columns(5)
    cols[0].metric("devices", len(found))
    cols[1].metric("alive", counts["alive"])
    cols[2].metric("stale", counts["stale"])
    cols[3].metric("gone", counts["gone"])
    cols[4].metric(f"missing SLO (< {cfg.slo_target:.0%})", missing)
    st.caption(
        "Each tile: where the device's time went over the last minute (serving, training, idle), "
        "its queue, the last minute's SLO attainment and p99; click a name for the device's page."
    )
    st.markdown(tiles.tiles_html(found), unsafe_allow_html=True)
    frame = fleet_frame(found)
    if frame["p99_over_slo"].notna().any():
        st.altair_chart(charts.fleet_p99_chart(frame), width="stretch")


def _fleet_slo(store: RunStore, window: TimeWindow, cfg: DashboardConfig) -> None:
    points = store.telemetry_fleet_series(window.start_s, window.end_s, max_points=240)
    if not points:
        return
    df = pd.DataFrame(
        {
            "t": pd.to_datetime([p.t_s for p in points], unit="s", utc=True),
            "mean": [p.slo_attainment for p in points],
            "worst device": [p.slo_attainment_min for p in points],
        }
    ).melt("t", var_name="fleet", value_name="slo_attainment")
    chart = charts.lines(
        df, "t", "slo_attainment", "fleet", "SLO attainment, last hour", window=window, y_title="fraction"
    )
    st.altair_chart(charts.with_rule(chart, cfg.slo_target, "target"), width="stretch")
