"""Altair chart builders. Pure: frames in, chart specs out.

Every chart over time takes the page's `TimeWindow`, so all the charts of a page span the same
minutes whatever data each has. Series that could sit on top of each other get a dash pattern
as well as a colour, or small multiples (one panel per policy), never a bare overlay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import altair as alt
import pandas as pd

from dashboard.data import TimeWindow

__all__ = [
    "GREEN",
    "HEIGHT",
    "RED",
    "backlog_area",
    "bars",
    "base",
    "fleet_p99_chart",
    "layer",
    "lines",
    "policy_panels",
    "stacked_samples",
    "time_use_area",
    "with_rule",
]

Mark = Literal["area", "bar", "line", "rule", "text"]
RED, AMBER, GREEN, GREY = "#d62728", "#ff9f1c", "#2ca02c", "#8c8c8c"
SERVING, IDLE = "#1f77b4", "#d9d9d9"
# Training per task: warm and green hues, apart from serving's blue and idle's grey.
TRAINING = ("#ff7f0e", "#2ca02c", "#9467bd", "#e377c2", "#bcbd22", "#8c564b", "#17becf")
HEIGHT = 220
# Streamlit's theme recolours series in shades of one hue; categories read better apart.
SCHEME = alt.Scale(scheme="tableau10")
DASHES = alt.Scale(range=[[1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [1, 3]])


def base(df: pd.DataFrame, mark: Mark, title: str | None = None, **mark_props: Any) -> alt.Chart:
    """A chart of `df` with its mark set through the constructor: altair's `mark_*` methods
    are typed as returning Any, the constructor keeps the chart's type for mypy."""
    mark_def = alt.MarkDef(type=mark, **mark_props)
    return alt.Chart(df, mark=mark_def) if title is None else alt.Chart(df, mark=mark_def, title=title)


def layer(*charts: alt.Chart) -> alt.LayerChart:
    """Charts drawn on one another (`alt.layer` is typed as maybe a facet)."""
    return alt.LayerChart(layer=list(charts))


def time_x(window: TimeWindow | None, field: str = "t") -> alt.X:
    """A clock axis over the page's window (the data's own span without one)."""
    scale = alt.Scale(domain=list(window.domain)) if window is not None else alt.Undefined
    return alt.X(f"{field}:T", axis=alt.Axis(format="%H:%M:%S", title=None, labelAngle=0), scale=scale)


def lines(
    df: pd.DataFrame,
    x: str,
    y: str,
    color: str | None,
    title: str,
    *,
    window: TimeWindow | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    point: bool = False,
) -> alt.Chart:
    """A line chart; a datetime `x` gets the page's clock axis. Each series has its own colour
    and dash, so two that coincide still show as two."""
    is_time = x in df and pd.api.types.is_datetime64_any_dtype(df[x])
    x_enc = time_x(window, x) if is_time else alt.X(f"{x}:Q", title=x_title or x)
    chart = (
        base(df, "line", title, point=point, interpolate="linear" if point else "monotone")
        .encode(x=x_enc, y=alt.Y(f"{y}:Q", title=y_title or y.replace("_", " ")))
        .properties(height=HEIGHT)
    )
    if color is None:
        return chart.encode(tooltip=[x, y])
    return chart.encode(
        color=alt.Color(f"{color}:N", title=None, scale=SCHEME),
        strokeDash=alt.StrokeDash(f"{color}:N", title=None, scale=DASHES),
        tooltip=[x, y, color],
    )


def with_rule(chart: alt.Chart, value: float | None, label: str, color: str = RED) -> alt.LayerChart:
    """`chart` with a dashed horizontal rule at `value` (the SLO, a target), if known."""
    layers: list[alt.Chart] = [chart]
    if value is not None:
        rule_df = pd.DataFrame({"y": [value], "label": [label]})
        layers.append(
            base(rule_df, "rule", color=color, strokeDash=[6, 4], size=2).encode(y="y:Q", tooltip=["label"])
        )
        layers.append(
            base(rule_df, "text", align="left", dx=4, dy=-6, color=color, fontWeight="bold").encode(
                y="y:Q", text="label:N", x=alt.value(0)
            )
        )
    return layer(*layers)


def activity_order(activities: Sequence[str]) -> list[str]:
    """Stacking order: serving at the bottom, training per task above it, idle on top."""
    training = sorted(a for a in activities if a.startswith("training"))
    return ["serving", *training, "idle"]


def activity_colors(activities: Sequence[str]) -> alt.Scale:
    """Serving blue, each task's training its own warm hue, idle grey."""
    order = activity_order(activities)
    colors = [SERVING, *(TRAINING[i % len(TRAINING)] for i in range(len(order) - 2)), IDLE]
    return alt.Scale(domain=order, range=colors)


