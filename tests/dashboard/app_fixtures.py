"""The dashboard app run in-process by Streamlit's test runner, on a given store and broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dartfl.paths import STORE_ENV
from dashboard.config import BROKER_ENV

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def run_app(monkeypatch: pytest.MonkeyPatch, store: Path, broker: str | None = None) -> AppTest:
    """The app's first run on `store` (and `broker`, else none), which must raise nothing."""
    monkeypatch.setenv(STORE_ENV, str(store))
    if broker is None:
        monkeypatch.delenv(BROKER_ENV, raising=False)
    else:
        monkeypatch.setenv(BROKER_ENV, broker)
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
