"""Altair chart builders and the fleet tiles' HTML. Pure: frames in, chart specs out."""

from __future__ import annotations

import html
from collections.abc import Sequence

import altair as alt
import pandas as pd

from dashboard.data import DeviceTile

__all__ = [
    "TILE_CSS",
    "area_shares",
    "bars",
    "fleet_p99_chart",
    "lines",
    "tile_html",
    "tiles_html",
    "with_rule",
]

RED, AMBER, GREEN, GREY = "#d62728", "#ff9f1c", "#2ca02c", "#8c8c8c"
STATUS_COLORS = {"alive": GREEN, "stale": AMBER, "gone": GREY}
TIME_AXIS = alt.Axis(format="%H:%M:%S", title=None, labelAngle=0)
HEIGHT = 220
# Streamlit's theme recolours series in shades of one hue; categories read better apart.
SCHEME = alt.Scale(scheme="tableau10")


def lines(df: pd.DataFrame, x: str, y: str, color: str | None, title: str, **kw: object) -> alt.Chart:
    """A line chart; `x` of datetime type gets a clock axis."""
    is_time = pd.api.types.is_datetime64_any_dtype(df[x]) if x in df else False
    x_enc = alt.X(f"{x}:T", axis=TIME_AXIS) if is_time else alt.X(f"{x}:Q", title=kw.pop("x_title", x))
    enc: dict[str, object] = {"x": x_enc, "y": alt.Y(f"{y}:Q", title=kw.pop("y_title", y.replace("_", " ")))}
    if color is not None:
        enc["color"] = alt.Color(f"{color}:N", title=None, scale=SCHEME)
    tooltip = [c for c in (x, y, color) if c is not None]
    point = bool(kw.pop("point", False))
    return (
        alt.Chart(df, title=title)
        .mark_line(point=point, interpolate="monotone" if not point else "linear")
        .encode(**enc, tooltip=tooltip)  # type: ignore[arg-type]
        .properties(height=HEIGHT)
    )


def with_rule(
    chart: alt.Chart, value: float | None, label: str, color: str = RED
) -> alt.LayerChart | alt.Chart:
    """`chart` with a dashed horizontal rule at `value` (the SLO, a target), if known."""
    if value is None:
        return chart
    rule_df = pd.DataFrame({"y": [value], "label": [label]})
    rule = (
        alt.Chart(rule_df)
        .mark_rule(color=color, strokeDash=[6, 4], size=2)
        .encode(y="y:Q", tooltip=["label"])
    )
    text = (
        alt.Chart(rule_df)
        .mark_text(align="left", dx=4, dy=-6, color=color, fontWeight="bold")
        .encode(y="y:Q", text="label:N", x=alt.value(0))
    )
    return alt.layer(chart, rule, text)


def area_shares(df: pd.DataFrame, title: str) -> alt.Chart:
    """Stacked shares over time (inference on the bottom, training per task above)."""
    order = sorted(df["use"].unique(), key=lambda u: (u != "inference", u)) if len(df) else []
    return (
        alt.Chart(df, title=title)
        .mark_area(interpolate="step-after", opacity=0.85)
        .encode(
            x=alt.X("t:T", axis=TIME_AXIS),
            y=alt.Y("share:Q", stack="zero", title="share of the device", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "use:N", sort=order, title=None, scale=alt.Scale(domain=order, scheme="tableau10")
            ),
            order=alt.Order("use_order:Q"),
            tooltip=["t:T", "use:N", alt.Tooltip("share:Q", format=".2f")],
        )
        .transform_calculate(use_order="datum.use == 'inference' ? 0 : 1")
        .properties(height=HEIGHT)
    )


def backlog_area(df: pd.DataFrame) -> alt.LayerChart:
    base = alt.Chart(df, title="Backlog (queued requests)").encode(x=alt.X("t:T", axis=TIME_AXIS))
    peak = base.mark_area(color="#9ecae1", opacity=0.7, interpolate="step-after").encode(
        y=alt.Y("backlog_max:Q", title="requests"), tooltip=["t:T", "backlog_max:Q"]
    )
    mean = base.mark_line(color="#1f77b4").encode(y="backlog_mean:Q")
    return alt.layer(peak, mean).properties(height=HEIGHT)


def bars(df: pd.DataFrame, x: str, y: str, color: str, title: str, y_title: str | None = None) -> alt.Chart:
    """Grouped bars: one group per `x`, one bar per `color` (one bar per `x` when they agree)."""
    grouped = x != color
    enc: dict[str, object] = {
        "x": alt.X(f"{x}:N", title=None, axis=alt.Axis(labelAngle=-30, labels=grouped, ticks=grouped)),
        "y": alt.Y(f"{y}:Q", title=y.replace("_", " ") if y_title is None else y_title),
        "color": alt.Color(f"{color}:N", title=None, scale=SCHEME),
        "tooltip": [x, color, alt.Tooltip(f"{y}:Q", format=".4g")],
    }
    if grouped:
        enc["xOffset"] = f"{color}:N"
    return alt.Chart(df, title=title).mark_bar().encode(**enc).properties(height=HEIGHT)  # type: ignore[arg-type]


