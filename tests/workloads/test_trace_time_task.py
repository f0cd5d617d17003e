"""The generic `time_s,task` CSV: reading, writing, and each kind of bad file."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dartfl.arrivals import Arrivals
from dartfl.errors import ConfigError, TraceFormatError
from workloads.traces.time_task import read_time_task_csv, write_time_task_csv

WriteFile = Callable[[str, str], Path]
RefusesFile = Callable[..., None]


def test_reads_times_and_names_tasks_in_order_of_first_appearance(write_file: WriteFile) -> None:
    path = write_file("t.csv", "time_s,task\n0.5,fashion\n1.25,digits\n2,fashion\n")
    arrivals = read_time_task_csv(path)
    np.testing.assert_array_equal(arrivals.times_s, [0.5, 1.25, 2.0])
    assert arrivals.task_names == ("fashion", "digits")
    np.testing.assert_array_equal(arrivals.tasks, [0, 1, 0])
    assert arrivals.duration_s == 2.0


def test_integer_tasks_become_their_canonical_string(write_file: WriteFile) -> None:
    path = write_file("t.csv", "time_s,task\n0,2\n1,07\n2,7\n3,+2\n")
    arrivals = read_time_task_csv(path)
    assert arrivals.task_names == ("2", "7")
    np.testing.assert_array_equal(arrivals.tasks, [0, 1, 1, 0])


def test_given_task_names_fix_the_order(write_file: WriteFile) -> None:
    path = write_file("t.csv", "time_s,task\n0,b\n1,a\n")
    arrivals = read_time_task_csv(path, ["a", "b", "c"])
    assert arrivals.task_names == ("a", "b", "c")
    np.testing.assert_array_equal(arrivals.tasks, [1, 0])
    np.testing.assert_array_equal(arrivals.counts_per_task(), [1, 1, 0])


def test_task_outside_the_given_names_is_reported_at_its_line(write_file: WriteFile) -> None:
    path = write_file("t.csv", "time_s,task\n0,a\n1,zzz\n")
    with pytest.raises(TraceFormatError, match="'zzz' is not one of") as err:
        read_time_task_csv(path, ["a", "b"])
    assert err.value.line == 3


def test_unsorted_rows_are_sorted_and_logged(write_file: WriteFile, caplog: pytest.LogCaptureFixture) -> None:
    path = write_file("t.csv", "time_s,task\n3,a\n1,b\n2,a\n")
    with caplog.at_level(logging.WARNING):
        arrivals = read_time_task_csv(path)
    np.testing.assert_array_equal(arrivals.times_s, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(arrivals.tasks, [1, 0, 0])
    assert "out of time order" in caplog.text


def test_tolerates_bom_crlf_spaces_blank_lines_and_header_case(write_file: WriteFile) -> None:
    path = write_file("t.csv", "\ufeffTime_s , Task\r\n0.1 , a\r\n\r\n0.2,b\r\n")
    arrivals = read_time_task_csv(path)
    assert arrivals.task_names == ("a", "b")
    np.testing.assert_array_equal(arrivals.times_s, [0.1, 0.2])


def test_reads_gzip_files(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("time_s,task\n1,a\n")
    assert read_time_task_csv(path).num_requests == 1


BAD_FILES = [
    ("", 1, "file is empty"),
    ("\n\n", 1, "file is empty"),
    ("0.5,a\n1.0,b\n", 1, "missing header"),
    ("time,task\n0.5,a\n", 1, "unrecognised header 'time,task'"),
    ("time_s,task,extra\n0.5,a,1\n", 1, "unrecognised header"),
    ("time_s,task\n", None, "no requests after the header"),
    ("time_s,task\n0.5,a\n1.0\n", 3, "expected 2 columns"),
    ("time_s,task\n0.5,a\n1.0,b,c\n", 3, "expected 2 columns"),
    ("time_s,task\nsoon,a\n", 2, "time_s 'soon' is not a number"),
    ("time_s,task\n0.5,a\n-1,a\n", 3, "must be finite and >= 0"),
    ("time_s,task\nnan,a\n", 2, "must be finite"),
    ("time_s,task\n1,a\ninf,a\n", 3, "must be finite"),
    ("time_s,task\n1,\n", 2, "task is empty"),
    ('time_s,task\n1,"a\n', 2, "malformed CSV"),
]


@pytest.mark.parametrize(("text", "line", "problem"), BAD_FILES)
def test_bad_file_names_the_line_and_problem(
    refuses_file: RefusesFile, text: str, line: int | None, problem: str
) -> None:
    refuses_file(read_time_task_csv, text, line, problem)


def test_unix_timestamps_are_rejected_with_the_fix(write_file: WriteFile) -> None:
    # Read as offsets they would be a 54-year horizon: simulating or binning it never ends.
    path = write_file("epoch.csv", "time_s,task\n1700000005.5,b\n1700000000.0,a\n")
    with pytest.raises(TraceFormatError, match="time_s=1700000000, which looks like Unix time") as err:
        read_time_task_csv(path)
    assert "subtract the first timestamp" in str(err.value)


def test_a_late_but_plausible_first_arrival_is_kept(write_file: WriteFile) -> None:
    path = write_file("late.csv", "time_s,task\n86400,a\n86401,a\n")
    assert read_time_task_csv(path).times_s[0] == 86400.0


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such file") as err:
        read_time_task_csv(tmp_path / "nope.csv")
    assert err.value.line is None


def test_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="is a directory"):
        read_time_task_csv(tmp_path)


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(b"time_s,task\n\xff\xfe\x00\x81\n")
    with pytest.raises(TraceFormatError, match="not UTF-8"):
        read_time_task_csv(path)


def test_write_then_read_round_trips_times_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    times = np.sort(rng.uniform(0, 1000, 500))
    original = Arrivals(times, rng.integers(0, 2, 500), ("a,b", "plain"), 1000.0)
    path = tmp_path / "sub" / "w.csv"
    write_time_task_csv(original, path)
    back = read_time_task_csv(path, original.task_names)
    np.testing.assert_array_equal(back.times_s, original.times_s)
    np.testing.assert_array_equal(back.tasks, original.tasks)
    assert path.read_text().splitlines()[0] == "time_s,task"


def test_write_to_an_unwritable_place_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    arrivals = Arrivals(np.array([0.0]), np.array([0]), ("a",), 1.0)
    with pytest.raises(ConfigError, match="cannot write"):
        write_time_task_csv(arrivals, blocker / "w.csv")
