"""The Azure LLM inference trace: timestamps, task assignment, bad files, the bundled copy."""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from workloads.traces.azure_llm import MAX_TOKENS, read_azure_llm_csv, read_azure_llm_requests
from workloads.traces.load import BUNDLED_TRACE_NAME, bundled_azure_conv, load_trace

WriteFile = Callable[[str, str], Path]
RefusesFile = Callable[..., None]
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_seven_digit_fractions_are_kept_and_times_start_at_zero(write_file: WriteFile) -> None:
    path = write_file(
        "llm.csv",
        HEADER + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951691,396,109\n"
        "2023-11-16 18:16:00,5,1\n",
    )
    arrivals = read_azure_llm_csv(path)
    np.testing.assert_allclose(arrivals.times_s, [0.0, 4.3145791, 13.31941], rtol=0, atol=1e-9)


def test_tasks_come_from_context_tokens_modulo_the_task_count(write_file: WriteFile) -> None:
    path = write_file(
        "llm.csv",
        HEADER + "".join(f"2023-11-16 18:15:{i:02d}.5,{c},1\n" for i, c in enumerate([374, 396, 879, 91, 6])),
    )
    default = read_azure_llm_csv(path)
    assert default.task_names == ("digits", "fashion", "uci-digits")
    np.testing.assert_array_equal(default.tasks, [374 % 3, 396 % 3, 879 % 3, 91 % 3, 6 % 3])
    two = read_azure_llm_csv(path, ["a", "b"])
    np.testing.assert_array_equal(two.tasks, [0, 0, 1, 1, 0])


def test_offsets_t_separator_and_midnight_crossing(write_file: WriteFile) -> None:
    path = write_file(
        "llm.csv",
        HEADER
        + "2024-05-10T23:59:59.5+02:00,1,1\n2024-05-10 22:00:00.25Z,1,1\n2024-05-10 22:00:01+0000,1,1\n",
    )
    np.testing.assert_allclose(read_azure_llm_csv(path).times_s, [0.0, 0.75, 1.5])


def test_token_counts_are_available_in_time_order(
    write_file: WriteFile, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_file("llm.csv", HEADER + "2023-01-01 00:00:02,10,20\n2023-01-01 00:00:01,30,40\n")
    with caplog.at_level(logging.WARNING):
        requests = read_azure_llm_requests(path)
    np.testing.assert_array_equal(requests.times_s, [0.0, 1.0])
    np.testing.assert_array_equal(requests.context_tokens, [30, 10])
    np.testing.assert_array_equal(requests.generated_tokens, [40, 20])
    assert "out of time order" in caplog.text


BAD_FILES = [
    ("", 1, "file is empty"),
    ("2023-11-16 18:15:46.6805900,374,44\n", 1, "missing header"),
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n", 1, "unrecognised header"),
    (HEADER, None, "no requests after the header"),
    (HEADER + "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,374\n", 3, "expected 3 columns"),
    (HEADER + "yesterday,374,44\n", 2, "TIMESTAMP 'yesterday' is not a date-time"),
    (HEADER + "2023-11-16 18:15:46,1,1\n2023-13-16 18:15:46,374,44\n", 3, "not a valid date-time"),
    (HEADER + "2023-11-16 18:15:46,many,44\n", 2, "ContextTokens 'many' is not a whole number"),
    (HEADER + "2023-11-16 18:15:46,3,-4\n", 2, "GeneratedTokens must be >= 0"),
    (HEADER + "2023-11-16 18:15:46,3.5,4\n", 2, "ContextTokens '3.5'"),
    # Past int64 this was an OverflowError traceback once the rows were read.
    (
        HEADER + "2023-11-16 18:15:46.6805900,374,99999999999999999999\n",
        2,
        "GeneratedTokens 99999999999999999999 is too large: a request has at most 1,000,000,000 tokens",
    ),
    (HEADER + "2023-11-16 18:15:46,1000000001,4\n", 2, "ContextTokens 1000000001 is too large"),
]


@pytest.mark.parametrize(("text", "line", "problem"), BAD_FILES)
def test_bad_file_names_the_line_and_problem(
    refuses_file: RefusesFile, text: str, line: int | None, problem: str
) -> None:
    refuses_file(read_azure_llm_csv, text, line, problem)


def test_bad_task_names_are_a_config_error(write_file: WriteFile) -> None:
    path = write_file("llm.csv", HEADER + "2023-11-16 18:15:46,1,1\n")
    with pytest.raises(ConfigError, match="unique"):
        read_azure_llm_csv(path, ["a", "a"])


def test_bundled_trace_has_all_19366_requests_over_an_hour() -> None:
    arrivals = bundled_azure_conv()
    assert arrivals.num_requests == 19_366
    assert arrivals.duration_s == pytest.approx(3501.72, abs=0.01)
    assert arrivals.times_s[0] == 0.0
    assert arrivals.counts_per_task().sum() == 19_366


def test_bundled_trace_matches_an_independent_reading() -> None:
    # Read the CSV the way the project's public acceptance check does: microseconds, ContextTokens % K.
    resource = resources.files("workloads.data").joinpath("azure_llm_conv_2023.csv")
    with resources.as_file(resource) as path, open(path, newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    t0 = datetime.fromisoformat(rows[0][0][:26])
    times = np.array([(datetime.fromisoformat(r[0][:26]) - t0).total_seconds() for r in rows])
    tasks = np.array([int(r[1]) % 2 for r in rows])
    arrivals = bundled_azure_conv(("even", "odd"))
    np.testing.assert_allclose(arrivals.times_s, times, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(arrivals.tasks, tasks)
    assert arrivals.task_names == ("even", "odd")


def test_bundled_trace_carries_its_cc_by_attribution() -> None:
    readme = resources.files("workloads.data").joinpath("README.md").read_text(encoding="utf-8")
    for fact in ("CC-BY 4.0", "Splitwise", "ISCA 2024", "Azure/AzurePublicDataset", "Pratyush Patel"):
        assert fact in readme


def test_the_token_bound_itself_is_accepted(write_file: WriteFile) -> None:
    path = write_file("llm.csv", HEADER + f"2023-11-16 18:15:46,{MAX_TOKENS},{MAX_TOKENS}\n")
    assert read_azure_llm_requests(path).generated_tokens.tolist() == [MAX_TOKENS]


def test_the_bundled_trace_loads_by_name_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wheel installs the file under dartfl_workloads/: a user without a checkout has no path
    # to pass to --trace, and once could not reach it at all.
    monkeypatch.chdir(tmp_path)
    named = load_trace(BUNDLED_TRACE_NAME)
    bundled = bundled_azure_conv()
    np.testing.assert_array_equal(named.times_s, bundled.times_s)
    np.testing.assert_array_equal(named.tasks, bundled.tasks)


def test_a_file_named_like_the_bundled_trace_is_read_as_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / BUNDLED_TRACE_NAME).write_text("time_s,task\n0.5,a\n1.5,b\n")
    own = load_trace(BUNDLED_TRACE_NAME)
    assert len(own.times_s) == 2
