"""Writing a `time_s,task` file whole or not at all, gzip and task names that read back as
written, traces read from a pipe, and the line of a byte that is not UTF-8."""

from __future__ import annotations

import errno
import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from tests.pipe_fixtures import pipes
from workloads.stats import summarize
from workloads.traces import time_task
from workloads.traces.load import load_trace, load_trace_and_format
from workloads.traces.time_task import read_time_task_csv, write_time_task_csv


def _arrivals(names: tuple[str, ...] = ("a", "b")) -> Arrivals:
    times = np.array([0.25, 1.5, 2.75, 4.0])
    return Arrivals(times, np.arange(4, dtype=np.int64) % len(names), names, 4.0)


class _DiskFullAfterOneRow:
    """A csv.writer whose output runs out of disk after the header and one row."""

    def __init__(self, handle: Any, **_kwargs: Any) -> None:
        self.handle = handle

    def writerow(self, row: Any) -> None:
        self.handle.write(",".join(row) + "\n")

    def writerows(self, _rows: Any) -> None:
        self.handle.write("0.25,a\n")
        self.handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("name", ["w.csv", "w.csv.gz"])
def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    path = tmp_path / name
    write_time_task_csv(_arrivals(), path)
    before = path.read_bytes()
    monkeypatch.setattr(time_task, "csv", SimpleNamespace(writer=_DiskFullAfterOneRow))
    with pytest.raises(ConfigError, match=r"cannot write .*No space left on device"):
        write_time_task_csv(_arrivals(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_failed_write_of_a_new_file_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time_task, "csv", SimpleNamespace(writer=_DiskFullAfterOneRow))
    with pytest.raises(ConfigError, match="No space left on device"):
        write_time_task_csv(_arrivals(), tmp_path / "new.csv")
    assert list(tmp_path.iterdir()) == []


def test_an_overwritten_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    write_time_task_csv(_arrivals(), path)
    path.chmod(0o640)
    write_time_task_csv(_arrivals(("x", "y")), path)
    assert (path.stat().st_mode & 0o777, read_time_task_csv(path).task_names) == (0o640, ("x", "y"))


def test_a_gz_name_is_written_gzipped_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "w.csv.gz"
    write_time_task_csv(_arrivals(), path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(path.read_bytes()).startswith(b"time_s,task\n0.25,a\n")
    back = load_trace(path)
    np.testing.assert_array_equal(back.times_s, _arrivals().times_s)
    assert back.task_names == ("a", "b")


@pytest.mark.parametrize(("name", "read_back"), [("07", "7"), ("+3", "3"), (" a", "a")])
def test_a_task_name_that_would_read_back_as_another_is_refused(
    tmp_path: Path, name: str, read_back: str
) -> None:
    with pytest.raises(
        ConfigError,
        match=re.escape(f"task name '{name}' would read back from a time_s,task file as '{read_back}'"),
    ):
        write_time_task_csv(_arrivals((name, "x")), tmp_path / "n.csv")
    assert list(tmp_path.iterdir()) == []


def test_canonical_integer_names_round_trip_and_given_names_match_them(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    write_time_task_csv(_arrivals(("7", "x")), path)
    assert read_time_task_csv(path).task_names == ("7", "x")
    # `--tasks 07,x` names the same tasks as the file's `7` (integers are canonicalised).
    assert read_time_task_csv(path, ["07", "x"]).task_names == ("7", "x")
    with pytest.raises(ConfigError, match="same integer task twice"):
        read_time_task_csv(path, ["7", "07"])


@pytest.fixture
def pipe_of() -> Iterator[Any]:
    """pipe_of(data) -> a /dev/fd path reading `data` from a pipe."""
    with pipes() as feed:
        yield feed


def test_a_trace_from_a_pipe_loads_as_from_a_file(tmp_path: Path, pipe_of: Any) -> None:
    path = tmp_path / "w.csv"
    write_time_task_csv(_arrivals(), path)
    kind, arrivals = load_trace_and_format(pipe_of(path.read_bytes()))
    assert kind == "time-task" and arrivals.num_requests == 4
    big = b"time_s,task\n" + b"".join(b"%d,a\n" % i for i in range(50_000))  # past the pipe's buffer
    assert load_trace(pipe_of(big)).num_requests == 50_000


def test_a_bad_trace_from_a_pipe_is_blamed_on_the_pipe_at_its_line(pipe_of: Any) -> None:
    fd_path = pipe_of(b"time_s,task\n1,a\nx,a\n")
    with pytest.raises(TraceFormatError) as caught:
        load_trace(fd_path)
    assert (caught.value.path, caught.value.line) == (str(fd_path), 3)


def _lines(count: int, bad_at: int, ending: bytes = b"\n") -> bytes:
    rows = [b"time_s,task"] + [b"%d,a" % i for i in range(1, count)]
    rows[bad_at - 1] += b"\xff"
    return ending.join(rows) + ending


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (_lines(10_000, 6000), 6000),  # past the text reader's first decoded block
        (_lines(100, 3), 3),
        (_lines(100, 1), 1),  # in the header
        (_lines(10_000, 7000, b"\r\n"), 7000),
        (_lines(10_000, 7000, b"\r"), 7000),
    ],
)
def test_a_byte_that_is_not_utf8_is_reported_at_its_line(tmp_path: Path, data: bytes, line: int) -> None:
    for path in (tmp_path / "t.csv", tmp_path / "t.csv.gz"):
        path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
        with pytest.raises(TraceFormatError, match="not UTF-8") as caught:
            load_trace(path)
        assert caught.value.line == line, path


def test_summary_of_a_trace_longer_than_ten_million_seconds(tmp_path: Path) -> None:
    # 121 days in 1-s bins: counting only the seconds that hold a request needs no huge array.
    day = 86400.0
    arrivals = Arrivals(
        np.array([0.5, 0.7, 60 * day, 121 * day]), np.zeros(4, dtype=np.int64), ("a",), 121 * day
    )
    summary = summarize(arrivals)
    assert (summary.requests, summary.max_per_s) == (4, 2)
    mean = 4 / (121 * day)
    squares = (2 - mean) ** 2 + 2 * (1 - mean) ** 2 + (121 * day - 3) * mean**2
    assert summary.cv_1s == pytest.approx(np.sqrt(squares / (121 * day)) / mean)
