"""Fleet overview: one tile per device, live from MQTT, with recorded history as fallback."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dartfl.store import RunStore, TelemetryRow
from dashboard import charts, tiles
from dashboard.config import DashboardConfig
from dashboard.data import DeviceTile, TimeWindow, fleet_frame, fleet_tiles, run_choices
from dashboard.telemetry import number
from dashboard.views.common import (
    feed_banner,
    get_feed,
    get_store,
    how_to_record,
    point_to_runs,
    store_is_new,
    store_part,
)

FLEET_HISTORY_S = 3600.0  # the fleet SLO chart's window
# A snapshot's headline columns: integers, and finite numbers.
_COUNTS = ("backlog", "train_samples")
_FIGURES = ("inference_share", "p50_ms", "p95_ms", "p99_ms", "slo_ms", "slo_attainment")


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
        history = readable_rows(history, damage, cfg.store_path)
        for line in damage:  # a device's newest snapshot did not read: its previous one shows
            st.error(line)

        def baselines(times: Mapping[str, float]) -> Mapping[str, TelemetryRow]:
            if store is not None and not part.failed:
                with store_part(after=part):  # no time use from the store, the tiles still show
                    return store.telemetry_before(times)
            return {}

        found = fleet_tiles(history, feed, now, cfg.liveness, cfg.slo_target, baselines)
        if not found and store is None and not store_is_new(cfg):
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


def readable_rows(rows: Sequence[TelemetryRow], damage: list[str], store_path: Path) -> list[TelemetryRow]:
    """`rows` with each headline column that is not a number (SQLite keeps any value in any
    column: `UPDATE telemetry SET backlog = 'lots'`) set to None, so its tile shows "-" and the
    fleet's figures leave it out; each such row is named in `damage`, with how to remove it."""
    readable = []
    for row in rows:
        bad = {name: getattr(row, name) for name in _COUNTS if not _count(getattr(row, name))}
        bad |= {name: getattr(row, name) for name in _FIGURES if not _figure(getattr(row, name))}
        if bad:
            held = ", ".join(f"{name} {_short(value)}" for name, value in bad.items())
            quoted = row.device.replace("'", "''")
            damage.append(
                f"{store_path}: the telemetry snapshot of {row.device!r} at t_s={row.t_s!r} holds "
                f'{held}, not a number (shown as -): delete it with `sqlite3 {store_path} "DELETE '
                f"FROM telemetry WHERE device = '{quoted}' AND t_s = {row.t_s!r}\"` or restore a backup"
            )
            blank: dict[str, Any] = dict.fromkeys(bad)
            row = replace(row, **blank)
        readable.append(row)
    return readable


def _count(value: object) -> bool:
    return value is None or (type(value) is int)


def _figure(value: object) -> bool:
    return value is None or number(value) is not None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _no_devices(cfg: DashboardConfig, store: RunStore | None) -> None:
    st.info(
        "No device has reported yet. Devices publish telemetry on `dartfl/v1/<device>/telemetry`; "
        "start agents with `dartfl edge run --broker URL` and point the dashboard at the "
        "same broker.\n\n" + how_to_record(cfg)
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
            # number(): a damaged row's text would reach the chart through SQL's AVG and MIN
            "mean": [number(p.slo_attainment) for p in points],
            "worst device": [number(p.slo_attainment_min) for p in points],
        }
    ).melt("t", var_name="fleet", value_name="slo_attainment")
    chart = charts.lines(
        df, "t", "slo_attainment", "fleet", "SLO attainment, last hour", window=window, y_title="fraction"
    )
    st.altair_chart(charts.with_rule(chart, cfg.slo_target, "target"), width="stretch")
