"""The dashboard in a real browser: Mosquitto, a telemetry publisher speaking the agents'
wire format, `dartfl record`, `dartfl dashboard`, and Debian's chromium driven by Playwright.

Run it inside the loopback-only namespace: `scripts/loopback-run .venv/bin/python -m pytest
-m integration tests/dashboard/test_browser.py`. Screenshots go to test-artifacts/dashboard/;
with DARTFL_UPDATE_SCREENSHOTS=1 the fleet view is also copied to docs/img/dashboard.png.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dartfl import protocol
from dartfl.store import RunStore
from dashboard import synthetic
from messaging.brokers import BrokerHandle, free_port, start_mosquitto
from messaging.link import connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
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
SHORT_LIVED = "pi-04"  # stops publishing after a few seconds: turns stale, then gone


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
                if device == SHORT_LIVED and time.monotonic() - started > 3:
                    continue
                snap = synthetic.snapshot(device, time.time(), step * 4, load=load)
                self.link.publish(protocol.telemetry_topic(device), protocol.encode_telemetry(snap), 1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.link.close()


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, BrokerHandle]]:
    """Broker, publisher, recorder and dashboard; yields the dashboard's URL."""
    tmp = tmp_path_factory.mktemp("browser")
    store = tmp / "runs.sqlite"
    dartfl = [sys.executable, "-m", "dartfl.cli.main"]
    sim = subprocess.run(
        [*dartfl, "sim", "--workload", "mmpp", "--duration-s", "300", "--profile", "pi4", "--target-load",
         "0.5", "--policy", "dart", "--policy", "inference-first:4", "--policy", "static:0.5", "--store",
         str(store), "--no-plot", "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr
    with RunStore(store) as s:
        synthetic.record_fl_run(s)
        synthetic.record_dc_run(s)
    with start_mosquitto() as broker:
        publisher = Publisher(broker.url)
        recorder = _start(
            [*dartfl, "record", "--broker", broker.url, "--store", str(store), "--flush-s", "0.5"],
            tmp / "record.log",
        )
        port = free_port()
        dashboard = _start(
            [*dartfl, "dashboard", "--store", str(store), "--broker", broker.url, "--port", str(port),
             "--refresh-s", "1", "--stale-after-s", "3", "--gone-after-s", "8"],
            tmp / "dashboard.log",
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_http(f"{url}/_stcore/health", dashboard, tmp / "dashboard.log")
            yield url, broker
        finally:
            _stop(dashboard)
            _stop(recorder)
            publisher.close()


def _tile_values(page: object) -> str:
    return page.locator(".dfl-backlog, .dfl-slo").all_inner_texts()  # type: ignore[attr-defined,no-any-return]


def test_dashboard_in_chromium_shows_live_values_and_every_page(stack: tuple[str, BrokerHandle]) -> None:
    from playwright.sync_api import sync_playwright

    url, _ = stack
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: apt-get install -y chromium"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url)
        # 1. Fleet: live tiles appear, their values change, the short-lived device goes away.
        page.wait_for_selector('.dfl-tile[data-device="pi-01"]', timeout=45_000)
        page.get_by_text("Live feed connected").wait_for(timeout=15_000)
        first = _tile_values(page)
        deadline = time.monotonic() + 20
        while _tile_values(page) == first and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        assert _tile_values(page) != first, "live values did not change"
        page.locator('.dfl-tile[data-device="pi-04"] .dfl-badge', has_text="gone").wait_for(timeout=20_000)
        miss = page.locator('.dfl-tile.dfl-miss[data-device="jetson-03"]')
        assert miss.count() == 1  # the overloaded device stands out
        assert page.locator(".dfl-tile").count() == len(DEVICES)
        page.locator('[data-testid="stVegaLiteChart"]').first.wait_for(timeout=15_000)
        page.wait_for_timeout(1500)  # let the charts finish drawing
        page.screenshot(path=str(ARTIFACTS / "fleet.png"), full_page=True)
        # 2. Every other page, by clicking the sidebar.
        for name, title, charts in (
            ("Device", "Device", 4),
            ("FL rounds", "Federated rounds", 3),
            ("Experiments", "Experiments", 5),
            ("Datacenter", "Datacenter", 4),
        ):
            page.locator('[data-testid="stSidebar"] label').filter(has_text=name).click()
            page.get_by_role("heading", name=title).wait_for(timeout=20_000)
            page.wait_for_function(
                f"document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]').length >= {charts}",
                timeout=20_000,
            )
            assert page.locator('[data-testid="stException"]').count() == 0
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ARTIFACTS / f"{name.lower().replace(' ', '-')}.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "fleet.png").stat().st_size > 20_000
    if os.environ.get("DARTFL_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(ARTIFACTS / "fleet.png", ROOT / "docs" / "img" / "dashboard.png")


def test_a_damaged_store_reads_as_one_line_errors_in_chromium(tmp_path: Path) -> None:
    """No broker, a store with malformed JSON rows: each page names the damage and still draws
    what reads (the Fleet SLO chart, the comparison of the intact run), never a traceback."""
    from playwright.sync_api import sync_playwright

    from tests.store_fixtures import damaged_copy, healthy_store

    store = damaged_copy(healthy_store(tmp_path / "template.sqlite"), tmp_path, "malformed-json")
    port = free_port()
    log = tmp_path / "dashboard.log"
    dashboard = _start(
        [sys.executable, "-m", "dartfl.cli.main", "dashboard", "--store", str(store), "--port", str(port)],
        log,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/_stcore/health", dashboard, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(url)
            for name, damage, charts in (
                ("Fleet", "the telemetry snapshot of 'dev-001'", 2),
                ("Experiments", "run 2's result for policy 'dart' is not JSON", 4),
            ):
                if name != "Fleet":
                    page.locator('[data-testid="stSidebar"] label').filter(has_text=name).click()
                page.get_by_text(damage).first.wait_for(timeout=30_000)
                page.wait_for_function(
                    f"document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]').length >= {charts}",
                    timeout=20_000,
                )
                assert page.locator('[data-testid="stException"]').count() == 0
                if name == "Fleet":  # every device, dev-001 by its newest snapshot that reads
                    assert page.locator(".dfl-tile").count() == 3
                page.wait_for_timeout(1000)
                page.screenshot(path=str(ARTIFACTS / f"damaged-{name.lower()}.png"), full_page=True)
            browser.close()
    finally:
        _stop(dashboard)
