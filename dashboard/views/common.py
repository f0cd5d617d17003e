"""What every page shares: the cached run store and live feed, and the help for empty states."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dartfl.protocol import Telemetry
from dartfl.store import RunStore
from dashboard.config import DashboardConfig
from dashboard.data import open_store
from dashboard.feed import FeedState, LiveFeed
from messaging.security import MqttSecurity

HOW_TO_RECORD = """\
Start the recorder next to your broker, so telemetry is kept in the run store:

```sh
dartfl record --broker mqtt://127.0.0.1:1883 --store {store}
```
"""

HOW_TO_RUN = {
    "sim": "dartfl sim --workload pareto-onoff --profile pi4 --target-load 0.5 --store {store}",
    "fleet": "dartfl fleet --store {store}",
    "fl": "dartfl fl --help   # federated runs are recorded as kind 'fl'; shapes: docs/dashboard.md",
    "dc": "dartfl dc --help   # datacenter runs are recorded as kind 'dc'; shapes: docs/dashboard.md",
}


@st.cache_resource(show_spinner=False)
def _cached_store(path: str) -> RunStore:
    store = open_store(Path(path))
    if store is None:  # pragma: no cover - callers check the file first
        raise FileNotFoundError(path)
    return store


def get_store(cfg: DashboardConfig) -> RunStore | None:
    """The run store, or None while it does not exist (the page then says how to make one)."""
    if not cfg.store_path.is_file():
        return None
    return _cached_store(str(cfg.store_path))


@st.cache_resource(show_spinner=False)
def _cached_feed(url: str, security: MqttSecurity | None) -> LiveFeed:
    return LiveFeed(url, security=security)


def get_feed(cfg: DashboardConfig) -> FeedState | None:
    """The live feed's state, or None when no broker is configured."""
    if not cfg.broker_url:
        return None
    return _cached_feed(cfg.broker_url, cfg.mqtt_security).state()


def get_live_history(cfg: DashboardConfig, device: str) -> list[Telemetry]:
    if not cfg.broker_url:
        return []
    return _cached_feed(cfg.broker_url, cfg.mqtt_security).history(device)


def feed_banner(feed: FeedState | None) -> None:
    if feed is None:
        st.info("No live feed: start the dashboard with `--broker mqtt://HOST:PORT` to see devices live.")
    elif feed.connected:
        st.success(f"Live feed connected to {feed.url}", icon=":material/sensors:")
    else:
        st.warning(
            f"Live feed disconnected ({feed.error}). Showing recorded history; reconnecting by itself.",
            icon=":material/sensors_off:",
        )


def empty_store(cfg: DashboardConfig, what: str, commands: list[str]) -> None:
    """Explain that there is nothing to show yet, and how to produce it."""
    lines = "\n".join(c.format(store=cfg.store_path) for c in commands)
    st.info(
        f"No {what} in the run store `{cfg.store_path}` yet. To produce some, run:\n\n```sh\n{lines}\n```"
    )
