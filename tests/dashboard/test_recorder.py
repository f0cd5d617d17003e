"""The recorder bounds what it stores against its own clock and the store (dartfl.store.limits),
and `dartfl record` says in one line why a store cannot be recorded into. Messages are fed to
`handle` directly; the broker port is closed on purpose."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dartfl.cli.main import main
from dartfl.cli.record_cmd import _summary
from dartfl.store import RunStore, TelemetryRow
from dartfl.store import connection as store_connection
from dartfl.store.limits import TelemetryLimits
from dashboard import synthetic
from dashboard.recorder import Recorder
from messaging.brokers import free_port
from messaging.link import Message
from tests.store_fixtures import damaged_copy, healthy_store, locked_copy

NOW = 1_700_000_000.0


def _message(device: str, t: float, **fields: Any) -> Message:
    snapshot = {**synthetic.snapshot(device, t, 1).to_json(), **fields}
    return Message(f"dartfl/v1/{device}/telemetry", json.dumps(snapshot).encode(), 1, False)


@pytest.fixture
def recorder_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Recorder] = []

    def make(store: Path | None = None, **limits: Any) -> Recorder:
        recorder = Recorder(
            store or tmp_path / "runs.sqlite",
            f"mqtt://127.0.0.1:{free_port()}",
            limits=TelemetryLimits(**limits),
            clock=lambda: NOW,
        )
        made.append(recorder)
        return recorder

    yield make
    for recorder in made:
        recorder.close()


def _rows(recorder: Recorder) -> dict[str, tuple[int, float]]:
    return {d.device: (d.rows, d.last_t_s) for d in recorder.store.telemetry_devices()}


def test_a_snapshot_dated_far_ahead_is_refused_counted_and_logged(
    recorder_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # t = 9.9e9 became the device's newest snapshot for good, and no retention pruned it.
    recorder = recorder_factory(max_ahead_s=300.0)
    with caplog.at_level(logging.WARNING, "dashboard.recorder"):
        recorder.handle(_message("pi-1", 9.9e9))
        recorder.handle(_message("pi-1", NOW + 600))
        recorder.handle(_message("pi-1", NOW + 120))  # a clock two minutes fast is kept
    assert recorder.refused == {"ahead": 2}
    assert recorder.flush() == 1
    assert [row.t_s for row in recorder.store.telemetry_latest()] == [NOW + 120]
    assert (
        "refused a snapshot of 'pi-1' dated 8200000000 s ahead of this host's clock (limit 300 s)"
        in caplog.text
    )
    assert caplog.text.count("refused a snapshot") == 1  # once a minute, not once a snapshot


def test_the_recorder_prunes_future_rows_a_store_already_holds(recorder_factory: Any, tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with RunStore(path) as store:  # recorded before the recorder refused such snapshots
        store.add_telemetry([TelemetryRow("pi-1", NOW - 5), TelemetryRow("pi-1", 9.9e9)])
    recorder = recorder_factory(path, max_ahead_s=300.0)
    stop = threading.Event()
    recorder.run(stop, duration_s=0.01)  # its first pass prunes
    assert [row.t_s for row in recorder.store.telemetry_latest()] == [NOW - 5]


def test_a_snapshot_older_than_the_retention_is_refused(recorder_factory: Any) -> None:
    recorder = recorder_factory(retention_s=3600.0)
    recorder.handle(_message("pi-1", NOW - 7200))
    recorder.handle(_message("pi-1", NOW - 60))
    assert recorder.refused == {"behind": 1}
    assert recorder.flush() == 1


def test_a_device_publishing_too_often_loses_only_its_own_oldest_rows(recorder_factory: Any) -> None:
    recorder = recorder_factory(max_rows_per_device=20)
    for i in range(60):
        recorder.handle(_message("pi-1", NOW - 60 + i))
    for i in range(5):
        recorder.handle(_message("pi-2", NOW - 5 + i))
    assert recorder.flush() == 65
    rows = _rows(recorder)
    assert rows["pi-1"] == (20, NOW - 1)  # trimmed back to its limit, the newest kept
    assert rows["pi-2"] == (5, NOW - 1)
    for i in range(21):  # within the slack over the limit: no trim yet
        recorder.handle(_message("pi-1", NOW + i))
    recorder.flush()
    assert _rows(recorder)["pi-1"] == (20, NOW + 20)


def test_devices_past_the_device_limit_are_refused(recorder_factory: Any) -> None:
    recorder = recorder_factory(max_devices=2)
    for device in ("pi-1", "pi-2", "pi-3", "pi-1"):
        recorder.handle(_message(device, NOW))
    assert recorder.refused == {"devices": 1}
    recorder.flush()
    assert set(_rows(recorder)) == {"pi-1", "pi-2"}
    assert _summary(recorder) == (
        "2 snapshots written (0 bad messages ignored; 1 refused: 1 from a device past the device limit)"
    )


@pytest.mark.parametrize(
    "fields",
    [{"padding": "x" * (1 << 20)}, {"inference_share": 7.5}, {"slo_attainment_window": -3}],
    ids=["1-MiB", "share-7.5", "attainment-minus-3"],
)
def test_what_no_device_can_report_never_reaches_the_store(
    recorder_factory: Any, fields: dict[str, Any]
) -> None:
    # Found stored as sent: 1 MiB snapshots (30 MB in 1.9 s), inference_share 7.5, attainment -3.
    recorder = recorder_factory()
    recorder.handle(_message("pi-1", NOW, **fields))
    assert (recorder.bad, recorder.flush(), _rows(recorder)) == (1, 0, {})


def test_recording_into_a_store_without_its_table_recreates_it(recorder_factory: Any, tmp_path: Path) -> None:
    # `dartfl record` failed with OperationalError: no such table: telemetry.
    template = healthy_store(tmp_path / "template.sqlite", telemetry_end_s=NOW)
    recorder = recorder_factory(damaged_copy(template, tmp_path, "missing-table"))
    recorder.handle(_message("pi-1", NOW))
    assert recorder.flush() == 1
    assert len(recorder.store.list_runs()) == 4


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return healthy_store(tmp_path_factory.mktemp("record") / "runs.sqlite")


@pytest.mark.parametrize(
    ("damage", "code", "complaint"),
    [
        ("truncated", 2, "is damaged (database disk image is malformed): restore a backup"),
        ("not-sqlite", 2, "is not an SQLite database, so not a run store"),
        ("newer-schema", 2, "writing refused so as not to damage it; install a dartfl that knows schema"),
    ],
)
def test_dartfl_record_on_a_damaged_store_exits_with_one_line(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, code: int, complaint: str
) -> None:
    path = damaged_copy(template, tmp_path, damage)
    assert main(["record", "--broker", f"mqtt://127.0.0.1:{free_port()}", "--store", str(path)]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and complaint in err and "Traceback" not in err


def test_dartfl_record_on_a_locked_store_exits_1_saying_so(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_connection, "BUSY_TIMEOUT_S", 0.1)
    with locked_copy(template, tmp_path) as path:
        assert main(["record", "--broker", f"mqtt://127.0.0.1:{free_port()}", "--store", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"dartfl: failed: {path} is locked by another process (waited 0.1 s): retry once it is done; "
        f"`fuser -v {path}` shows which process holds it\n"
    )


def test_dartfl_record_refuses_limits_that_bound_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["record", "--broker", f"mqtt://127.0.0.1:{free_port()}", "--max-rows-per-device", "0"]
    assert main(argv) == 2
    assert "max_rows_per_device must be an integer >= 1, got 0" in capsys.readouterr().err


def test_dartfl_record_on_a_read_only_store_exits_1_before_recording(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reviewer's case (a read-only bind mount): the recorder warned every second that it
    # could not write, and exited 0 having written nothing. Root ignores file modes, so the
    # mount is stood in for by what the kernel answers for it.
    path = healthy_store(tmp_path / "ro.sqlite")
    real_access = store_connection.os.access
    monkeypatch.setattr(
        store_connection.os,
        "access",
        lambda p, mode: mode != store_connection.os.W_OK and real_access(p, mode),
    )
    argv = [
        "record",
        "--broker",
        f"mqtt://127.0.0.1:{free_port()}",
        "--store",
        str(path),
        "--duration-s",
        "1",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"dartfl: failed: cannot write {path}: the file or its directory is read-only; make it writable "
        "or pass --store PATH or set DARTFL_STORE to a writable file path\n"
    )


def test_a_store_that_stays_unwritable_is_warned_about_once_a_minute(
    recorder_factory: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from dartfl.store import StoreWriteError

    recorder = recorder_factory()

    def full(rows: Any) -> int:
        raise StoreWriteError("cannot write runs.sqlite: the disk is full")

    monkeypatch.setattr(recorder.store, "add_telemetry", full)
    with caplog.at_level(logging.WARNING, logger="dashboard.recorder"):
        for i in range(5):  # five flushes within the same minute (the clock stands still)
            recorder.handle(_message("pi-1", NOW - 1 + i * 0.01))
            assert recorder.flush() == 0
    warned = [r for r in caplog.records if "cannot write the run store now" in r.getMessage()]
    assert len(warned) == 1
    assert len(recorder._buffer) == 5  # every snapshot kept for later
