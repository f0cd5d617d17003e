"""Fixtures shared by the workload tests.

Tests import `workloads` submodules (`workloads.registry`), not the package facade: pytest
puts tests/ on sys.path, where tests/workloads/ is a namespace package that shadows the
editable install's top-level `workloads`. test_workload_facade.py checks the facade in a
subprocess instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """write_file(name, text) -> path of a new file in the test's tmp dir."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
