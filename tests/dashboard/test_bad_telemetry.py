"""Malformed or hostile telemetry must not crash the recorder, break the dashboard or grow
its memory: messages are fed to `handle` directly (the broker port is closed on purpose)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dartfl import protocol
from dartfl.errors import ConfigError, ProtocolError
from dartfl.store import RunStore, StoreBusyError, TelemetryRow
from dashboard import feed as feed_module
from dashboard import synthetic
from dashboard.feed import LiveFeed
from dashboard.recorder import Recorder
from messaging.brokers import free_port
from messaging.link import Message

NOW_S = 1_700_000_000.0  # the recorder's clock in these tests, and the snapshots' time


def _telemetry(device: str, topic_device: str | None = None, **fields: Any) -> Message:
    snapshot = {**synthetic.snapshot("pi-1", NOW_S, 1).to_json(), **fields, "device": device}
    topic = f"dartfl/v1/{topic_device or device}/telemetry"
    return Message(topic, json.dumps(snapshot).encode(), 1, False)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"device": "\ud800"}, "device"),  # unencodable: broke the store and Streamlit
        ({"device": "a/b"}, "device"),
        ({"device": "pi-1", "t": 1e300}, "unix seconds"),  # overflowed the dashboard's dates
        ({"device": "pi-1", "t": -5}, "unix seconds"),
    ],
)
def test_telemetry_with_a_bad_device_or_time_is_a_protocol_error(
    fields: dict[str, Any], complaint: str
) -> None:
    body = json.dumps({"v": 1, "t": 1.0, **fields}).encode()
    with pytest.raises(ProtocolError, match=complaint):
        protocol.decode_telemetry(body)


def test_a_device_may_only_publish_about_itself() -> None:
    body = protocol.encode_telemetry(protocol.Telemetry("pi-1", 1.0))
    assert protocol.decode_telemetry(body, "dartfl/v1/pi-1/telemetry").device == "pi-1"
    with pytest.raises(ProtocolError, match="another's topic"):
        protocol.decode_telemetry(body, "dartfl/v1/pi-2/telemetry")
    with pytest.raises(ProtocolError, match="another's topic"):  # the topic of another kind
        protocol.decode_telemetry(body, "dartfl/v1/pi-1/status")


def test_an_encoder_refuses_the_times_a_decoder_would() -> None:
    with pytest.raises(ConfigError, match="unix seconds"):
        protocol.Telemetry("pi-1", 1e300)


def test_the_recorder_survives_bad_snapshots_and_keeps_the_good_ones(tmp_path: Path) -> None:
    store_path = tmp_path / "runs.sqlite"
    recorder = Recorder(store_path, f"mqtt://127.0.0.1:{free_port()}", clock=lambda: NOW_S)
    try:
        recorder.handle(_telemetry("pi-1", backlog={"digits": 2**60}))  # past what SQLite holds
        recorder.handle(_telemetry("pi-2", topic_device="pi-3"))
        recorder.handle(_telemetry("pi-1"))
        assert recorder.bad == 2
        # A row the store refuses (built past the decoder) costs itself, not the batch.
        recorder._buffer.append(TelemetryRow(device="\ud800", t_s=1.0, payload={}))
        recorder.handle(_telemetry("pi-4"))
        assert recorder.flush() == 2
        assert recorder.bad == 3
    finally:
        recorder.close()
    with RunStore(store_path) as store:
        assert {row.device for row in store.telemetry_latest()} == {"pi-1", "pi-4"}


def test_the_live_feed_keeps_at_most_max_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed_module, "MAX_DEVICES", 3)
    clock = iter(range(100))
    live = LiveFeed(f"mqtt://127.0.0.1:{free_port()}", clock=lambda: float(next(clock)))
    try:
        for i in range(5):
            live.handle(_telemetry(f"pi-{i}"))
            live.handle(
                Message(
                    f"dartfl/v1/gone-{i}/status",
                    protocol.encode_status(protocol.DeviceStatus(f"gone-{i}", False)),
                    1,
                    True,
                )
            )
        assert set(live.state().devices) == {"pi-2", "pi-3", "pi-4"}
        assert live.history("pi-0") == []
        assert len(live._offline_since) == 3
        live.handle(_telemetry("pi-2"))  # heard again: now the most recent, pi-3 the most silent
        live.handle(_telemetry("pi-9"))
        assert set(live.state().devices) == {"pi-2", "pi-4", "pi-9"}
    finally:
        live.close()


def test_a_store_that_cannot_be_written_keeps_the_rows_oldest_first_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry used deque.extendleft on the bounded buffer, which pushed the NEWEST rows out.
    monkeypatch.setattr("dashboard.recorder.MAX_BUFFERED", 4)
    recorder = Recorder(tmp_path / "runs.sqlite", f"mqtt://127.0.0.1:{free_port()}", clock=lambda: NOW_S)
    real_add = recorder.store.add_telemetry
    try:
        for i in (1, 2):
            recorder.handle(_telemetry(f"pi-{i}"))

        def locked(rows: list[TelemetryRow]) -> int:
            for i in (3, 4, 5):  # arrive while the failed write is under way
                recorder.handle(_telemetry(f"pi-{i}"))
            raise StoreBusyError("runs.sqlite is locked by another process")

        monkeypatch.setattr(recorder.store, "add_telemetry", locked)
        assert recorder.flush() == 0
        assert [row.device for row in recorder._buffer] == ["pi-2", "pi-3", "pi-4", "pi-5"]
        monkeypatch.setattr(recorder.store, "add_telemetry", real_add)
        assert recorder.flush() == 4
    finally:
        recorder.close()


def test_a_total_past_what_sqlite_holds_is_unknown_not_a_lost_row() -> None:
    # Each task's count was bounded, their sum was not: two of 2**52 overflowed the store.
    from dashboard.telemetry import row_from_snapshot

    row = row_from_snapshot(protocol.Telemetry("pi-1", 1.0, backlog={"a": 2**52, "b": 2**52}))
    assert row.backlog is None
    assert row_from_snapshot(protocol.Telemetry("pi-1", 1.0, backlog={"a": 3, "b": 4})).backlog == 7
