"""The dashboard in a real browser: Mosquitto, a telemetry publisher speaking the agents' wire
format, a real `dartfl edge run` agent under a replayed load, `dartfl record`, `dartfl
dashboard`, and Debian's chromium driven by Playwright; the run store holds a real `dartfl sim`
and `dartfl dc sim` run and a synthetic FL run.

Run it inside the loopback-only namespace: `scripts/loopback-run .venv/bin/python -m pytest
-m integration tests/dashboard/test_browser.py`. Screenshots of every page go to
test-artifacts/dashboard/, the plots of its `sim` and `dc sim` runs to test-artifacts/plots/;
with DARTFL_UPDATE_SCREENSHOTS=1 the fleet view is also copied to docs/img/dashboard.png, the
README's screenshot (scripts/gallery copies them all into docs/gallery/, scaled down).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from dartfl import protocol
from dartfl.profiles import get_profile, profile_to_toml
from dartfl.store import RunStore
from dashboard import synthetic
from messaging.brokers import free_port, start_mosquitto
from messaging.link import Message, connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
PLOTS = ROOT / "test-artifacts" / "plots"  # the CLI's plots of the runs the pages show
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DEVICES = {"pi-01": 0.5, "pi-02": 0.6, "jetson-03": 1.4, "pi-04": 0.5, "x86-05": 0.4, "pi-06": 0.5}
SHORT_LIVED = "pi-04"  # stops publishing after 8 s: turns stale, then gone
AGENT = "edge-real"  # a real agent that serves a replayed load and trains
# Every page by its URL, with its heading and how many charts it draws here.
PAGES = {
    "fleet": ("", "Fleet", 2),
    "device": (f"device?device={AGENT}", "Device", 5),
    "fl-rounds": ("fl-rounds", "Federated rounds", 4),
    "experiments": ("experiments", "Experiments", 5),
    "datacenter": ("datacenter", "Datacenter", 5),
}
DARTFL = [sys.executable, "-m", "dartfl.cli.main"]


class Publisher:
    """Devices publishing telemetry twice a second (the agent's format) and retained status."""

    def __init__(self, url: str) -> None:
        self.link = connect(url, "fake-fleet", on_message=lambda m: None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        for device in DEVICES:
            self.link.publish(
                protocol.status_topic(device),
                protocol.encode_status(protocol.DeviceStatus(device, True, time.time())),
                protocol.STATUS_QOS,
                retain=True,
            )
        self.thread.start()

    def _run(self) -> None:
        step, started = 0, time.monotonic()
        while not self.stop.wait(0.5):
            step += 1
            for device, load in DEVICES.items():
                if device == SHORT_LIVED and time.monotonic() - started > 8:
                    continue
                snap = synthetic.snapshot(device, time.time(), step * 4, load=load)
                self.link.publish(protocol.telemetry_topic(device), protocol.encode_telemetry(snap), 1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.link.close()


class AgentCounters:
    """The real agent's own telemetry, as the test hears it: the reference for the page."""

    def __init__(self, url: str) -> None:
        self.snapshots: list[protocol.Telemetry] = []
        self.lock = threading.Lock()
        self.link = connect(
            url,
            "counters",
            on_message=self._on,
            subscriptions=[(protocol.telemetry_topic(AGENT), protocol.TELEMETRY_QOS)],
        )

    def _on(self, message: Message) -> None:
        with self.lock:
            self.snapshots.append(protocol.decode_telemetry(message.payload, message.topic))

    def wait_serving(self, span_s: float, timeout_s: float) -> None:
        """Until the agent has answered requests, with latency figures, for `span_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                serving = [s.t for s in self.snapshots if s.replies and s.latency_ms.p99_ms is not None]
            if serving and serving[-1] - serving[0] >= span_s:
                return
            time.sleep(1.0)
        raise AssertionError(f"the agent did not serve for {span_s} s within {timeout_s} s")

    def shares(self, window_s: float) -> tuple[float, float]:
        """Serving and training shares over the window that ends at the newest snapshot, by the
        tiles' rule: the newest snapshot at least `window_s` older starts it, else the oldest."""
        with self.lock:
            newest = self.snapshots[-1]
            older = [s for s in self.snapshots if s.t <= newest.t - window_s + 0.5]
            start = older[-1] if older else self.snapshots[0]

        def delta(name: str) -> float:
            return float(getattr(newest, name)) - float(getattr(start, name))

        uptime = delta("uptime_s")
        return delta("inference_busy_s") / uptime, delta("training_busy_s") / uptime

    def close(self) -> None:
        self.link.close()


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"dartfl dashboard exited with {proc.returncode}:\n{log.read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"dashboard not answering on {url} after {timeout_s} s:\n{log.read_text()[-2000:]}")


def _record_runs(store: Path) -> None:
    """A real `dartfl sim` and `dartfl dc sim` run, and a synthetic FL run (Flower would take
    minutes), in the store the dashboard reads; the two CLI runs' plots go to PLOTS."""
    sim = subprocess.run(
        [*DARTFL, "sim", "--workload", "mmpp", "--duration-s", "300", "--profile", "pi4", "--target-load",
         "0.5", "--policy", "dart", "--policy", "inference-first:4", "--policy", "static:0.5", "--store",
         str(store), "--json", "--plot", str(PLOTS / "sim.png")],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    dc = subprocess.run(
        [*DARTFL, "dc", "sim", "--gpus", "16", "--steps", "60", "--policy", "sync", "--policy", "dart",
         "--policy", "static:0.5", "--store", str(store), "--json", "--plot", str(PLOTS / "dc-sim.png")],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert dc.returncode == 0, dc.stderr
    with RunStore(store) as s:
        synthetic.record_fl_run(s)


@dataclass
class Stack:
    url: str
    counters: AgentCounters


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Broker, publisher, a real agent under load, recorder and dashboard."""
    tmp = tmp_path_factory.mktemp("browser")
    store = tmp / "runs.sqlite"
    _record_runs(store)
    profile = tmp / "x86.toml"  # known costs: the agent skips calibrating them
    profile.write_text(profile_to_toml(get_profile("x86-1core")))
    with start_mosquitto() as broker:
        counters = AgentCounters(broker.url)
        procs = [
            _start(
                [*DARTFL, "edge", "run", "--device", AGENT, "--broker", broker.url, "--profile-file",
                 str(profile), "--max-train", "300", "--publish-every-s", "0"],
                tmp / "agent.log",
            ),
            _start(
                [*DARTFL, "edge", "replay", "--broker", broker.url, "--device", AGENT, "--workload",
                 "poisson", "--rate", "40", "--duration-s", "900", "--no-store"],
                tmp / "replay.log",
            ),
            _start(
                [*DARTFL, "record", "--broker", broker.url, "--store", str(store), "--flush-s", "0.5"],
                tmp / "record.log",
            ),
        ]  # fmt: skip
        port = free_port()
        dashboard = _start(
            [*DARTFL, "dashboard", "--store", str(store), "--broker", broker.url, "--port", str(port),
             "--refresh-s", "1", "--stale-after-s", "3", "--gone-after-s", "8"],
            tmp / "dashboard.log",
        )  # fmt: skip
        publisher: Publisher | None = None
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_http(f"{url}/_stcore/health", dashboard, tmp / "dashboard.log")
            publisher = Publisher(broker.url)  # the recorder listens by now: it sees every device
            yield Stack(url, counters)
        finally:
            _stop(dashboard)
            for proc in reversed(procs):
                _stop(proc)
            counters.close()
            if publisher is not None:
                publisher.close()


def _tile_values(page: Any) -> list[str]:
    return page.locator(".dfl-backlog, .dfl-slo").all_inner_texts()  # type: ignore[no-any-return]


def _percent(page: Any, selector: str) -> float:
    text = page.locator(selector).inner_text()
    match = re.search(r"(\d+)%", text)
    assert match, f"no percentage in {text!r}"
    return int(match.group(1)) / 100


def _window_s(page: Any) -> float:
    """The tile's window as it says it: "last min", or "last 23 s" while history is short."""
    text = page.locator(f'.dfl-tile[data-device="{AGENT}"] .dfl-time').inner_text()
    match = re.search(r"last (\d+) s", text)
    return float(match.group(1)) if match else 60.0


def _outside(urls: list[str]) -> list[str]:
    """The requests that left this machine (or tried to)."""
    local = {"127.0.0.1", "localhost", "::1"}
    return [
        u
        for u in urls
        if urlsplit(u).scheme not in ("data", "blob", "about") and urlsplit(u).hostname not in local
    ]


def _open(p: Any, urls: list[str]) -> tuple[Any, Any]:
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: apt-get install -y chromium"
    browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
    page = browser.new_page(viewport={"width": 1440, "height": 1800})  # Streamlit scrolls inside it
    page.on("request", lambda request: urls.append(request.url))
    return browser, page


def _charts_drawn(page: Any, count: int, name: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    charts = '[data-testid="stVegaLiteChart"]'
    try:
        page.wait_for_function(f"document.querySelectorAll('{charts}').length >= {count}", timeout=30_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(ARTIFACTS / f"{name}-failed.png"), full_page=True)
        drawn = page.locator(charts).count()
        raise AssertionError(f"{name}: {drawn} charts drawn, {count} expected ({name}-failed.png)") from None
    assert page.locator('[data-testid="stException"]').count() == 0
    page.wait_for_timeout(1500)  # let the charts finish drawing


def test_dashboard_in_chromium_shows_live_values_and_every_page(stack: Stack) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    urls: list[str] = []
    with sync_playwright() as p:
        browser, page = _open(p, urls)
        page.goto(stack.url)
        # 1. Fleet: live tiles appear, their values change, the short-lived device goes away.
        page.wait_for_selector('.dfl-tile[data-device="pi-01"]', timeout=45_000)
        page.get_by_text("Live feed connected").wait_for(timeout=15_000)
        first = _tile_values(page)
        deadline = time.monotonic() + 20
        while _tile_values(page) == first and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        assert _tile_values(page) != first, "live values did not change"
        gone = page.locator('.dfl-tile[data-device="pi-04"]')
        gone.locator(".dfl-badge", has_text="gone").wait_for(timeout=40_000)
        assert "live" not in gone.locator(".dfl-heard").inner_text()  # it says when it was heard
        assert page.locator('.dfl-tile.dfl-miss[data-device="jetson-03"]').count() == 1  # stands out
        page.locator(f'.dfl-tile[data-device="{AGENT}"]').wait_for(timeout=90_000)
        assert page.locator(".dfl-tile").count() == len(DEVICES) + 1
        _charts_drawn(page, PAGES["fleet"][2], "fleet")
        page.screenshot(path=str(ARTIFACTS / "fleet.png"), full_page=True)
        # 2. The sidebar navigates, and every page has a URL of its own.
        page.locator('[data-testid="stSidebarNav"] a', has_text="Experiments").click()
        page.get_by_role("heading", name="Experiments").wait_for(timeout=20_000)
        assert page.url.rstrip("/").endswith("/experiments")
        stack.counters.wait_serving(20.0, 90.0)  # the Device page charts its latency too
        for name, (path, heading, charts) in PAGES.items():
            if name == "fleet":
                continue
            page.goto(f"{stack.url}/{path}")
            page.get_by_role("heading", name=heading).wait_for(timeout=20_000)
            if name == "device":  # its minutes of history fill a 5-min window, not 15
                page.get_by_text("5 min", exact=True).click()
            _charts_drawn(page, charts, name)
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "fleet.png").stat().st_size > 20_000
    assert _outside(urls) == [], "the dashboard must work offline: no font, icon or usage CDN"
    if os.environ.get("DARTFL_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(ARTIFACTS / "fleet.png", ROOT / "docs" / "img" / "dashboard.png")


def test_a_training_agents_tile_shows_where_its_time_went_as_its_own_counters_say(stack: Stack) -> None:
    from playwright.sync_api import sync_playwright

    tile = f'.dfl-tile[data-device="{AGENT}"]'
    urls: list[str] = []
    with sync_playwright() as p:
        browser, page = _open(p, urls)
        page.goto(stack.url)
        page.locator(f"{tile} .dfl-training").wait_for(timeout=120_000)
        deadline = time.monotonic() + 60
        while _percent(page, f"{tile} .dfl-training") == 0 and time.monotonic() < deadline:
            page.wait_for_timeout(1000)  # the first period is a warm-up without training
        training = _percent(page, f"{tile} .dfl-training")
        serving = _percent(page, f"{tile} .dfl-serving")
        agent_serving, agent_training = stack.counters.shares(_window_s(page))
        page.screenshot(path=str(ARTIFACTS / "fleet-real-agent.png"), full_page=True)
        browser.close()
    assert training > 0, "the agent trains, and the page must show it"
    assert abs(serving - agent_serving) <= 0.05, (serving, agent_serving)
    assert abs(training - agent_training) <= 0.05, (training, agent_training)


def test_a_damaged_store_reads_as_one_line_errors_in_chromium(tmp_path: Path) -> None:
    """No broker, a store with malformed JSON rows: each page names the damage and still draws
    what reads (the Fleet SLO chart, the comparison of the intact run), never a traceback."""
    from playwright.sync_api import sync_playwright

    from tests.store_fixtures import damaged_copy, healthy_store

    store = damaged_copy(healthy_store(tmp_path / "template.sqlite"), tmp_path, "malformed-json")
    port = free_port()
    log = tmp_path / "dashboard.log"
    dashboard = _start([*DARTFL, "dashboard", "--store", str(store), "--port", str(port)], log)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/_stcore/health", dashboard, log)
        with sync_playwright() as p:
            browser, page = _open(p, [])
            for name, path, damage, charts in (
                ("fleet", "", "the telemetry snapshot of 'dev-001'", 2),
                ("experiments", "experiments", "run 2's result for policy 'dart' is not JSON", 4),
            ):
                page.goto(f"{url}/{path}")
                page.get_by_text(damage).first.wait_for(timeout=30_000)
                _charts_drawn(page, charts, f"damaged-{name}")
                if name == "fleet":  # every device, dev-001 by its newest snapshot that reads
                    assert page.locator(".dfl-tile").count() == 3
                page.screenshot(path=str(ARTIFACTS / f"damaged-{name}.png"), full_page=True)
            browser.close()
    finally:
        _stop(dashboard)
