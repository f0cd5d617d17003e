"""Every page of the Streamlit app through AppTest: with data, with an empty store, with the
broker down, and fed live from the (in-process) live feed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dartfl import protocol
from dartfl.paths import STORE_ENV
from dartfl.store import DecisionRow, RunStore
from dashboard import synthetic
from dashboard.config import BROKER_ENV
from messaging.brokers import free_port
from messaging.link import Message

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = ("Fleet", "Device", "FL rounds", "Experiments", "Datacenter")


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


def _app(monkeypatch: pytest.MonkeyPatch, store: Path, broker: str | None = None) -> AppTest:
    monkeypatch.setenv(STORE_ENV, str(store))
    if broker is None:
        monkeypatch.delenv(BROKER_ENV, raising=False)
    else:
        monkeypatch.setenv(BROKER_ENV, broker)
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _goto(at: AppTest, page: str) -> AppTest:
    at.sidebar.radio[0].set_value(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value in (page, "Federated rounds")
    return at


def _charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def test_fleet_page_shows_every_device_and_singles_out_slo_misses(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = _app(monkeypatch, full_store)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["devices"] == "12" and metrics["alive"] == "12"
    assert metrics["missing SLO (< 95%)"] == "1"  # dev-003 is overloaded
    tiles = at.markdown[0].value
    assert tiles.count('class="dfl-tile') == 12
    assert tiles.index('data-device="dev-003"') < tiles.index('data-device="dev-000"')  # misses first
    assert _charts(at) == 2  # p99/SLO per device and fleet SLO over the last hour


def test_device_page_draws_four_charts_and_honours_the_window(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = _goto(_app(monkeypatch, full_store), "Device")
    assert at.selectbox(key="device").value == "dev-000"
    assert _charts(at) == 5  # backlog, allocation, latency, trained, SLO attainment
    assert "300 points over the last 15 min" in at.caption[0].value
    at.button_group(key="window").set_value("5 min").run()
    assert "over the last 5 min" in at.caption[0].value
    points = int(at.caption[0].value.split(": ")[1].split()[0])
    assert 290 <= points <= 301


@pytest.mark.parametrize("page, charts", [("FL rounds", 3), ("Experiments", 5), ("Datacenter", 5)])
def test_history_pages_draw_their_charts(
    monkeypatch: pytest.MonkeyPatch, full_store: Path, page: str, charts: int
) -> None:
    at = _goto(_app(monkeypatch, full_store), page)
    assert _charts(at) == charts
    assert not at.info


def test_experiments_compares_two_runs_by_run(monkeypatch: pytest.MonkeyPatch, full_store: Path) -> None:
    at = _goto(_app(monkeypatch, full_store), "Experiments")
    options = at.multiselect(key="runs").options
    assert len(options) == 3 and all(o.startswith("#") for o in options)
    at.multiselect(key="runs").set_value([o for o in options if " sim: " in o]).run()
    assert _charts(at) == 5  # 3 metrics present in the results + 2 over-time charts


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_explains_how_to_produce_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, page: str
) -> None:
    store = tmp_path / "nothing-yet.sqlite"
    at = _goto(_app(monkeypatch, store), page)
    text = " ".join(i.value for i in at.info)
    assert "dartfl" in text or "docs/dashboard.md" in text
    assert _charts(at) == 0
    assert not store.exists()  # looking never creates a store


def test_broker_down_says_so_and_still_shows_history(
    monkeypatch: pytest.MonkeyPatch, full_store: Path
) -> None:
    at = _app(monkeypatch, full_store, broker=f"mqtt://127.0.0.1:{free_port()}")
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
    at = _app(monkeypatch, tmp_path / "empty.sqlite", broker=live_feed_url)
    assert {m.label: m.value for m in at.metric}["devices"] == "1"
    assert 'data-device="jetson-7"' in at.markdown[0].value and "live," in at.markdown[0].value
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
    at = _goto(_app(monkeypatch, path), "Datacenter")
    assert any("no per-period decisions" in i.value for i in at.info)
    assert _charts(at) == 2  # staleness statistics and mean throughput
