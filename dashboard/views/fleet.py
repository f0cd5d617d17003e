"""Fleet overview: one tile per device, live from MQTT, with recorded history as fallback."""

from __future__ import annotations

import time

import streamlit as st

from dartfl.store import RunStore, TelemetryRow
from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import DeviceTile, fleet_frame, fleet_tiles
from dashboard.views.common import HOW_TO_RECORD, feed_banner, get_feed, get_store, store_part


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
        tiles = fleet_tiles(history, feed, now, cfg.liveness, cfg.slo_target)
        if not tiles and store is None and cfg.store_path.exists():
            return  # the store did not open (its error is shown) and nothing is live
        if not tiles and not part.failed:
            st.info(
                "No device has reported yet. Devices publish telemetry on `dartfl/v1/<device>/telemetry`; "
                "start agents with `dartfl edge run --broker URL` and point the dashboard at the "
                "same broker.\n\n" + HOW_TO_RECORD.format(store=cfg.store_path)
            )
            return
        if tiles:
            _tiles(tiles, cfg)
        if store is not None:
            with store_part(after=part):
                _fleet_slo(store, now, cfg)

    live_part()


def _tiles(tiles: list[DeviceTile], cfg: DashboardConfig) -> None:
    counts = {s: sum(t.status == s for t in tiles) for s in ("alive", "stale", "gone")}
    missing = sum(t.misses_slo for t in tiles)
    cols = st.columns(5)
    cols[0].metric("devices", len(tiles))
    cols[1].metric("alive", counts["alive"])
    cols[2].metric("stale", counts["stale"])
    cols[3].metric("gone", counts["gone"])
    cols[4].metric(f"missing SLO (< {cfg.slo_target:.0%})", missing)
    st.markdown(charts.tiles_html(tiles), unsafe_allow_html=True)
    frame = fleet_frame(tiles)
    if frame["p99_over_slo"].notna().any():
        st.altair_chart(charts.fleet_p99_chart(frame), width="stretch")


def _fleet_slo(store: RunStore, now: float, cfg: DashboardConfig) -> None:
    points = store.telemetry_fleet_series(now - 3600.0, now, max_points=240)
    if not points:
        return
    import pandas as pd

    df = pd.DataFrame(
        {
            "t": pd.to_datetime([p.t_s for p in points], unit="s", utc=True),
            "mean": [p.slo_attainment for p in points],
            "worst device": [p.slo_attainment_min for p in points],
        }
    ).melt("t", var_name="fleet", value_name="slo_attainment")
    chart = charts.lines(df, "t", "slo_attainment", "fleet", "SLO attainment, last hour")
    st.altair_chart(charts.with_rule(chart, cfg.slo_target, "target"), width="stretch")
