"""Every page of the Streamlit app through AppTest: with data, with an empty store, with the
broker down, and fed live from the (in-process) live feed."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dartfl import protocol
from dartfl.paths import STORE_ENV
from dartfl.store import DecisionRow, RunStore
from dashboard import synthetic
from dashboard.config import BROKER_ENV
from messaging.brokers import free_port
from messaging.link import Message
from tests.dashboard.app_fixtures import APP, run_app

# Each page's script (relative to the app) and its title.
PAGES = {
    "Fleet": ("routes/fleet.py", "Fleet"),
    "Device": ("routes/device.py", "Device"),
    "FL rounds": ("routes/rounds.py", "Federated rounds"),
    "Experiments": ("routes/experiments.py", "Experiments"),
    "Datacenter": ("routes/datacenter.py", "Datacenter"),
}


@pytest.fixture(scope="module")
def full_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dash") / "runs.sqlite"
    with RunStore(path) as store:
        synthetic.fill_telemetry(store, devices=12, seconds=300, end_s=time.time())
        sim = store.start_run("sim", "pareto on/off on pi4", {"profile_name": "pi4"})
        for policy, slo in (("dart", 0.99), ("inference-first:4", 0.97)):
            store.add_result(
                sim, policy, {"slo_attainment": slo, "p99_latency_s": 0.2, "harvest_efficiency": 0.7}
            )
            store.add_decisions(
                sim, policy, [DecisionRow(t * 0.25, t % 9, 0.6, 8, 32, (0.5, 0.5), 4) for t in range(400)]
            )
        store.finish_run(sim)
        synthetic.record_fl_run(store)
        synthetic.record_dc_run(store, seconds=300)
    return path


def _goto(at: AppTest, page: str) -> AppTest:
    script, title = PAGES[page]
    at.switch_page(script).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == title
    return at


def _charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def _specs(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def _time_domains(spec: dict[str, Any]) -> list[list[str] | None]:
    """The scale domain of every temporal x encoding in a chart spec (layers included)."""
    found: list[list[float] | None] = []
    x = spec.get("encoding", {}).get("x", {})
    if x.get("type") == "temporal":
        found.append(x.get("scale", {}).get("domain"))
    for layer in spec.get("layer", []):
        found.extend(_time_domains(layer))
    return found


def _titles(at: AppTest) -> list[str]:
    titles = []
    for spec in _specs(at):
        title = spec.get("title", "")
        titles.append(title if isinstance(title, str) else title.get("text", ""))
    return titles


def test_fleet_page_shows_every_device_and_singles_out_slo_misses(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = run_app(monkeypatch, full_store)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["devices"] == "12" and metrics["alive"] == "12"
    assert metrics["missing SLO (< 95%)"] == "1"  # dev-003 is overloaded
    tiles = next(m.value for m in at.markdown if "dfl-grid" in m.value)
    assert tiles.count('class="dfl-tile') == 12
    assert tiles.index('data-device="dev-003"') < tiles.index('data-device="dev-000"')  # misses first
    assert _charts(at) == 2  # p99/SLO per device and fleet SLO over the last hour


def test_fleet_tiles_headline_the_time_use_of_the_last_minute_from_the_store(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = run_app(monkeypatch, full_store)
    tiles = next(m.value for m in at.markdown if "dfl-grid" in m.value)
    assert tiles.count('class="dfl-serving"') == 12 and "not reported" not in tiles
    assert tiles.count(">last min<") == 12  # recorded devices: a window from the run store
    assert "inference share" not in tiles  # the policy's priority share is not time spent


def test_device_page_draws_every_chart_over_one_window(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = _goto(run_app(monkeypatch, full_store), "Device")
    assert at.selectbox(key="device").value == "dev-000"
    assert _charts(at) == 5  # time use, backlog, latency, SLO attainment, trained
    assert "Where its time went" in _titles(at)
    caption = at.caption[0].value
    assert "300 points" in caption and "(15 min, ending at its newest snapshot)" in caption
    domains = [d for spec in _specs(at) for d in _time_domains(spec)]
    assert len(domains) >= 5 and all(d == domains[0] for d in domains)  # one window for all
    assert domains[0] is not None
    start, end = (datetime.fromisoformat(str(t)) for t in domains[0])  # ISO: Vega-Lite parses it
    assert (end - start).total_seconds() == pytest.approx(900)
    at.button_group(key="window").set_value("5 min").run()
    assert "(5 min," in at.caption[0].value
    points = int(at.caption[0].value.split(": ")[1].split()[0])
    assert 290 <= points <= 301


def test_the_device_page_takes_its_device_from_the_url(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    monkeypatch.setenv(STORE_ENV, str(full_store))
    monkeypatch.delenv(BROKER_ENV, raising=False)
    at = AppTest.from_file(APP, default_timeout=30)
    at.query_params["device"] = "dev-003"
    at.run()
    at.switch_page("routes/device.py").run()
    assert at.selectbox(key="device").value == "dev-003"
    assert at.query_params["device"] == "dev-003"  # and the URL names the device shown


@pytest.mark.parametrize("page, charts", [("FL rounds", 4), ("Experiments", 5), ("Datacenter", 5)])
def test_history_pages_draw_their_charts(
    monkeypatch: pytest.MonkeyPatch, full_store: Path, page: str, charts: int
) -> None:
    at = _goto(run_app(monkeypatch, full_store), page)
    assert _charts(at) == charts
    assert not at.info


def test_experiments_compares_two_runs_by_run(monkeypatch: pytest.MonkeyPatch, full_store: Path) -> None:
    at = _goto(run_app(monkeypatch, full_store), "Experiments")
    options = at.multiselect(key="runs").options
    assert len(options) == 3 and all(o.startswith("#") for o in options)
    at.multiselect(key="runs").set_value([o for o in options if " sim: " in o]).run()
    assert _charts(at) == 5  # 3 metrics present in the results + 2 over-time panels
    assert "Training rate" in _titles(at)  # one panel per policy: no overlay hides a policy


def test_the_first_page_without_devices_points_to_the_recorded_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "runs-only.sqlite"
    with RunStore(path) as store:
        synthetic.record_fl_run(store)
        synthetic.record_dc_run(store, seconds=60)
    at = run_app(monkeypatch, path)
    assert any("No device has reported yet" in i.value for i in at.info)
    links = {link.proto.label: link.proto.page for link in at.get("page_link")}
    assert set(links) == {"FL rounds: 1 runs", "Datacenter: 1 runs"}


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_explains_how_to_produce_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, page: str
) -> None:
    store = tmp_path / "nothing-yet.sqlite"
    at = _goto(run_app(monkeypatch, store), page)
    text = " ".join(i.value for i in at.info)
    # A command that produces the page's data, into the store the dashboard reads.
    assert "dartfl " in text and (page == "Device" or f"--store {store}" in text)
    assert _charts(at) == 0
    assert not store.exists()  # looking never creates a store


def test_broker_down_says_so_and_still_shows_history(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = run_app(monkeypatch, full_store, broker=f"mqtt://127.0.0.1:{free_port()}")
    assert any("Live feed disconnected" in w.value for w in at.warning)
    assert {m.label: m.value for m in at.metric}["devices"] == "12"
    _goto(at, "Device")
    assert any("Live feed disconnected" in w.value for w in at.warning)
    assert _charts(at) == 5


@pytest.fixture
def live_feed_url() -> Iterator[str]:
    """A broker URL nothing listens on, whose cached LiveFeed the test feeds by hand."""
    yield f"mqtt://127.0.0.1:{free_port()}"


def test_live_only_devices_show_on_fleet_and_device_pages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, live_feed_url: str
) -> None:
    from dashboard.views.common import _cached_feed

    feed = _cached_feed(live_feed_url, None)  # as the app calls it: no TLS settings
    now = time.time()
    for i in range(20):
        snap = synthetic.snapshot("jetson-7", now - 20 + i, i)
        feed.handle(Message(protocol.telemetry_topic("jetson-7"), protocol.encode_telemetry(snap), 1, False))
    feed.handle(Message(protocol.telemetry_topic("bad"), b"not json", 1, False))  # ignored
    at = run_app(monkeypatch, tmp_path / "empty.sqlite", broker=live_feed_url)
    assert {m.label: m.value for m in at.metric}["devices"] == "1"
    tile = next(m.value for m in at.markdown if "dfl-grid" in m.value)
    assert 'data-device="jetson-7"' in tile and re.search(r"last heard \d+ s ago, via broker", tile)
    _goto(at, "Device")
    assert "20 points" in at.caption[0].value and "live feed only" in at.caption[0].value
    assert _charts(at) == 5
    feed.handle(
        Message(
            protocol.status_topic("jetson-7"),
            protocol.encode_status(protocol.DeviceStatus("jetson-7", False)),
            1,
            True,
        )
    )
    _goto(at, "Fleet")
    assert {m.label: m.value for m in at.metric}["gone"] == "1"
    tile = next(m.value for m in at.markdown if "dfl-grid" in m.value)
    assert ">offline<" in tile and "said offline; last heard" in tile  # not "live, 26 s ago"


def test_datacenter_page_with_summary_only_runs_draws_summary_bars(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "dc.sqlite"
    with RunStore(path) as store:
        run_id = store.start_run("dc", "summary only", {"gpus": 8})
        for policy, rate in (("sync", 30.0), ("dart", 45.0)):
            store.add_result(
                run_id, policy, {"samples_per_s": rate, "staleness_mean": 0.5, "staleness_max": 2}
            )
        store.finish_run(run_id)
    at = _goto(run_app(monkeypatch, path), "Datacenter")
    assert any("no per-period decisions" in i.value for i in at.info)
    assert _charts(at) == 2  # staleness statistics and mean throughput
