"""The fleet tiles' HTML: one card per device that answers "is it keeping up, and what is it
doing with its time?" at a glance. Pure: tiles in, escaped HTML out. A figure that is not a
number (a damaged store row can hold any value in any column) shows as "-", never an error."""

from __future__ import annotations

import html
from collections.abc import Sequence
from urllib.parse import quote

from dashboard.data import TILE_WINDOW_S, DeviceTile
from dashboard.telemetry import number
from dashboard.timeuse import TimeUse

__all__ = ["TILE_CSS", "ago", "tile_html", "tiles_html"]

RED, AMBER, GREEN, GREY, DARK = "#d62728", "#ff9f1c", "#2ca02c", "#8c8c8c", "#555555"
SERVING, TRAINING, IDLE = "#1f77b4", "#ff7f0e", "#d9d9d9"
STATUS_COLORS = {"alive": GREEN, "stale": AMBER, "gone": GREY, "offline": DARK}

TILE_CSS = """
<style>
.dfl-grid {display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 10px;}
.dfl-tile {border-radius: 10px; padding: 10px 12px; background: #f7f9fb; border: 2px solid #dfe3e8;
           border-left: 8px solid var(--dfl-status); font-size: 0.85rem; line-height: 1.35;}
.dfl-tile.dfl-miss {border-color: #d62728; background: #fdecec;}
.dfl-tile.dfl-gone {opacity: 0.55;}
.dfl-head {display: flex; justify-content: space-between; font-weight: 700; font-size: 0.95rem;}
.dfl-head a {color: inherit; text-decoration: none;}
.dfl-head a:hover {text-decoration: underline;}
.dfl-badge {color: white; background: var(--dfl-status); border-radius: 8px; padding: 0 7px;
            font-size: 0.75rem; font-weight: 600;}
.dfl-row {display: flex; justify-content: space-between;}
.dfl-use {display: flex; gap: 8px; font-weight: 600;}
.dfl-bar {height: 6px; background: #e3e6ea; border-radius: 3px; margin: 2px 0 4px 0; display: flex;
          overflow: hidden;}
.dfl-bar > div {height: 6px;}
.dfl-miss-flag {color: #d62728; font-weight: 700;}
.dfl-foot {color: #555; font-size: 0.78rem;}
</style>
"""


def ago(seconds: float) -> str:
    """An age as people say it: 26 s, 4 min, 3 h, 2 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def _fmt(value: object, spec: str) -> str:
    """`value` formatted by `spec`; "-" for None and for anything the spec cannot show (an
    integer spec takes integers only)."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    if number(value) is None or (spec.endswith("d") and not whole):
        return "-"
    return format(value, spec)


def _bar(parts: Sequence[tuple[object, str]]) -> str:
    cells = "".join(
        f'<div style="width:{max(0.0, min(1.0, f)) * 100:.1f}%;background:{color}"></div>'
        for value, color in parts
        if (f := number(value)) is not None
    )
    return f'<div class="dfl-bar">{cells}</div>'


def _time_use(use: TimeUse | None, reported: bool) -> str:
    """The headline: where the device's time went over the last minute."""
    if use is None:
        said = "waiting for a second snapshot" if reported else "not reported"
        return f'<div class="dfl-row dfl-time"><span>time use</span><b>{said}</b></div>' + _bar([(0.0, IDLE)])
    window = "last min" if use.window_s >= 0.9 * TILE_WINDOW_S else f"last {ago(use.window_s)}"
    return (
        f'<div class="dfl-row dfl-time" title="share of the device\'s time over the {window}">'
        f'<span class="dfl-use"><span style="color:{SERVING}" class="dfl-serving">serving '
        f"{use.serving:.0%}</span>"
        f'<span style="color:{TRAINING}" class="dfl-training">training {use.training:.0%}</span>'
        f'<span style="color:{GREY}" class="dfl-idle">idle {use.idle:.0%}</span></span>'
        f"<span>{window}</span></div>"
        + _bar([(use.serving, SERVING), (use.training, TRAINING), (use.idle, IDLE)])
    )


def _heard(t: DeviceTile) -> str:
    """When the device was last heard from and how: never a bare "live" for a gone device."""
    source = "via broker" if t.source == "broker" else "from the run store"
    said = "said offline; " if t.offline else ""
    return f"{said}last heard {ago(t.age_s)} ago, {source}"


def tile_html(t: DeviceTile) -> str:
    name = html.escape(t.device)
    link = "device?device=" + html.escape(quote(t.device, safe=""))
    badge = "offline" if t.offline else t.status
    classes = "dfl-tile" + (" dfl-miss" if t.misses_slo else "") + (" dfl-gone" if t.status == "gone" else "")
    p99, slo = number(t.p99_ms), number(t.slo_ms)
    p99_ratio = p99 / slo if p99 is not None and slo else None
    p99_color = RED if p99_ratio is not None and p99_ratio > 1 else GREEN
    if t.round_progress is not None:
        training = f"round {_fmt(t.round_trained, ',d')}/{_fmt(t.round_target, ',d')}"
    else:
        training = f"{_fmt(t.train_samples, ',d')} samples"
    flag = '<span class="dfl-miss-flag">misses SLO</span>' if t.misses_slo else ""
    return (
        f'<div class="{classes}" data-device="{name}" style="--dfl-status:{STATUS_COLORS[badge]}">'
        f'<div class="dfl-head"><a href="{link}" target="_self">{name}</a>'
        f'<span class="dfl-badge">{badge}</span></div>'
        f"{_time_use(t.time_use, t.reports_time_use)}"
        f'<div class="dfl-row"><span>backlog</span><b class="dfl-backlog">{_fmt(t.backlog, ",d")}</b></div>'
        f'<div class="dfl-row"><span>SLO met, last min</span>'
        f'<b class="dfl-slo">{_fmt(t.slo_attainment, ".1%")}</b></div>'
        f'<div class="dfl-row"><span>p99 / SLO</span><b>{_fmt(t.p99_ms, ".0f")} / {_fmt(t.slo_ms, ".0f")} ms'
        f"</b></div>{_bar([(p99_ratio, p99_color)])}"
        f'<div class="dfl-row"><span>trained</span><b>{training}</b></div>'
        f"{_bar([(t.round_progress, '#9467bd')])}"
        f'<div class="dfl-row">{flag}</div>'
        f'<div class="dfl-foot dfl-heard">{_heard(t)}</div>'
        "</div>"
    )


def tiles_html(tiles: Sequence[DeviceTile]) -> str:
    return TILE_CSS + '<div class="dfl-grid">' + "".join(tile_html(t) for t in tiles) + "</div>"
