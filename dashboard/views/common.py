"""What every page shares: the cached run store and live feed, the help for empty states, and
the one-line report of a damaged store in place of the part of a page it breaks."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from dartfl.errors import DartflError
from dartfl.protocol import Telemetry
from dartfl.store import RunInfo, RunStore
from dashboard.config import DashboardConfig
from dashboard.data import open_store, run_choices, run_title
from dashboard.feed import FeedState, LiveFeed
from messaging.security import MqttSecurity

if TYPE_CHECKING:
    import pandas as pd

HOW_TO_RECORD = """\
Start the recorder next to your broker, so telemetry is kept in the run store:

```sh
{command}
```
"""
# The broker a recorder hint names when the dashboard was given none.
EXAMPLE_BROKER = "mqtt://127.0.0.1:1883"

HOW_TO_RUN = {
    "sim": "dartfl sim --workload pareto-onoff --profile pi4 --target-load 0.5 --store {store}",
    "fleet": "dartfl fleet --profile pi4 --devices 100 --store {store}",
    # Flower's simulation starts Ray, which probes outside addresses: run it in a loopback-only
    # namespace, spelt out (scripts/loopback-run is the checkout's shorthand; a wheel has none).
    "fl": "unshare -n sh -c 'ip link set lo up && exec dartfl fl sim --clients 2 --rounds 3 --store {store}'",
    "dc": "dartfl dc sim --gpus 16 --steps 60 --policy sync --policy dart --store {store}",
}
# Where each kind of recorded run is shown: the page's script and its title.
RUN_PAGES = {
    "sim": ("routes/experiments.py", "Experiments"),
    "replay": ("routes/experiments.py", "Experiments"),
    "fleet": ("routes/experiments.py", "Experiments"),
    "fl": ("routes/rounds.py", "FL rounds"),
    "dc": ("routes/datacenter.py", "Datacenter"),
}


@st.cache_resource(show_spinner=False)
def _cached_store(path: str) -> RunStore:
    # A store that fails to open raises, and Streamlit caches no exception: the next rerun
    # tries again, so a store restored from a backup shows without a restart.
    store = open_store(Path(path))
    if store is None:  # pragma: no cover - callers check the file first
        raise FileNotFoundError(path)
    return store


def how_to_record(cfg: DashboardConfig) -> str:
    """How to start the recorder on the broker this dashboard reads (an example one when it
    has none), as a command to paste: the same CA, and an account of its own, since two
    processes on one account close each other's connection (docs/deployment.md)."""
    words = ["dartfl", "record", "--broker", cfg.broker_url or EXAMPLE_BROKER]
    security = cfg.mqtt_security
    if security is not None and security.ca_file is not None:
        words += ["--mqtt-ca-file", str(security.ca_file)]
    if security is not None and security.username is not None:
        words += ["--mqtt-username", "RECORDER-ACCOUNT"]
    command = shlex.join([*words, "--store", str(cfg.store_path)])
    return HOW_TO_RECORD.format(command=command)


def store_is_new(cfg: DashboardConfig) -> bool:
    """Whether the run store holds nothing yet: no file, or an empty one (what `dartfl record`
    sets up as a new store). The pages then say how to produce data."""
    try:
        return not cfg.store_path.exists() or (
            cfg.store_path.is_file() and cfg.store_path.stat().st_size == 0
        )
    except OSError:  # a folder on the way that cannot be entered: opening says why
        return False


def get_store(cfg: DashboardConfig) -> RunStore | None:
    """The run store opened for reading, or None while it holds nothing yet (the page then
    says how to make one) or cannot be opened (then this shows why, in one line). A store of
    a newer schema comes with a warning and reads what this version knows."""
    if store_is_new(cfg):
        return None
    try:
        store = _cached_store(str(cfg.store_path))
    except DartflError as exc:  # damaged, locked, not a store: each says what and how to recover
        st.error(str(exc))
        return None
    if store.notice is not None:
        st.warning(store.notice)
    return store


@dataclass
class StorePart:
    """What `store_part` tells the page: whether the part failed, and its error (shown)."""

    failed: bool = False
    error: str | None = None


@contextmanager
def store_part(after: StorePart | None = None) -> Iterator[StorePart]:
    """Run a part of a page that reads the store: a one-line DartflError (a damaged row or
    table, a locked store) is shown in place of that part, and the page goes on below it.
    The same error as the part `after` (a missing table both read) is not shown twice."""
    part = StorePart()
    try:
        yield part
    except DartflError as exc:
        part.failed, part.error = True, str(exc)
        if after is None or after.error != part.error:
            st.error(part.error)


def show_run_damage(runs: Sequence[RunInfo], at_most: int = 3) -> None:
    """Name the listed runs that are damaged (the listing keeps them, with an empty config)."""
    lines = [line for run in runs for line in run.damage]
    for line in lines[:at_most]:
        st.warning(line)
    if len(lines) > at_most:
        st.warning(f"{len(lines) - at_most} more damaged runs: `dartfl runs list` names them all")


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
        st.success(f"Live feed connected to {feed.url}")
    else:
        st.warning(
            f"Live feed disconnected ({feed.error}). Showing recorded history; reconnecting by itself."
        )


def empty_store(cfg: DashboardConfig, store: RunStore | None, what: str, commands: list[str]) -> None:
    """Explain that there is nothing to show yet, and how to produce it; nothing when the store
    exists but did not open (`get_store` said why)."""
    if store is None and not store_is_new(cfg):
        return
    lines = "\n".join(c.format(store=cfg.store_path) for c in commands)
    st.info(
        f"No {what} in the run store `{cfg.store_path}` yet. To produce some, run:\n\n```sh\n{lines}\n```"
    )


def listed_runs(
    cfg: DashboardConfig, store: RunStore | None, kinds: Sequence[str], what: str, commands: list[str]
) -> list[RunInfo]:
    """The recorded runs of `kinds` a page picks from, the damaged ones named; empty when the
    page has nothing to show: the listing failed (said in one line), or there are no such runs
    yet (`empty_store` says how to make some)."""
    runs: list[RunInfo] = []
    with store_part() as part:
        runs = run_choices(store, kinds)
    if part.failed:
        return []
    if store is None or not runs:
        empty_store(cfg, store, what, commands)
        return []
    show_run_damage(runs)
    return runs


def chosen_run(
    cfg: DashboardConfig,
    kind: str,
    what: str,
    label: str,
    frames: Callable[[RunStore, RunInfo], dict[str, pd.DataFrame]],
) -> tuple[RunInfo, dict[str, pd.DataFrame]] | None:
    """For a page about one recorded run of `kind`: the run picked in the select box `label`,
    and its `frames` read from the store; None when there is nothing to show (no such runs,
    or the store failed, which the page then says)."""
    store = get_store(cfg)
    runs = listed_runs(cfg, store, (kind,), what, [HOW_TO_RUN[kind]])
    if store is None or not runs:
        return None
    run = st.selectbox(label, runs, format_func=run_title, key=f"{kind}_run")
    with store_part() as part:
        read = frames(store, run)
    if part.failed:
        return None
    return run, read


def point_to_runs(runs: Sequence[RunInfo]) -> None:
    """Links to the pages that show the recorded runs (for a page with nothing of its own)."""
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        page = RUN_PAGES.get(run.kind)
        if page is not None:
            counts[page] = counts.get(page, 0) + 1
    if not counts:
        return
    st.markdown(f"The run store holds {len(runs):,} recorded runs:")
    for (script, title), n in counts.items():
        st.page_link(script, label=f"{title}: {n:,} runs")
