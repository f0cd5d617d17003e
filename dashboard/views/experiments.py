"""Experiments: pick recorded runs and compare their policies side by side."""

from __future__ import annotations

import streamlit as st

from dashboard import charts
from dashboard.config import DashboardConfig
from dashboard.data import COMPARE_METRICS, comparison_frame, decisions_frame, run_title
from dashboard.views.common import HOW_TO_RUN, get_store, listed_runs, store_part

KINDS = ("sim", "replay", "fleet", "fl", "dc")
SHOWN = (
    "slo_attainment",
    "p99_latency_s",
    "harvest_efficiency",
    "train_samples",
    "max_backlog",
    "decision_us_p50",
)


def render(cfg: DashboardConfig) -> None:
    st.title("Experiments")
    store = get_store(cfg)
    runs = listed_runs(cfg, store, KINDS, "runs", [HOW_TO_RUN["sim"], HOW_TO_RUN["fleet"]])
    if store is None or not runs:
        return
    by_title = {run_title(r): r for r in runs}
    # Default: the newest two device-level runs, the ones `dartfl sim` would compare.
    device_runs = [t for t, r in by_title.items() if r.kind in ("sim", "replay", "fleet")]
    default = (device_runs or list(by_title))[:2]
    chosen = st.multiselect("runs to compare", list(by_title), default=default, key="runs")
    picked = [by_title[t] for t in chosen]
    if not picked:
        st.info("Pick one or more runs above.")
        return
    damage: list[str] = []
    with store_part() as part:
        frame = comparison_frame(store, picked, damage)
    for line in damage:  # those runs are left out; the others still compare
        st.error(line)
    if part.failed:
        return
    if frame.empty:
        st.info("The chosen runs have no per-policy results yet (still running, or failed).")
        return
    color = "run" if len(picked) > 1 else "policy"
    shown = [m for m in SHOWN if frame[m].notna().any()]
    for i in range(0, len(shown), 3):
        cols = st.columns(3)
        for col, metric in zip(cols, shown[i : i + 3], strict=False):
            data = frame.dropna(subset=[metric])
            col.altair_chart(
                charts.bars(data, "policy", metric, color, COMPARE_METRICS[metric], y_title=""),
                width="stretch",
            )
    with st.expander("numbers"):
        st.dataframe(frame.drop(columns=["run_id"]), hide_index=True)

    st.subheader("Over time")
    run = st.selectbox("run", picked, format_func=run_title, key="timeline_run")
    policies = list(run.policies)
    with store_part() as part:
        df = decisions_frame(store, run.run_id, policies, max_points=800)
    if part.failed:
        return
    if df.empty:
        st.info("This run recorded no per-period decisions (a replay is seen from the requester only).")
        return
    st.caption(
        "One panel per policy, each on the same axes: how the queue, the worst latency and the "
        "training rate moved over the run. Bucket maxima for backlog and latency, so bursts show."
    )
    panels = [
        ("backlog_max", "Backlog (bucket max)", "requests"),
        ("latency_p99_ms", "p99 latency per period", "ms"),
        ("samples_per_s", "Training rate", "samples/s"),
    ]
    drawn = [p for p in panels if df[p[0]].notna().any()]
    for col, (y, title, unit) in zip(st.columns(len(drawn)), drawn, strict=True):
        col.altair_chart(charts.policy_panels(df.dropna(subset=[y]), y, title, unit), width="stretch")
