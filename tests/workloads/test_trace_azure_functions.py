"""The Azure Functions 2019 per-minute format: mappings onto tasks, spreading, bad files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError, TraceFormatError
from workloads.traces import azure_functions
from workloads.traces.azure_functions import read_azure_functions_csv

WriteFile = Callable[[str, str], Path]
RefusesFile = Callable[..., None]
HEADER = "HashOwner,HashApp,HashFunction,Trigger,1,2,3,4\n"
ROWS = (
    "o1,a1,small,http,1,0,0,2\n"  # 3 invocations
    "o1,a1,big,timer,10,0,5,5\n"  # 20
    "o2,a2,mid,queue,0,4,4,0\n"  # 8
)


@pytest.fixture
def trace(write_file: WriteFile) -> Path:
    return write_file("fn.csv", HEADER + ROWS)


def test_top_mapping_keeps_the_most_invoked_functions_in_volume_order(trace: Path) -> None:
    arrivals = read_azure_functions_csv(trace, ["first", "second"], np.random.default_rng(1))
    assert arrivals.task_names == ("first", "second")
    np.testing.assert_array_equal(arrivals.counts_per_task(), [20, 8])  # "small" dropped
    assert arrivals.duration_s == 240.0
    # Each invocation lands inside its own minute.
    big = arrivals.times_s[arrivals.tasks == 0]
    np.testing.assert_array_equal(np.bincount((big // 60).astype(np.int64), minlength=4), [10, 0, 5, 5])
    mid = arrivals.times_s[arrivals.tasks == 1]
    np.testing.assert_array_equal(np.bincount((mid // 60).astype(np.int64), minlength=4), [0, 4, 4, 0])


def test_more_tasks_than_functions_leaves_some_tasks_empty(trace: Path) -> None:
    arrivals = read_azure_functions_csv(trace, ["a", "b", "c", "d"])
    np.testing.assert_array_equal(arrivals.counts_per_task(), [20, 8, 3, 0])


def test_rows_of_the_same_function_are_added_up(write_file: WriteFile) -> None:
    path = write_file("fn.csv", HEADER + ROWS + "o2,a2,mid,http,0,0,0,30\n")
    arrivals = read_azure_functions_csv(path, ["top"])
    assert arrivals.num_requests == 38


def test_hash_mapping_keeps_every_invocation_and_is_stable(trace: Path) -> None:
    a = read_azure_functions_csv(trace, ["x", "y"], np.random.default_rng(1), mapping="hash")
    b = read_azure_functions_csv(trace, ["x", "y"], np.random.default_rng(2), mapping="hash")
    assert a.num_requests == 31
    np.testing.assert_array_equal(a.counts_per_task(), b.counts_per_task())
    # Each function's invocations all go to one task: each count is a sum of whole functions.
    counts = a.counts_per_task().tolist()
    assert sum(counts) == 31 and all(c in {0, 3, 8, 20, 11, 23, 28, 31} for c in counts)


def test_spreading_is_seeded(trace: Path) -> None:
    a = read_azure_functions_csv(trace, ["x"], np.random.default_rng(4))
    b = read_azure_functions_csv(trace, ["x"], np.random.default_rng(4))
    c = read_azure_functions_csv(trace, ["x"], np.random.default_rng(5))
    np.testing.assert_array_equal(a.times_s, b.times_s)
    assert not np.array_equal(a.times_s, c.times_s)
    np.testing.assert_array_equal(
        read_azure_functions_csv(trace).times_s, read_azure_functions_csv(trace).times_s
    )


def test_default_tasks_are_the_three_reference_tasks(trace: Path) -> None:
    assert read_azure_functions_csv(trace).task_names == ("digits", "fashion", "uci-digits")


def test_unknown_mapping_lists_the_valid_ones(trace: Path) -> None:
    with pytest.raises(ConfigError, match="valid mappings: top, hash"):
        read_azure_functions_csv(trace, mapping="random")


BAD_FILES = [
    ("", 1, "file is empty"),
    ("o1,a1,f,http,1,2\n", 1, "unrecognised header"),
    ("HashOwner,HashApp,HashFunction,Trigger\no,a,f,http\n", 1, "no minute columns"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,3\no,a,f,http,1,2\n", 1, "minute column 2 is named '3'"),
    (HEADER + "o,a,f,http,1,2,3\n", 2, "expected 8 columns"),
    (HEADER + "o,a,f,http,1,2,3,4\no,a,g,http,1,x,3,4\n", 3, "minute 2: count 'x' is not a whole number"),
    (HEADER + "o,a,f,http,1,2,3.5,4\n", 2, "minute 3: count '3.5'"),
    (HEADER + "o,a,f,http,1,2,3,-4\n", 2, "minute 4: count must be >= 0"),
    (
        HEADER + "o,a,f,http,1,2,3,99999999999999999999\n",
        2,
        "minute 4: count 99,999,999,999,999,999,999 is more",
    ),
    # Past the in-memory limit per cell: the int64 sums wrapped, np.repeat crashed (segfault).
    (HEADER + "o,a,f,http,1,2,3,50000001\n", 2, "minute 4: count 50,000,001 is more than the 50,000,000"),
    (HEADER + "o,a,f,http,5000000000000000000,5000000000000000000,0,0\n", 2, "minute 1: count 5,000,"),
    (HEADER, None, "no functions after the header"),
    (HEADER + "o,a,f,http,0,0,0,0\n", None, "no invocations"),
]


@pytest.mark.parametrize(("text", "line", "problem"), BAD_FILES)
def test_bad_file_names_the_line_and_problem(
    refuses_file: RefusesFile, text: str, line: int | None, problem: str
) -> None:
    refuses_file(read_azure_functions_csv, text, line, problem)


@pytest.mark.parametrize(
    ("mapping", "tasks", "line", "problem"),
    [
        # "hash" keeps every function: refused at the row that crosses the limit, before int64 sums.
        ("hash", ["t"], 3, "12 invocations up to this line is more than the 10 this tool holds"),
        ("top", ["t", "u"], None, "12 invocations in the top 2 functions is more than the 10"),
    ],
)
def test_more_invocations_than_fit_in_memory_are_refused(
    write_file: WriteFile,
    monkeypatch: pytest.MonkeyPatch,
    mapping: str,
    tasks: list[str],
    line: int | None,
    problem: str,
) -> None:
    monkeypatch.setattr(azure_functions, "MAX_REQUESTS", 10)
    path = write_file("fn.csv", HEADER + "o,a,f,http,4,4,0,0\no,a,g,http,0,0,4,0\n")
    with pytest.raises(TraceFormatError, match=problem) as err:
        read_azure_functions_csv(path, tasks, mapping=mapping)
    assert err.value.line == line
    # "top" drops the functions past the K tasks: their invocations do not count.
    assert read_azure_functions_csv(path, ["t"]).num_requests == 8
