"""Every page of the app on a damaged run store, through AppTest: no traceback, the one-line
error (what, where, how to recover) where the damage is met, and what still reads still shown.
Every page gave a traceback on truncated, malformed or newer-schema stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dartfl.paths import STORE_ENV
from dartfl.store import connection as store_connection
from dashboard.config import BROKER_ENV
from tests.store_fixtures import damaged_copy, healthy_store, locked_copy

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
PAGES = {
    "Fleet": "routes/fleet.py",
    "Device": "routes/device.py",
    "FL rounds": "routes/rounds.py",
    "Experiments": "routes/experiments.py",
    "Datacenter": "routes/datacenter.py",
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return healthy_store(tmp_path_factory.mktemp("damaged-pages") / "runs.sqlite")


def _visit(monkeypatch: pytest.MonkeyPatch, store: Path) -> Iterator[tuple[str, AppTest]]:
    """Each page in turn, after checking it raised nothing."""
    monkeypatch.setenv(STORE_ENV, str(store))
    monkeypatch.delenv(BROKER_ENV, raising=False)
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    for page, script in PAGES.items():
        if page != "Fleet":
            at.switch_page(script).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        yield page, at


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


@pytest.mark.parametrize(
    ("damage", "complaint"),
    [
        ("truncated", "is damaged (database disk image is malformed): restore a backup"),
        ("not-sqlite", "is not an SQLite database, so not a run store; pass --store PATH"),
    ],
)
def test_a_store_that_does_not_open_is_named_on_every_page(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path, damage: str, complaint: str
) -> None:
    path = damaged_copy(template, tmp_path, damage)
    for page, at in _visit(monkeypatch, path):
        (error,) = _errors(at)
        assert error.startswith(str(path)) and complaint in error, page
        assert not any("yet" in i.value for i in at.info), page  # "nothing recorded yet" would be wrong
        assert _charts(at) == 0


def test_a_missing_table_is_named_where_it_is_read_and_the_other_pages_still_draw(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path
) -> None:
    path = damaged_copy(template, tmp_path, "missing-table")
    charts = {"FL rounds": 4, "Experiments": 4, "Datacenter": 5}
    for page, at in _visit(monkeypatch, path):
        if page in ("Fleet", "Device"):
            (error,) = _errors(at)
            assert error.startswith(f"{path}: table telemetry is missing"), page
            assert "`dartfl record`) recreates it empty" in error
        else:
            assert _errors(at) == [] and _charts(at) == charts[page], page


def test_a_newer_schema_is_a_warning_on_every_page_that_still_shows_everything(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path
) -> None:
    path = damaged_copy(template, tmp_path, "newer-schema")
    charts = {"Fleet": 2, "Device": 5, "FL rounds": 4, "Experiments": 4, "Datacenter": 5}
    for page, at in _visit(monkeypatch, path):
        assert any("newer than this dartfl's" in w.value for w in at.warning), page
        assert _errors(at) == [] and _charts(at) == charts[page], page


def test_malformed_json_is_named_per_run_and_snapshot_and_the_rest_still_draws(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path
) -> None:
    path = damaged_copy(template, tmp_path, "malformed-json")
    seen = {}
    for page, at in _visit(monkeypatch, path):
        seen[page] = (_errors(at), [w.value for w in at.warning], _charts(at))
        if page == "Fleet":  # every device still shows, dev-001 by its newest snapshot that reads
            assert {m.label: m.value for m in at.metric}["devices"] == "3"
    (error,), _, charts = seen["Fleet"]
    assert error.startswith(f"{path}: the telemetry snapshot of 'dev-001' at t_s=") and "is not JSON" in error
    assert charts == 2  # p99/SLO per device and the fleet's SLO over the last hour
    assert seen["Device"] == ([], [], 5)  # dev-000's series; dev-001's damaged rows add no shares
    (error,), (warning,), charts = seen["Experiments"]
    assert warning.startswith(f"{path}: run 1's config is not JSON")
    assert error.startswith(f"{path}: run 2's result for policy 'dart' is not JSON")
    assert charts == 4  # run 1 still compared on its 2 metrics; run 2's decisions still drawn
    (error,), _, charts = seen["FL rounds"]
    assert error.startswith(f"{path}: run 3's result for policy") and charts == 0
    assert seen["Datacenter"] == ([], [], 5)


def test_a_locked_store_says_so_on_every_page(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(store_connection, "READ_BUSY_TIMEOUT_S", 0.1)
    with locked_copy(template, tmp_path) as path:
        for page, at in _visit(monkeypatch, path):
            (error,) = _errors(at)
            assert error.startswith(f"{path} is locked by another process (waited 0.1 s)"), page


def test_text_in_numeric_columns_is_named_on_the_fleet_page_and_no_page_fails(
    monkeypatch: pytest.MonkeyPatch, template: Path, tmp_path: Path
) -> None:
    # A t_s of 'late' sorted above every time, so it was dev-002's newest snapshot and the
    # Fleet page failed with a TypeError; text in backlog reached the charts as a value.
    path = damaged_copy(template, tmp_path, "text-in-numbers")
    charts = {"Fleet": 2, "Device": 5, "FL rounds": 4, "Experiments": 4, "Datacenter": 5}
    for page, at in _visit(monkeypatch, path):
        errors = _errors(at)
        if page == "Fleet":
            (error,) = errors
            assert error.startswith(f"{path}: 1 telemetry snapshot(s) of 'dev-002' hold a t_s that is not")
            assert {m.label: m.value for m in at.metric}["devices"] == "3"
        else:
            assert errors == [], page
        assert _charts(at) == charts[page], page
