"""The dashboard's data access: run-store queries and their shaping into pandas frames, one
module per page's concept (fleet tiles, a device's series, recorded runs, FL rounds, the
datacenter). No Streamlit here, so everything is testable and benchmarkable on its own.

Downsampling happens in SQL (RunStore.telemetry_series / decisions / telemetry_fleet_series);
Python only reshapes the at most a few thousand points that come back. Shapes of the FL and
datacenter runs that these functions read are documented in docs/dashboard.md.
"""

from dashboard.data.datacenter import dc_frames
from dashboard.data.device import TimeWindow, device_frames, points_from_snapshots, time_use_frame
from dashboard.data.fleet import TILE_WINDOW_S, DeviceTile, fleet_frame, fleet_tiles
from dashboard.data.rounds import fl_frames
from dashboard.data.runs import (
    COMPARE_METRICS,
    comparison_frame,
    decisions_frame,
    open_store,
    run_choices,
    run_title,
)

__all__ = [
    "COMPARE_METRICS",
    "TILE_WINDOW_S",
    "DeviceTile",
    "TimeWindow",
    "comparison_frame",
    "dc_frames",
    "decisions_frame",
    "device_frames",
    "fl_frames",
    "fleet_frame",
    "fleet_tiles",
    "open_store",
    "points_from_snapshots",
    "run_choices",
    "run_title",
    "time_use_frame",
]