def fleet_p99_chart(df: pd.DataFrame) -> alt.LayerChart:
    """p99 latency relative to each device's SLO, worst first, with the SLO at 1.0."""
    data = df.dropna(subset=["p99_over_slo"]).sort_values("p99_over_slo", ascending=False).head(60)
    bar = (
        alt.Chart(data, title="p99 latency / SLO per device (worst 60)")
        .mark_bar()
        .encode(
            x=alt.X("device:N", sort="-y", title=None, axis=alt.Axis(labelAngle=-45)),
            y=alt.Y("p99_over_slo:Q", title="p99 / SLO"),
            color=alt.condition(alt.datum.p99_over_slo > 1.0, alt.value(RED), alt.value(GREEN)),
            tooltip=["device", alt.Tooltip("p99_over_slo:Q", format=".2f"), "status"],
        )
    )
    return with_rule(bar, 1.0, "SLO").properties(height=HEIGHT)  # type: ignore[return-value]


# -- tiles -----------------------------------------------------------------------------------

TILE_CSS = """
<style>
.dfl-grid {display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 10px;}
.dfl-tile {border-radius: 10px; padding: 10px 12px; background: #f7f9fb; border: 2px solid #dfe3e8;
           border-left: 8px solid var(--dfl-status); font-size: 0.85rem; line-height: 1.35;}
.dfl-tile.dfl-miss {border-color: #d62728; background: #fdecec;}
.dfl-tile.dfl-gone {opacity: 0.55;}
.dfl-head {display: flex; justify-content: space-between; font-weight: 700; font-size: 0.95rem;}
.dfl-badge {color: white; background: var(--dfl-status); border-radius: 8px; padding: 0 7px;
            font-size: 0.75rem; font-weight: 600;}
.dfl-row {display: flex; justify-content: space-between;}
.dfl-bar {height: 6px; background: #e3e6ea; border-radius: 3px; margin: 2px 0 4px 0;}
.dfl-bar > div {height: 6px; border-radius: 3px;}
.dfl-miss-flag {color: #d62728; font-weight: 700;}
</style>
"""


def _fmt(value: float | int | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _bar(fraction: float | None, color: str) -> str:
    width = 0.0 if fraction is None else max(0.0, min(1.0, fraction)) * 100
    return f'<div class="dfl-bar"><div style="width:{width:.0f}%;background:{color}"></div></div>'


def tile_html(t: DeviceTile) -> str:
    name = html.escape(t.device)
    classes = "dfl-tile" + (" dfl-miss" if t.misses_slo else "") + (" dfl-gone" if t.status == "gone" else "")
    p99_ratio = t.p99_ms / t.slo_ms if t.p99_ms is not None and t.slo_ms else None
    p99_color = RED if p99_ratio is not None and p99_ratio > 1 else GREEN
    if t.round_progress is not None:
        training = f"round {t.round_trained}/{t.round_target}"
    else:
        training = f"{_fmt(t.train_samples, ',d')} samples"
    flag = '<span class="dfl-miss-flag">misses SLO</span>' if t.misses_slo else ""
    return (
        f'<div class="{classes}" data-device="{name}" style="--dfl-status:{STATUS_COLORS[t.status]}">'
        f'<div class="dfl-head"><span>{name}</span><span class="dfl-badge">{t.status}</span></div>'
        f'<div class="dfl-row"><span>backlog</span><b class="dfl-backlog">{_fmt(t.backlog, "d")}</b></div>'
        f'<div class="dfl-row"><span>inference share</span><b>{_fmt(t.inference_share, ".0%")}</b></div>'
        f"{_bar(t.inference_share, '#1f77b4')}"
        f'<div class="dfl-row"><span>SLO met, last min</span>'
        f'<b class="dfl-slo">{_fmt(t.slo_attainment, ".1%")}</b></div>'
        f'<div class="dfl-row"><span>p99 / SLO</span><b>{_fmt(t.p99_ms, ".0f")} / {_fmt(t.slo_ms, ".0f")} ms'
        f"</b></div>{_bar(p99_ratio, p99_color)}"
        f'<div class="dfl-row"><span>training</span><b>{training}</b></div>'
        f"{_bar(t.round_progress, '#9467bd')}"
        f'<div class="dfl-row"><span>{flag}</span><span>{t.source}, {t.age_s:.0f} s ago</span></div>'
        "</div>"
    )


def tiles_html(tiles: Sequence[DeviceTile]) -> str:
    return TILE_CSS + '<div class="dfl-grid">' + "".join(tile_html(t) for t in tiles) + "</div>"
