"""`dartfl workload generate|inspect|plot` and the shared workload flags (`arrivals_from_args`)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dartfl.cli.main import main
from dartfl.cli.workload_args import (
    WORKLOAD_NAMES,
    add_workload_arguments,
    arrivals_from_args,
    workload_config,
)
from dartfl.errors import ConfigError, TraceFormatError
from tests.profile_fixtures import SMALL
from workloads.registry import GENERATOR_NAMES
from workloads.rescale import offered_load
from workloads.traces.time_task import read_time_task_csv

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dartfl: error: ")
    return lines[0]


# ---- dartfl workload generate / inspect / plot ---------------------------------------------


def test_generate_writes_a_time_task_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.csv"
    argv = ["workload", "generate", "mmpp", "--rate", "20", "--duration-s", "300", "--tasks", "a,b"]
    code = main([*argv, "--zipf", "1", "--param", "burst=20", "--seed", "4", "-o", str(out)])
    assert code == 0
    assert "wrote" in capsys.readouterr().out
    arrivals = read_time_task_csv(out)
    assert arrivals.num_requests == pytest.approx(6000, rel=0.1)
    assert set(arrivals.task_names) == {"a", "b"}
    assert arrivals.times_s[-1] < 300.0


def test_generate_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.csv" for i in range(3)]
    for path, seed in zip(paths, ["7", "7", "8"], strict=True):
        argv = ["workload", "generate", "pareto-onoff", "--duration-s", "60", "--seed", seed, "-o", str(path)]
        assert main(argv) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workload", "generate", "bursty"], "unknown workload 'bursty'; valid workloads: poisson, mmpp"),
        (["workload", "generate", "mmpp", "--param", "bursts=3"], "unknown parameter 'bursts'"),
        (["workload", "generate", "mmpp", "--param", "burst"], "--param must look like KEY=VALUE"),
        (
            ["workload", "generate", "gamma", "--param", "cv=-1"],
            "gamma parameter cv (--param cv=...) must be in [0.001, 100], got -1.0",
        ),
        # 1/cv^2 was a ZeroDivisionError traceback.
        (
            ["workload", "generate", "gamma", "--param", "cv=1e-300", "--duration-s", "60"],
            "gamma parameter cv (--param cv=...) must be in [0.001, 100], got 1e-300",
        ),
        # These drew nothing and blamed --rate and --duration-s.
        (["workload", "generate", "gamma", "--param", "cv=1e10"], "gamma parameter cv (--param cv=...)"),
        (
            ["workload", "generate", "mmpp", "--param", "burst=1e308"],
            "mmpp parameter burst (--param burst=...) must be in [1, 1,000,000] (high rate / low rate)",
        ),
        # "ValueError: Maximum allowed size exceeded" tracebacks: 10^303 state changes.
        (
            ["workload", "generate", "mmpp", "--param", "high-s=1e-300", "--param", "low-s=1e-300"],
            "mmpp parameter high-s (--param high-s=...) must be in [0.001, 1e+09] seconds, got 1e-300",
        ),
        (
            ["workload", "generate", "pareto-onoff", "--param", "on-s=1e-300", "--param", "off-s=1e-300"],
            "pareto-onoff parameter on-s (--param on-s=...) must be in [0.001, 1e+09] seconds, got 1e-300",
        ),
        # A numpy overflow warning on stderr, then a file.
        (
            ["workload", "generate", "mmpp", "--param", "high-s=1e308"],
            "mmpp parameter high-s (--param high-s=...) must be in [0.001, 1e+09] seconds, got 1e+308",
        ),
        (
            [
                "workload",
                "generate",
                "mmpp",
                "--duration-s",
                "1e5",
                "--param",
                "high-s=0.001",
                "--param",
                "low-s=0.001",
            ],
            "mmpp: high-s 0.001 and low-s 0.001 over --duration-s 100000 make about 1e+08 state "
            "changes, more than the 10,000,000 this tool draws; raise --param high-s or --param low-s, "
            "or lower --duration-s",
        ),
        # Ran until killed: periods down to 1e-10 of their mean.
        (
            ["workload", "generate", "pareto-onoff", "--param", "alpha=1.0000000001"],
            "make up to 6e+11 state changes, more than the 10,000,000 this tool draws; "
            "raise --param alpha, on-s or off-s, or lower --duration-s",
        ),
        (
            ["workload", "generate", "diurnal", "--param", "period-s=1e-310"],  # a math domain error
            "diurnal parameter period-s (--param period-s=...) must be in [0.001, 1e+09] seconds, got 1e-310",
        ),
        (
            ["workload", "generate", "flash-crowd", "--param", "decay-s=1e308"],  # lam is NaN
            "flash-crowd parameter decay-s (--param decay-s=...) must be in (0, 1e+09] seconds, got 1e+308",
        ),
        (
            ["workload", "generate", "compound", "--param", "batch-cv=1e-300"],  # ZeroDivisionError
            "compound parameter batch-cv (--param batch-cv=...) must be 0 (Poisson sizes) or in [0.001, 100]",
        ),
        (
            ["workload", "generate", "poisson", "--rate", "0"],
            "poisson: the mean rate (--rate) must be a finite number",
        ),
        (["workload", "generate", "poisson", "--tasks", "a,,b"], "--tasks must be a comma-separated list"),
        (["workload", "generate", "poisson", "--seed", "-3"], "--seed: must be an integer >= 0"),
        # A header-only file, which sim and inspect then reject as having no requests.
        (["workload", "generate", "poisson", "--rate", "1e-9"], "poisson drew no requests at --rate 1e-09"),
    ],
)
def test_generate_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, "-o", str(tmp_path / "w.csv")]) == 2
    assert message in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "w.csv").exists()


def test_inspect_json_reports_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time_s,task\n" + "".join(f"{i / 2},{'ab'[i % 2]}\n" for i in range(40)))
    assert main(["workload", "inspect", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["format"] == "time-task"
    assert record["requests"] == 40
    assert record["task_counts"] == {"a": 20, "b": 20}
    assert record["duration_s"] == 19.5
    for key in ("mean_rate_per_s", "cv_1s", "cv_10s", "peak_to_mean_10s"):
        assert key in record


@pytest.mark.parametrize("times", [["0", "0", "0"], ["1e-320"]])
def test_inspect_json_gives_no_rate_for_a_trace_without_a_duration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], times: list[str]
) -> None:
    # All at one instant printed a rate of 0.0; a sliver of a second printed `Infinity`, which
    # is not JSON. No rate is null, as the run store keeps non-finite values.
    path = tmp_path / "t.csv"
    path.write_text("time_s,task\n" + "".join(f"{t},a\n" for t in times))
    assert main(["workload", "inspect", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert record["mean_rate_per_s"] is None and record["requests"] == len(times)


@pytest.mark.parametrize("command", ["inspect", "plot"])
def test_a_span_too_long_to_count_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "epoch.csv"  # timestamps, not offsets from the start
    path.write_text("time_s,task\n0,a\n1e9,a\n")
    extra = ["-o", str(tmp_path / "p.png")] if command == "plot" else []
    assert main(["workload", command, str(path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dartfl: error: {path}: 1e+09 s in 1-s bins") and "seconds from the start" in err


def test_inspect_bundled_azure_trace_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    trace = ROOT / "workloads" / "data" / "azure_llm_conv_2023.csv"
    assert main(["workload", "inspect", str(trace), "--tasks", "x,y"]) == 0
    out = capsys.readouterr().out
    assert "19,366" in out and "azure-llm" in out and "task x" in out


@pytest.mark.parametrize("style", [[], ["--lines"]])
def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str], style: list[str]) -> None:
    trace = tmp_path / "t.csv"
    assert main(["workload", "generate", "flash-crowd", "--duration-s", "120", "-o", str(trace)]) == 0
    out = tmp_path / "plots" / "t.png"
    assert main(["workload", "plot", str(trace), "-o", str(out), "--bin-s", "2", *style]) == 0
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000


@pytest.mark.parametrize("action", [["inspect"], ["plot"]])
@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ("0.5,a\nlater,b\n", ":3: time_s 'later' is not a number"),
        # Unix time read as offsets: a 54-year horizon, 25 GiB of 1-s bins before the fix.
        ("1700000000.0,a\n1700000005.5,b\n", ": the first arrival is at time_s=1700000000, which looks like"),
    ],
)
def test_bad_trace_file_exits_2_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str], rows: str, problem: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,task\n" + rows)
    extra = ["-o", str(tmp_path / "x.png")] if action == ["plot"] else []
    assert main(["workload", *action, str(bad), *extra]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{bad}{problem}" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["workload", "inspect", "{trace}"],
        ["sim", "--profile", "pi4", "--trace", "{trace}", "--no-store"],
        ["workload", "generate", "mmpp", "--param", "burst=1e308", "-o", "{out}"],
    ],
)
def test_overflowing_numbers_exit_2_with_one_line_and_no_warning(tmp_path: Path, argv: list[str]) -> None:
    # In a subprocess: the int64 counts segfaulted (exit 139), and numpy's overflow warnings go
    # to stderr only outside pytest, which captures them.
    trace = tmp_path / "af.csv"
    big = "9223372036854775807"
    trace.write_text(f"HashOwner,HashApp,HashFunction,Trigger,1,2,3\no,a,f,http,{big},{big},3\n")
    args = [a.format(trace=trace, out=tmp_path / "w.csv") for a in argv]
    code = f"import sys; from dartfl.cli.main import main; sys.exit(main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    line = _one_line_error(proc.stderr)
    if "generate" not in argv:
        assert f"{trace}:2: minute 1: count 9,223,372,036,854,775,807 is more than the 50,000,000" in line


def test_inspect_gives_no_burstiness_without_two_full_bins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One 10-s bin printed a CV of 0.000 and a peak/mean of 1.000: a perfectly steady trace.
    path = tmp_path / "t.csv"
    path.write_text("time_s,task\n1,a\n3,a\n")
    assert main(["workload", "inspect", str(path)]) == 0
    rows = {
        r.split("│")[1].strip(): r.split("│")[2].strip()
        for r in capsys.readouterr().out.splitlines()
        if "│" in r
    }
    assert rows["CV of 10-s counts"] == rows["peak/mean of 10-s counts"] == "-"
    assert rows["CV of 1-s counts"] == "0.707"  # three 1-s bins: defined
    assert main(["workload", "inspect", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["cv_10s"] is None and record["peak_to_mean_10s"] is None
    assert record["cv_1s"] == pytest.approx(0.5**0.5)


@pytest.mark.parametrize(
    ("times", "rate"),
    [
        (["1e-300", "2e-300"], "1e+300"),  # a 300-digit rate in fixed point
        (["0", "0"], "-"),  # no duration: "0.00 req/s" claimed a rate
        (["0.5", "2"], "1.00"),
    ],
)
def test_plot_title_and_inspect_give_a_compact_mean_rate(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    times: list[str],
    rate: str,
) -> None:
    from matplotlib.axes import Axes

    titles: list[str] = []
    set_title = Axes.set_title

    def record_title(ax: Axes, text: str, *args: Any, **kwargs: Any) -> Any:
        titles.append(text)
        return set_title(ax, text, *args, **kwargs)

    monkeypatch.setattr(Axes, "set_title", record_title)
    path = tmp_path / "t.csv"
    path.write_text("time_s,task\n" + "".join(f"{t},a\n" for t in times))
    assert main(["workload", "plot", str(path), "-o", str(tmp_path / "p.png")]) == 0
    assert titles == [f"t.csv: 2 requests, mean {rate} req/s"]
    assert main(["workload", "inspect", str(path)]) == 0
    assert f" {rate} req/s │" in capsys.readouterr().out


def test_missing_trace_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "inspect", str(tmp_path / "nope.csv")]) == 2
    assert "no such file" in _one_line_error(capsys.readouterr().err)


def test_plot_bad_bin_width_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n1,a\n")
    assert main(["workload", "plot", str(trace), "-o", str(tmp_path / "p.png"), "--bin-s", "0"]) == 2
    assert "bin width" in _one_line_error(capsys.readouterr().err)


def test_importing_the_command_module_stays_light() -> None:
    code = (
        "import sys, dartfl.cli.workload_cmd, dartfl.cli.workload_args; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'matplotlib', 'workloads')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ---- the shared workload flags -------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    return parser.parse_args(argv)


def test_workload_names_in_the_help_match_the_registry() -> None:
    assert WORKLOAD_NAMES == GENERATOR_NAMES


def test_the_fleet_defaults_in_the_help_match_the_fleet_workloads() -> None:
    from dartfl.cli import fleet_cmd
    from workloads import fleet

    assert (fleet_cmd.DEFAULT_MIX, fleet_cmd.ASSIGNMENTS) == (fleet.DEFAULT_MIX, fleet.ASSIGNMENTS)


def test_defaults_match_the_documented_ones() -> None:
    args = _parse([])
    assert (
        args.duration_s,
        args.rate,
        args.tasks,
        args.zipf,
        args.rotate_s,
        args.param,
        args.seed,
        args.target_load,
    ) == (600.0, 50.0, "digits,fashion,uci-digits", 0.0, None, [], 1, None)


def test_no_workload_source_is_an_error_saying_what_to_pass() -> None:
    with pytest.raises(ConfigError, match=r"pass --workload NAME .* or --trace FILE"):
        arrivals_from_args(_parse([]), None)


def test_trace_and_workload_are_mutually_exclusive() -> None:
    with pytest.raises(SystemExit):
        _parse(["--trace", "t.csv", "--workload", "mmpp"])


def test_generated_workload_from_flags() -> None:
    args = _parse(
        [
            "--workload",
            "hawkes",
            "--duration-s",
            "100",
            "--rate",
            "30",
            "--tasks",
            "p,q",
            "--zipf",
            "2",
            "--rotate-s",
            "50",
            "--param",
            "branching=0.5",
            "--seed",
            "9",
        ]
    )
    arrivals = arrivals_from_args(args, None)
    assert arrivals.duration_s == 100.0 and arrivals.task_names == ("p", "q")
    assert arrivals.num_requests == pytest.approx(3000, rel=0.15)
    again = arrivals_from_args(args, None)
    np.testing.assert_array_equal(arrivals.times_s, again.times_s)


def test_target_load_without_a_profile_is_an_error() -> None:
    with pytest.raises(ConfigError, match="--target-load needs a device profile"):
        arrivals_from_args(_parse(["--workload", "poisson", "--target-load", "0.5"]), None)


def test_target_load_sizes_a_generated_workload_keeping_its_duration() -> None:
    args = _parse(["--workload", "mmpp", "--duration-s", "300", "--zipf", "1", "--target-load", "0.5"])
    arrivals = arrivals_from_args(args, SMALL)
    assert arrivals.duration_s == 300.0
    assert offered_load(arrivals, SMALL) == pytest.approx(0.5, rel=0.03)


def test_target_load_rescales_a_trace_exactly(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n" + "".join(f"{i * 0.37:.3f},{'ab'[i % 2]}\n" for i in range(500)))
    arrivals = arrivals_from_args(_parse(["--trace", str(trace), "--target-load", "0.7"]), SMALL)
    assert arrivals.task_names == ("a", "b")  # the file's own tasks, not the --tasks default
    assert offered_load(arrivals, SMALL) == pytest.approx(0.7, rel=1e-12)


def test_rate_rescales_a_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n1,a\n2,a\n4,b\n")
    arrivals = arrivals_from_args(_parse(["--trace", str(trace), "--rate", "3"]), None)
    assert arrivals.mean_rate_per_s() == pytest.approx(3.0)


def test_tasks_flag_orders_a_trace_and_maps_azure_traces(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n1,b\n2,a\n")
    assert arrivals_from_args(_parse(["--trace", str(trace), "--tasks", "a,b,c"]), None).task_names == (
        "a",
        "b",
        "c",
    )
    llm = tmp_path / "llm.csv"
    llm.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    assert arrivals_from_args(_parse(["--trace", str(llm)]), None).task_names == (
        "digits",
        "fashion",
        "uci-digits",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--zipf", "1"], "--zipf only shape a --workload"),
        (["--rotate-s", "60", "--param", "burst=2"], "--rotate-s, --param only shape a --workload"),
        (["--duration-s", "0"], "--duration-s must be > 0"),
        (["--rate", "5", "--target-load", "0.5"], "pass only one of them"),
    ],
)
def test_generator_only_flags_with_a_trace_are_errors(tmp_path: Path, argv: list[str], message: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n1,a\n")
    with pytest.raises(ConfigError, match=message):
        arrivals_from_args(_parse(["--trace", str(trace), *argv]), SMALL)


def test_duration_with_a_trace_keeps_its_first_seconds_after_rescaling(tmp_path: Path) -> None:
    # `edge replay --trace T --duration-s S` replayed the whole trace (the flag was refused).
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n" + "".join(f"{t},a\n" for t in range(100)))
    first = arrivals_from_args(_parse(["--trace", str(trace), "--duration-s", "10.5"]), SMALL)
    assert first.num_requests == 11 and first.duration_s == 10.5
    # --rate 2 halves the trace's time axis (about 1 request/s now): 10.5 s then hold 21 requests.
    faster = arrivals_from_args(_parse(["--trace", str(trace), "--rate", "2", "--duration-s", "10.5"]), SMALL)
    assert faster.num_requests > first.num_requests


@pytest.mark.parametrize("seconds", ["99", "1000"])
def test_a_duration_as_long_as_the_trace_keeps_its_last_request(tmp_path: Path, seconds: str) -> None:
    # The trace ends on its last request (99 s); a half-open window of that length dropped it.
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,task\n" + "".join(f"{t},a\n" for t in range(100)))
    arrivals = arrivals_from_args(_parse(["--trace", str(trace), "--duration-s", seconds]), SMALL)
    assert arrivals.num_requests == 100


def test_rate_and_target_load_together_are_an_error_for_generators() -> None:
    with pytest.raises(ConfigError, match="pass only one of them"):
        arrivals_from_args(_parse(["--workload", "poisson", "--rate", "5", "--target-load", "0.5"]), SMALL)


def test_bad_trace_surfaces_as_trace_format_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("nonsense\n")
    with pytest.raises(TraceFormatError) as err:
        arrivals_from_args(_parse(["--trace", str(trace)]), None)
    assert err.value.line == 1


def test_workload_config_records_what_defines_the_workload(tmp_path: Path) -> None:
    config = workload_config(_parse(["--workload", "step", "--param", "factor=3", "--seed", "2"]))
    assert config == {
        "seed": 2,
        "target_load": None,
        "workload": "step",
        "duration_s": 600.0,
        "tasks": "digits,fashion,uci-digits",
        "zipf": 0.0,
        "rotate_s": None,
        "params": {"factor": 3.0},
        "rate": 50.0,
    }
    trace_config = workload_config(_parse(["--trace", str(tmp_path / "t.csv"), "--target-load", "0.5"]))
    assert trace_config == {"seed": 1, "target_load": 0.5, "trace": str(tmp_path / "t.csv")}
