"""Datacenter mode: for one policy, GPU roles, experience-buffer depth and throughput over the
run; across policies, throughput and the staleness of what was trained."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dartfl.store import RunInfo
from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import dc_frames, run_title
from dashboard.views.common import chosen_run


def render(cfg: DashboardConfig) -> None:
    st.title("Datacenter")
    chosen = chosen_run(cfg, "dc", "datacenter runs (kind 'dc')", "datacenter run", dc_frames)
    if chosen is None:
        return
    run, frames = chosen
    roles = frames["roles"]
    if roles.empty:
        st.info(f"Run #{run.run_id} recorded no per-period decisions (see docs/dashboard.md).")
    else:
        _one_policy(frames, sorted(roles["policy"].unique()))
    _across_policies(frames, run)


def _one_policy(frames: dict[str, pd.DataFrame], policies: list[str]) -> None:
    """Roles, buffer and throughput of the policy picked, on the run's one time axis."""
    policy = st.segmented_control("policy", policies, default=policies[0], key="dc_policy") or policies[0]
    span = alt.Scale(domain=[0.0, float(frames["roles"]["t_s"].max())])
    roles = frames["roles"][frames["roles"]["policy"] == policy]
    a, b, c = st.columns(3)
    a.altair_chart(
        charts.base(roles, "area", f"GPU roles ({policy})", interpolate="step-after")
        .encode(
            x=alt.X("t_s:Q", title="time (s)", scale=span),
            y=alt.Y("gpus:Q", stack="zero", title="GPUs"),
            color=alt.Color("role:N", title=None, scale=alt.Scale(range=["#1f77b4", "#ff7f0e"])),
            tooltip=["t_s", "role", alt.Tooltip("gpus:Q", format=".1f")],
        )
        .properties(height=charts.HEIGHT),
        width="stretch",
    )
    for col, name, y, title, unit in (
        (b, "buffer", "depth", f"Experience buffer ({policy})", "prompts"),
        (c, "throughput", "samples_per_s", f"Training throughput ({policy})", "samples/s"),
    ):
        mine = frames[name][frames[name]["policy"] == policy]
        if len(mine):
            chart = (
                charts.base(mine, "line", title, interpolate="step-after")
                .encode(
                    x=alt.X("t_s:Q", title="time (s)", scale=span),
                    y=alt.Y(f"{y}:Q", title=unit),
                    tooltip=["t_s", alt.Tooltip(f"{y}:Q", format=".4g")],
                )
                .properties(height=charts.HEIGHT)
            )
            col.altair_chart(chart, width="stretch")


def _across_policies(frames: dict[str, pd.DataFrame], run: RunInfo) -> None:
    st.subheader("Every policy of the run")
    a, b = st.columns(2)
    summary = frames["summary"].dropna(subset=["throughput_samples_per_s"])
    if len(summary):
        a.altair_chart(
            charts.bars(
                summary.assign(run=run_title(run)),
                "policy",
                "throughput_samples_per_s",
                "policy",
                "Mean throughput (samples/s)",
                y_title="samples/s",
            ),
            width="stretch",
        )
    stale = frames["staleness"]
    if len(stale):
        b.altair_chart(
            charts.bars(
                stale, "lag", "count", "policy", "Staleness of trained samples", y_title="samples"
            ).encode(x=alt.X("lag:O", title="policy versions behind", axis=alt.Axis(labelAngle=0))),
            width="stretch",
        )
    elif frames["summary"]["staleness_mean"].notna().any():
        lags = frames["summary"].melt(
            "policy", ["staleness_mean", "staleness_max"], var_name="statistic", value_name="versions"
        )
        b.altair_chart(
            charts.bars(lags.dropna(), "statistic", "versions", "policy", "Staleness (policy versions)"),
            width="stretch",
        )
    else:
        b.caption("No staleness recorded (`staleness_histogram` in the results).")
