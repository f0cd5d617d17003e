"""`dartfl workload` with the files users give it: pipes, the bundled trace's name, .gz
outputs, task names that must read back, long traces, failed writes and names too long."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dartfl.cli.main import main
from tests.cli_fixtures import one_line_error
from tests.pipe_fixtures import pipes

LONG_NAME = "x" * 300  # past the 255 bytes a file name may have


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("time_s,task\n" + "".join(f"{i * 0.25},{'ab'[i % 2]}\n" for i in range(200)))
    return path


@pytest.fixture
def pipe_path() -> Iterator[Any]:
    """pipe_path(data) -> a /dev/fd path, as `<(...)` or /dev/stdin gives, as a CLI argument."""
    with pipes() as feed:
        yield lambda data: str(feed(data))


def test_inspect_reads_a_trace_from_a_pipe(
    trace: Path, pipe_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source = pipe_path(trace.read_bytes())
    assert main(["workload", "inspect", source, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["file"], record["format"], record["requests"]) == (source, "time-task", 200)


def test_plot_and_sim_read_a_trace_from_a_pipe(
    tmp_path: Path, trace: Path, pipe_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.png"
    assert main(["workload", "plot", pipe_path(trace.read_bytes()), "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    argv = ["sim", "--trace", pipe_path(trace.read_bytes()), "--profile", "pi4", "--policy", "inference-only"]
    assert main([*argv, "--no-store", "--no-plot", "--json"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_inspect_names_the_bundled_trace_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no file called azure-conv here
    assert main(["workload", "inspect", "azure-conv", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["file"], record["format"], record["requests"]) == ("azure-conv", "azure-llm", 19366)
    assert main(["workload", "inspect", "azure-conv"]) == 0
    assert "azure-conv (azure-llm)" in capsys.readouterr().out


def test_generate_to_gz_writes_what_inspect_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.csv.gz"
    assert main(["workload", "generate", "poisson", "--duration-s", "5", "-o", str(out)]) == 0
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert main(["workload", "inspect", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["requests"] > 0


def test_generate_refuses_a_task_name_that_would_read_back_as_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "n.csv"
    assert (
        main(["workload", "generate", "poisson", "--tasks", "07,x", "--duration-s", "5", "-o", str(out)]) == 2
    )
    assert "task name '07' would read back from a time_s,task file as '7'" in one_line_error(capsys)
    assert not out.exists()


def test_inspect_summarizes_a_trace_of_121_days(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.csv"
    path.write_text(f"time_s,task\n0.5,a\n{60 * 86400},a\n{121 * 86400},a\n")
    assert main(["workload", "inspect", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["requests"], record["duration_s"], record["max_per_s"]) == (3, 121 * 86400, 1)
    # Plot draws every bin, so there the message names the flag that widens them.
    assert main(["workload", "plot", str(path), "-o", str(tmp_path / "p.png")]) == 2
    assert "use wider bins with --bin-s" in one_line_error(capsys)


def test_inspect_refuses_timestamps_naming_no_option_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "epoch.csv"
    path.write_text("time_s,task\n0,a\n1e9,a\n")
    assert main(["workload", "inspect", str(path)]) == 2
    err = one_line_error(capsys)
    assert err.endswith("check the times are seconds from the start")
    assert "bin" not in err.split(";")[-1] and "--bin-s" not in err


def _savefig_fails_half_way(fig: Any, fname: Any, **_kwargs: Any) -> None:
    with open(fname, "wb") as out:
        out.write(b"\x89PNG partial")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_plot_write_leaves_the_old_image_and_no_temporary(
    tmp_path: Path,
    trace: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    existing: bool,
) -> None:
    from matplotlib.figure import Figure

    out = tmp_path / "plots" / "p.svg"
    out.parent.mkdir()
    if existing:
        out.write_bytes(b"<svg>old</svg>")
    monkeypatch.setattr(Figure, "savefig", _savefig_fails_half_way)
    assert main(["workload", "plot", str(trace), "-o", str(out)]) == 2
    assert "No space left on device" in one_line_error(capsys)
    assert [p.name for p in out.parent.iterdir()] == (["p.svg"] if existing else [])
    if existing:
        assert out.read_bytes() == b"<svg>old</svg>"


@pytest.mark.parametrize(
    "argv",
    [
        ["workload", "plot", "TRACE", "-o", f"{LONG_NAME}.png"],
        ["workload", "generate", "poisson", "--duration-s", "5", "-o", f"{LONG_NAME}.csv"],
    ],
)
def test_an_output_name_too_long_is_one_line_naming_it(
    tmp_path: Path,
    trace: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([str(trace) if a == "TRACE" else a for a in argv]) == 2
    err = one_line_error(capsys)
    assert LONG_NAME in err and "the name is too long" in err and "pick a shorter one" in err


def test_replay_reads_a_piped_trace_for_both_of_its_loads(
    trace: Path, pipe_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `edge replay --trace <(...) --target-load L` loads the trace on a stand-in profile before
    # the agent is up and again on the agent's: the second load found the pipe empty.
    from dartfl.cli import replay_cmd
    from dartfl.cli.workload_args import arrivals_from_args
    from dartfl.profiles import get_profile

    loads: list[int] = []

    def two_loads(args: Any) -> int:
        assert replay_cmd._workload_before_agent(args, None) is None  # sized later, on the agent's
        loads.append(arrivals_from_args(args, get_profile("pi4")).num_requests)
        return 0

    monkeypatch.setattr(replay_cmd, "_run", two_loads)
    source = pipe_path(trace.read_bytes())
    assert main(["edge", "replay", "--spawn-agent", "--trace", source, "--target-load", "0.5"]) == 0
    assert loads == [200]


def test_generate_warns_when_the_quiet_end_is_not_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bursty source that ends in an OFF period read back 26 s long at 69 req/s, generated as
    # 60 s at 30 req/s, without a word.
    argv = ["workload", "generate", "pareto-onoff", "--duration-s", "60", "--rate", "30", "--seed", "7"]
    assert main([*argv, "-o", str(tmp_path / "bursty.csv")]) == 0
    err = capsys.readouterr().err
    assert "this workload lasts 25.99 s, not 60 s, at 69.49 req/s; its quiet last 34 s are not stored" in err
    steady = ["workload", "generate", "poisson", "--duration-s", "60", "--rate", "30", "--seed", "7"]
    assert main([*steady, "-o", str(tmp_path / "steady.csv")]) == 0
    assert capsys.readouterr().err == ""