def time_use_area(df: pd.DataFrame, title: str, window: TimeWindow | None) -> alt.Chart:
    """Shares of the device's time stacked to 1: serving at the bottom, training per task
    above it, idle on top. A row stands for the interval that ends at its time."""
    scale = activity_colors(list(df["activity"].unique()))
    order = list(activity_order(df["activity"].unique()))
    rank = {name: i for i, name in enumerate(order)}
    data = df.assign(rank=df["activity"].map(rank))
    return (
        base(data, "area", title, interpolate="step-before", opacity=0.9)
        .encode(
            x=time_x(window),
            y=alt.Y(
                "share:Q",
                stack="zero",
                title="share of the device's time",
                scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color("activity:N", title=None, scale=scale, sort=order),
            order=alt.Order("rank:Q"),
            tooltip=["t:T", "activity:N", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(height=HEIGHT)
    )


def stacked_samples(df: pd.DataFrame, title: str, window: TimeWindow | None) -> alt.Chart:
    """Cumulative samples per task, stacked: each task a band, the top edge the total."""
    return (
        base(df, "area", title, interpolate="step-after", opacity=0.85)
        .encode(
            x=time_x(window),
            y=alt.Y("samples:Q", stack="zero", title="samples"),
            color=alt.Color("task:N", title=None, scale=alt.Scale(range=list(TRAINING))),
            tooltip=["t:T", "task:N", alt.Tooltip("samples:Q", format=",d")],
        )
        .properties(height=HEIGHT)
    )


def backlog_area(df: pd.DataFrame, window: TimeWindow | None) -> alt.LayerChart:
    peak = base(df, "area", color="#9ecae1", opacity=0.7, interpolate="step-after").encode(
        x=time_x(window), y=alt.Y("backlog_max:Q", title="requests"), tooltip=["t:T", "backlog_max:Q"]
    )
    mean = base(df, "line", color="#1f77b4").encode(x=time_x(window), y="backlog_mean:Q")
    return layer(peak, mean).properties(height=HEIGHT, title="Backlog (queued requests; mean, bucket max)")


def policy_panels(
    df: pd.DataFrame, y: str, title: str, y_title: str, x_title: str = "time (s)"
) -> alt.FacetChart:
    """Small multiples over time: one panel per policy, stacked, sharing both axes, so each
    policy's line is seen whole and the panels compare at a glance."""
    policies = sorted(df["policy"].unique())
    height = max(60, min(HEIGHT, 480 // max(1, len(policies))))
    return (
        base(df, "line", interpolate="step-after")
        .encode(
            x=alt.X("t_s:Q", title=x_title),
            y=alt.Y(f"{y}:Q", title=y_title),
            color=alt.Color("policy:N", legend=None, scale=SCHEME),
            tooltip=["policy", "t_s", alt.Tooltip(f"{y}:Q", format=".4g")],
        )
        .properties(height=height)
        .facet(row=alt.Row("policy:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
        .properties(title=title)
    )


def bars(df: pd.DataFrame, x: str, y: str, color: str, title: str, y_title: str | None = None) -> alt.Chart:
    """Grouped bars: one group per `x`, one bar per `color` (one bar per `x` when they agree)."""
    grouped = x != color
    chart = (
        base(df, "bar", title)
        .encode(
            x=alt.X(f"{x}:N", title=None, axis=alt.Axis(labelAngle=-30, labels=grouped, ticks=grouped)),
            y=alt.Y(f"{y}:Q", title=y.replace("_", " ") if y_title is None else y_title),
            color=alt.Color(f"{color}:N", title=None, scale=SCHEME),
            tooltip=[x, color, alt.Tooltip(f"{y}:Q", format=".4g")],
        )
        .properties(height=HEIGHT)
    )
    return chart.encode(xOffset=f"{color}:N") if grouped else chart


def fleet_p99_chart(df: pd.DataFrame) -> alt.LayerChart:
    """p99 latency relative to each device's SLO, worst first, with the SLO at 1.0."""
    data = df.dropna(subset=["p99_over_slo"]).sort_values("p99_over_slo", ascending=False).head(60)
    bar = (
        base(data, "bar", "p99 latency / SLO per device, now (worst 60)")
        .encode(
            x=alt.X("device:N", sort="-y", title=None, axis=alt.Axis(labelAngle=-45)),
            y=alt.Y("p99_over_slo:Q", title="p99 / SLO"),
            color=alt.condition(alt.datum.p99_over_slo > 1.0, alt.value(RED), alt.value(GREEN)),
            tooltip=["device", alt.Tooltip("p99_over_slo:Q", format=".2f"), "status"],
        )
        .properties(height=HEIGHT)
    )
    return with_rule(bar, 1.0, "SLO")
