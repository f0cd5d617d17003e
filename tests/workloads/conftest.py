"""Fixtures shared by the workload tests.

Tests import `workloads` submodules (`workloads.registry`), not the package facade: pytest
puts tests/ on sys.path, where tests/workloads/ is a namespace package that shadows the
editable install's top-level `workloads`. test_workload_facade.py checks the facade in a
subprocess instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dartfl.errors import TraceFormatError


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str], Path]:
    """write_file(name, text) -> path of a new file in the test's tmp dir."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def refuses_file(write_file: Callable[[str, str], Path]) -> Callable[..., None]:
    """refuses_file(reader, text, line, problem): `reader` refuses a file holding `text` with a
    TraceFormatError that names the file, the line (None: the whole file) and the problem."""

    def check(reader: Callable[[Path], Any], text: str, line: int | None, problem: str) -> None:
        path = write_file("bad.csv", text)
        with pytest.raises(TraceFormatError, match=problem) as err:
            reader(path)
        assert (err.value.path, err.value.line) == (str(path), line)

    return check
