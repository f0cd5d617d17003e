"""--target-load sizes a whole trace: a trace idle for most of its length, or a first window far
busier or quieter than the whole, is said in a warning (the load the user meant is not what runs)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dartfl.cli.main import main


def _trace(path: Path, times: list[float]) -> Path:
    path.write_text("time_s,task\n" + "".join(f"{t:g},a\n" for t in times))
    return path


def _warned(trace: Path, caplog: pytest.LogCaptureFixture, *extra: str) -> list[str]:
    """The warnings `dartfl sim --trace TRACE --target-load 0.3 EXTRA` gives about the load."""
    argv = ["sim", "--trace", str(trace), "--profile", "pi4", "--policy", "inference-only", "--no-store"]
    with caplog.at_level(logging.WARNING):
        assert main([*argv, "--target-load", "0.3", *extra]) == 0
    return [r.getMessage() for r in caplog.records if r.name == "dartfl.cli.workload_args"]


def test_a_trace_idle_for_most_of_its_length_is_said_with_the_load_its_busy_part_runs_at(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    days = _trace(tmp_path / "days.csv", [float(i) for i in range(1000)] + [86400.0 + i for i in range(1000)])
    [said] = _warned(days, caplog)
    assert said.startswith("the trace holds no request for 98% of its length")
    assert "--target-load 0.3 is its mean, so the rest runs at a load of about 13" in said


def test_a_first_window_far_from_the_whole_traces_rate_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    front = _trace(
        tmp_path / "front.csv", [i * 0.1 for i in range(3000)] + [300.0 + i * 10 for i in range(300)]
    )
    [said] = _warned(front, caplog, "--duration-s", "5")
    assert said.startswith("the first 5 s of the trace arrive at 6 times its mean rate")
    assert "a load of about 1.8, not 0.3" in said


def test_a_steady_trace_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    steady = _trace(tmp_path / "steady.csv", [i * 0.5 for i in range(2000)])
    assert _warned(steady, caplog, "--duration-s", "100") == []


def test_edge_replay_checking_its_flags_before_the_agent_is_up_says_nothing_yet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The stand-in sizing only checks the flags; the warning comes once, sized on the agent.
    from dartfl.cli.main import build_parser
    from dartfl.cli.replay_cmd import _workload_before_agent

    days = _trace(tmp_path / "days.csv", [float(i) for i in range(1000)] + [86400.0 + i for i in range(1000)])
    args = build_parser().parse_args(["edge", "replay", "--trace", str(days), "--target-load", "0.3"])
    with caplog.at_level(logging.WARNING):
        assert _workload_before_agent(args, None) is None
    assert [r for r in caplog.records if r.name == "dartfl.cli.workload_args"] == []
