"""The Fleet page on telemetry rows whose headline columns are not numbers (SQLite keeps any
value in any column), an empty store file, and the recorder hint's broker: the tiles show
"-" and the page names the row; an empty file reads as a new store; the hint names the
broker the dashboard was given."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from dartfl.store import RunStore, TelemetryRow
from dashboard import synthetic, tiles
from dashboard.config import DashboardConfig
from dashboard.data import DeviceTile
from dashboard.views.common import how_to_record, store_is_new
from dashboard.views.fleet import readable_rows
from messaging.security import MqttSecurity
from tests.dashboard.app_fixtures import run_app

PAGES = ["routes/device.py", "routes/rounds.py", "routes/experiments.py", "routes/datacenter.py"]


def _tile(**values: object) -> DeviceTile:
    fields: dict[str, object] = {
        "device": "pi-01",
        "status": "alive",
        "age_s": 1.0,
        "source": "run store",
        "offline": False,
        "backlog": 3,
        "inference_share": 0.5,
        "slo_attainment": 0.99,
        "p99_ms": 20.0,
        "slo_ms": 100.0,
        "train_samples": 1200,
        "round_trained": None,
        "round_target": None,
        "rounds_done": None,
        "misses_slo": False,
    }
    return DeviceTile(**{**fields, **values})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "values",
    [
        {"backlog": "lots"},
        {"backlog": 2.5},
        {"backlog": float("inf")},
        {"backlog": True},
        {"p99_ms": "x"},
        {"slo_ms": b"\x00"},
        {"slo_attainment": "most"},
        {"train_samples": "many"},
    ],
)
def test_a_tile_shows_a_dash_for_a_figure_that_is_not_a_number(values: dict[str, object]) -> None:
    text = tiles.tiles_html([_tile(**values)])
    assert 'data-device="pi-01"' in text
    (name,) = values
    if name == "backlog":
        assert '<b class="dfl-backlog">-</b>' in text
    if name == "p99_ms":
        assert "<b>- / 100 ms</b>" in text
    if name == "train_samples":
        assert "<b>- samples</b>" in text
    if name == "slo_attainment":
        assert '<b class="dfl-slo">-</b>' in text


def test_a_healthy_tile_still_shows_its_figures() -> None:
    text = tiles.tile_html(_tile(backlog=1234))
    assert '<b class="dfl-backlog">1,234</b>' in text and "<b>20 / 100 ms</b>" in text
    assert '<b class="dfl-slo">99.0%</b>' in text


def test_readable_rows_blank_the_bad_columns_and_name_the_row(tmp_path: Path) -> None:
    good = TelemetryRow("pi-01", 10.0, backlog=2, p99_ms=5.0, slo_ms=100.0)
    bad = TelemetryRow("pi'02", 11.5, backlog="lots", p99_ms="x", slo_ms=100.0)  # type: ignore[arg-type]
    damage: list[str] = []
    rows = readable_rows([good, bad], damage, tmp_path / "runs.sqlite")
    assert rows[0] == good
    assert (rows[1].backlog, rows[1].p99_ms, rows[1].slo_ms) == (None, None, 100.0)
    (line,) = damage
    assert line.startswith(f'{tmp_path / "runs.sqlite"}: the telemetry snapshot of "pi\'02" at t_s=11.5')
    assert "backlog 'lots', p99_ms 'x', not a number" in line
    assert "DELETE FROM telemetry WHERE device = 'pi''02' AND t_s = 11.5" in line


@pytest.fixture
def damaged_rows(tmp_path: Path) -> Path:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        synthetic.fill_telemetry(store, devices=3, seconds=30, end_s=time.time())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE telemetry SET backlog = 'lots' WHERE device = 'dev-000'")
        conn.execute("UPDATE telemetry SET p99_ms = 'x' WHERE device = 'dev-001'")
    conn.close()
    return path


def test_the_fleet_page_names_a_row_that_is_not_a_number_and_draws_every_tile(
    monkeypatch: pytest.MonkeyPatch, damaged_rows: Path
) -> None:
    at = run_app(monkeypatch, damaged_rows)
    errors = [e.value for e in at.error]
    assert any("'dev-000'" in e and "backlog 'lots', not a number" in e for e in errors), errors
    assert any("'dev-001'" in e and "p99_ms 'x', not a number" in e for e in errors), errors
    html = "".join(m.value for m in at.markdown)
    assert all(f'data-device="dev-00{d}"' in html for d in range(3))


def test_an_empty_store_file_reads_as_a_new_store_on_every_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "runs.sqlite"
    path.touch()
    assert store_is_new(DashboardConfig(path))
    at = run_app(monkeypatch, path)
    for script in [None, *PAGES]:
        if script is not None:
            at.switch_page(script).run()
        assert not at.exception, (script, [e.value for e in at.exception])
        assert [e.value for e in at.error] == [], script
        assert any("yet" in i.value for i in at.info), script
    assert path.stat().st_size == 0  # a reader never sets it up


def test_the_recorder_hint_names_the_broker_the_dashboard_was_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = tmp_path / "runs.sqlite"
    hint = how_to_record(DashboardConfig(store, broker_url="mqtt://10.0.0.5:1884"))
    assert f"dartfl record --broker mqtt://10.0.0.5:1884 --store {store}" in hint
    assert "--broker mqtt://127.0.0.1:1883 " in how_to_record(DashboardConfig(store))
    secure = DashboardConfig(
        store,
        broker_url="mqtts://broker.example:8883",
        mqtt_security=MqttSecurity(ca_file=Path("/etc/ca.crt"), username="dash"),
    )
    hint = how_to_record(secure)
    assert "--broker mqtts://broker.example:8883 --mqtt-ca-file /etc/ca.crt --mqtt-username RECORDER" in hint
    assert "dash " not in hint  # the recorder needs an account of its own
    # On the page, with a broker that is not up (nothing listens on port 9).
    at = run_app(monkeypatch, store, broker="mqtt://127.0.0.1:9")
    assert any("dartfl record --broker mqtt://127.0.0.1:9 --store" in i.value for i in at.info)
