"""Federated rounds: per-task, mean and demand-weighted accuracy per round; client shares."""

from __future__ import annotations

import altair as alt
import streamlit as st

from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import fl_frames
from dashboard.views.common import chosen_run


def render(cfg: DashboardConfig) -> None:
    st.title("Federated rounds")
    chosen = chosen_run(
        cfg,
        "fl",
        "federated-learning runs (kind 'fl')",
        "FL run",
        lambda store, run: fl_frames(run, store.results(run.run_id)),
    )
    if chosen is None:
        return
    run, frames = chosen
    if frames["accuracy"].empty and frames["summary"].empty:
        st.info(
            f"Run #{run.run_id} has no per-round accuracy yet: its results need a `rounds` list "
            "(see docs/dashboard.md for the shape)."
        )
        return
    policies = sorted(set(frames["accuracy"]["policy"]) | set(frames["summary"]["policy"]))
    policy = st.segmented_control("policy", policies, default=policies[0], key="fl_policy") or policies[0]
    acc = frames["accuracy"][frames["accuracy"]["policy"] == policy]
    a, b = st.columns(2)
    if len(acc):
        a.altair_chart(
            charts.lines(
                acc, "round", "accuracy", "task", f"Accuracy per task ({policy})", point=True, x_title="round"
            ),
            width="stretch",
        )
    summary = frames["summary"]
    if len(summary):  # one chart per metric, every policy on it: the comparison is the point
        with b:
            for metric, title in (("mean", "Mean accuracy"), ("demand-weighted", "Demand-weighted accuracy")):
                mine = summary[summary["metric"] == metric]
                if len(mine):
                    chart = charts.lines(
                        mine,
                        "round",
                        "accuracy",
                        "policy",
                        f"{title}, every policy",
                        point=True,
                        x_title="round",
                    )
                    st.altair_chart(chart.properties(height=charts.HEIGHT // 2 + 20), width="stretch")
    clients = frames["clients"][frames["clients"]["policy"] == policy]
    if len(clients):
        chart = (
            charts.base(clients, "bar", "Samples trained per client and round")
            .encode(
                x=alt.X("round:O", axis=alt.Axis(labelAngle=0)),
                y=alt.Y("samples:Q", stack="zero"),
                color=alt.Color("client:N"),
                tooltip=["round", "client", "samples"],
            )
            .properties(height=charts.HEIGHT)
        )
        st.altair_chart(chart, width="stretch")
    else:
        st.caption("No per-client contributions recorded for this policy.")
