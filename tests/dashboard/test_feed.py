"""The live feed and the recorder against a real Mosquitto: late broker, reconnect, persistence."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dartfl import protocol
from dartfl.store import RunStore
from dashboard import synthetic
from dashboard.feed import LiveFeed
from dashboard.recorder import Recorder
from messaging.brokers import free_port, start_mosquitto
from messaging.link import MqttLink, connect

pytestmark = pytest.mark.integration


def _wait(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _publisher(url: str) -> MqttLink:
    return connect(url, "test-publisher", on_message=lambda m: None)


def _publish(link: MqttLink, device: str, t_s: float, step: int) -> None:
    body = protocol.encode_telemetry(synthetic.snapshot(device, t_s, step))
    assert link.publish(protocol.telemetry_topic(device), body, protocol.TELEMETRY_QOS)


def test_live_feed_waits_for_a_late_broker_then_shows_devices() -> None:
    port = free_port()
    feed = LiveFeed(f"mqtt://127.0.0.1:{port}", retry_s=0.3)
    try:
        time.sleep(0.5)
        state = feed.state()
        assert not state.connected and state.error  # says why, does not raise
        with start_mosquitto(port) as broker:
            assert _wait(lambda: feed.state().connected), feed.state().error
            with _publisher(broker.url) as pub:
                for i in range(3):
                    _publish(pub, "pi-7", time.time(), i)
                pub.flush()
                assert _wait(lambda: len(feed.history("pi-7")) == 3)
            assert feed.state().devices["pi-7"].snapshot.device == "pi-7"
        assert _wait(lambda: not feed.state().connected)
        assert "reconnecting" in (feed.state().error or "")
    finally:
        feed.close()


def test_recorder_persists_snapshots_once_and_ignores_bad_ones(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.sqlite"
    with start_mosquitto() as broker:
        recorder = Recorder(store_path, broker.url, flush_s=0.1)
        stop = threading.Event()
        worker = threading.Thread(target=recorder.run, args=(stop,))
        worker.start()
        try:
            assert _wait(lambda: recorder.subscriber.connected)
            now = time.time()
            with _publisher(broker.url) as pub:
                for i in range(5):
                    _publish(pub, "pi-1", now + i, i)
                _publish(pub, "pi-1", now, 0)  # the same snapshot again
                pub.publish(protocol.telemetry_topic("pi-1"), b'{"v": 1}', 1)
                pub.flush()
            assert _wait(lambda: recorder.written == 5 and recorder.bad == 1)
        finally:
            stop.set()
            worker.join(10)
            recorder.close()
    with RunStore(store_path) as store:
        (device,) = store.telemetry_devices()
        assert (device.device, device.rows) == ("pi-1", 5)


def test_dartfl_record_process_writes_until_sigterm(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.sqlite"
    with start_mosquitto() as broker:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dartfl.cli.main",
                "record",
                "--broker",
                broker.url,
                "--store",
                str(store_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert "dartfl record:" in proc.stdout.readline()
            with _publisher(broker.url) as pub:
                deadline = time.monotonic() + 15
                step = 0
                while time.monotonic() < deadline:
                    _publish(pub, "pi-2", time.time(), step)
                    step += 1
                    time.sleep(0.1)
                    if step > 20 and store_path.exists():
                        with RunStore(store_path) as store:
                            if store.telemetry_devices():
                                break
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "snapshots written" in out
    with RunStore(store_path) as store:
        assert store.telemetry_devices()[0].rows >= 1
