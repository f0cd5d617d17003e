"""The BurstGPT request log: times, task assignment, failed requests kept, bad files."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from workloads.traces.burstgpt import read_burstgpt_csv
from workloads.traces.load import detect_format, load_trace

WriteFile = Callable[[str, str], Path]
RefusesFile = Callable[..., None]
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
ROWS = (
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"  # failed upstream: still an arrival
    "118,GPT-4,417,276,693,API log\n"
    "118.25,ChatGPT,100,10,110,API log\n"
)


def test_times_start_at_the_first_request_and_failed_requests_are_arrivals(write_file: WriteFile) -> None:
    arrivals = load_trace(write_file("burst.csv", HEADER + ROWS))
    np.testing.assert_allclose(arrivals.times_s, [0.0, 40.0, 113.0, 113.25], rtol=0, atol=1e-12)
    assert arrivals.duration_s == pytest.approx(113.25)


def test_tasks_come_from_request_tokens_modulo_the_task_count(write_file: WriteFile) -> None:
    path = write_file("burst.csv", HEADER + ROWS)
    assert detect_format(path) == "burstgpt"
    default = read_burstgpt_csv(path)
    assert default.task_names == ("digits", "fashion", "uci-digits")
    np.testing.assert_array_equal(default.tasks, [472 % 3, 1087 % 3, 417 % 3, 100 % 3])
    np.testing.assert_array_equal(read_burstgpt_csv(path, ["a", "b"]).tasks, [0, 1, 1, 0])


def test_a_gzipped_file_out_of_order_reads_sorted(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write(HEADER + "30,GPT-4,2,1,3,API log\n10,ChatGPT,1,1,2,API log\n")
    arrivals = load_trace(path, ["a", "b"])
    np.testing.assert_array_equal(arrivals.times_s, [0.0, 20.0])
    np.testing.assert_array_equal(arrivals.tasks, [1, 0])


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("", 1, "file is empty"),
        ("Timestamp,Model,Request tokens\n1,ChatGPT,3\n", 1, "expected 'Timestamp,Model,Request tokens,"),
        (HEADER, None, "no requests after the header"),
        (HEADER + "5,ChatGPT,472,18,490\n", 2, "expected 6 columns"),
        (
            HEADER + "5,ChatGPT,472,18,490,API log\nsoon,GPT-4,1,1,2,API log\n",
            3,
            "Timestamp 'soon' is not a number",
        ),
        (HEADER + "-1,GPT-4,1,1,2,API log\n", 2, "Timestamp must be finite and >= 0"),
        (HEADER + "1,GPT-4,many,1,2,API log\n", 2, "Request tokens 'many' is not a whole number"),
        (HEADER + "1,GPT-4,1,-4,2,API log\n", 2, "Response tokens must be >= 0"),
        (HEADER + "1,GPT-4,99999999999,1,2,API log\n", 2, "Request tokens 99999999999 is too large"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_the_problem(
    refuses_file: RefusesFile, text: str, line: int | None, problem: str
) -> None:
    refuses_file(read_burstgpt_csv, text, line, problem)
