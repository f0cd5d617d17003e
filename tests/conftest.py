"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dartfl.paths import STORE_ENV
from dartfl.store import RunStore

# tls_files, tls_broker, strict_broker: a throwaway CA and Mosquitto TLS listeners (edge and CLI tests)
# small_tasks, task_classes, exported_pair, one_torch_thread: real task data and ONNX models
# wheel, fresh: the built wheel and a fresh venv outside the repository it is installed into
pytest_plugins = ["tests.messaging.tls_fixtures", "tests.ml_fixtures", "tests.wheel_fixtures"]


@pytest.fixture(autouse=True)
def _private_run_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the default run store into the test's tmp dir: no test writes to the user's data dir."""
    path = tmp_path / "dartfl-store" / "runs.sqlite"
    monkeypatch.setenv(STORE_ENV, str(path))
    return path


@pytest.fixture
def tmp_store(tmp_path: Path) -> Iterator[RunStore]:
    """An empty run store in the test's tmp dir, closed afterwards."""
    with RunStore(tmp_path / "store.sqlite") as store:
        yield store
