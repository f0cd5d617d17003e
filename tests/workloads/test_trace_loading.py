"""load_trace: format detection from the header, and its errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import TraceFormatError
from workloads.traces.load import detect_format, load_trace

WriteFile = Callable[[str, str], Path]


@pytest.mark.parametrize(
    ("text", "kind", "requests"),
    [
        ("time_s,task\n0.5,a\n1,b\n", "time-task", 2),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n", "azure-llm", 1),
        ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,4\n", "azure-functions", 7),
    ],
)
def test_format_is_detected_from_the_header(
    write_file: WriteFile, text: str, kind: str, requests: int
) -> None:
    path = write_file("trace.csv", text)
    assert detect_format(path) == kind
    assert load_trace(path).num_requests == requests


def test_task_names_and_rng_are_passed_to_the_reader(write_file: WriteFile) -> None:
    llm = write_file("llm.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,1\n")
    assert load_trace(llm, ["x", "y"]).task_names == ("x", "y")
    fn = write_file("fn.csv", "HashOwner,HashApp,HashFunction,Trigger,1\no,a,f,http,50\n")
    a = load_trace(fn, ["only"], np.random.default_rng(3))
    b = load_trace(fn, ["only"], np.random.default_rng(3))
    np.testing.assert_array_equal(a.times_s, b.times_s)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("", 1, "file is empty"),
        ("time,what\n1,2\n", 1, "unrecognised header 'time,what'; expected one of 'time_s,task', "),
        ("12.5,digits\n", 1, "missing header: the first line '12.5,digits' looks like data"),
        ("time_s,task\n1,a\nx,b\n", 3, "time_s 'x' is not a number"),
    ],
)
def test_bad_files_name_file_line_and_problem(
    write_file: WriteFile, text: str, line: int, problem: str
) -> None:
    path = write_file("bad.csv", text)
    with pytest.raises(TraceFormatError, match=problem) as err:
        load_trace(path)
    assert err.value.line == line
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_missing_file_is_a_trace_format_error_without_line(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file; check the path") as err:
        load_trace(tmp_path / "missing.csv")
    assert err.value.line is None
