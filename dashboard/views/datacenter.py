"""Datacenter mode: GPU roles over time, experience-buffer depth, staleness and throughput."""

from __future__ import annotations

import altair as alt
import streamlit as st

from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import dc_frames, run_choices, run_title
from dashboard.views.common import HOW_TO_RUN, empty_store, get_store, show_run_damage, store_part


def render(cfg: DashboardConfig) -> None:
    st.title("Datacenter")
    store = get_store(cfg)
    runs = []
    with store_part() as part:
        runs = run_choices(store, ("dc",))
    if part.failed:
        return
    if store is None or not runs:
        empty_store(cfg, store, "datacenter runs (kind 'dc')", [HOW_TO_RUN["dc"]])
        return
    show_run_damage(runs)
    run = st.selectbox("datacenter run", runs, format_func=run_title, key="dc_run")
    with store_part() as part:
        frames = dc_frames(store, run)
    if part.failed:
        return
    roles = frames["roles"]
    if roles.empty:
        st.info(f"Run #{run.run_id} recorded no per-period decisions (see docs/dashboard.md).")
    else:
        policies = sorted(roles["policy"].unique())
        policy = st.segmented_control("policy", policies, default=policies[0], key="dc_policy") or policies[0]
        mine = roles[roles["policy"] == policy]
        a, b = st.columns(2)
        a.altair_chart(
            alt.Chart(mine, title=f"GPU roles over time ({policy})")
            .mark_area(interpolate="step-after")
            .encode(
                x=alt.X("t_s:Q", title="time (s)"),
                y=alt.Y("gpus:Q", stack="zero", title="GPUs"),
                color=alt.Color("role:N", scale=alt.Scale(range=["#1f77b4", "#ff7f0e"])),
                tooltip=["t_s", "role", "gpus"],
            )
            .properties(height=charts.HEIGHT),
            width="stretch",
        )
        b.altair_chart(
            charts.lines(
                frames["buffer"], "t_s", "depth", "policy", "Experience buffer depth", x_title="time (s)"
            ),
            width="stretch",
        )
    c, d = st.columns(2)
    if len(frames["throughput"]):
        c.altair_chart(
            charts.lines(
                frames["throughput"],
                "t_s",
                "samples_per_s",
                "policy",
                "Training throughput",
                x_title="time (s)",
            ),
            width="stretch",
        )
    stale = frames["staleness"]
    if len(stale):
        d.altair_chart(
            charts.bars(stale, "lag", "count", "policy", "Staleness of trained samples (policy versions)"),
            width="stretch",
        )
    elif frames["summary"]["staleness_mean"].notna().any():
        lags = frames["summary"].melt(
            "policy", ["staleness_mean", "staleness_max"], var_name="statistic", value_name="versions"
        )
        d.altair_chart(
            charts.bars(lags.dropna(), "statistic", "versions", "policy", "Staleness (policy versions)"),
            width="stretch",
        )
    else:
        d.caption("No staleness recorded (`staleness_histogram` in the results).")
    summary = frames["summary"].dropna(subset=["throughput_samples_per_s"])
    if len(summary):
        st.altair_chart(
            charts.bars(
                summary.assign(run=run_title(run)),
                "policy",
                "throughput_samples_per_s",
                "policy",
                "Mean throughput (samples/s)",
            ),
            width="stretch",
        )
