"""`dartfl sim`: the scripted contract (`--json` keys), the table, recording, plots, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from dartfl.cli.main import main
from dartfl.profiles import get_profile, parse_profile
from dartfl.store import RunStore
from tests.dartfl.test_profiles import CONTRACT_EXAMPLE as PROFILE_TOML

CONTRACT_KEYS = {
    "policy",
    "requests",
    "completed",
    "rejected",
    "slo_attainment",
    "p50_latency_s",
    "p99_latency_s",
    "train_samples",
    "train_samples_per_task",
    "harvest_efficiency",
    "max_backlog",
    "decision_us_p50",
}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.01, 3000))
    path = tmp_path / "trace.csv"
    names = np.array(["digits", "fashion", "3"])[rng.integers(0, 3, times.size)]
    path.write_text("time_s,task\n" + "".join(f"{t:.6f},{k}\n" for t, k in zip(times, names, strict=True)))
    return path


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "edge.toml"
    path.write_text(PROFILE_TOML)
    return path


def run_json(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_json_contract_has_every_key_for_every_policy(
    trace: Path, profile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policies = ["dart", "inference-only", "static:0.5", "inference-first:4", "threshold", "proportional"]
    args = ["sim", "--trace", str(trace), "--target-load", "0.5", "--profile-file", str(profile_file)]
    args += ["--slo-ms", "250", "--seed", "1", "--json", "--no-store"]
    for p in policies:
        args += ["--policy", p]
    out = run_json(capsys, args)
    assert [r["policy"] for r in out["results"]] == policies
    for r in out["results"]:
        assert r.keys() >= CONTRACT_KEYS
        assert r["requests"] == 3000
        assert r["completed"] + r["rejected"] == 3000
        assert set(r["train_samples_per_task"]) == {"digits", "fashion", "3"}
        assert sum(r["train_samples_per_task"].values()) == r["train_samples"]
    by = {r["policy"]: r for r in out["results"]}
    assert by["inference-only"]["train_samples"] == 0
    assert by["dart"]["train_samples"] > 0


def test_target_load_rescales_the_trace(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "sim",
        "--trace",
        str(trace),
        "--profile",
        "pi4",
        "--policy",
        "inference-only",
        "--json",
        "--no-store",
    ]
    low = run_json(capsys, [*base, "--target-load", "0.2"])["results"][0]
    high = run_json(capsys, [*base, "--target-load", "0.8"])["results"][0]
    # Same requests, four times the pace: the horizon shrinks by four.
    assert low["horizon_s"] == pytest.approx(4 * high["horizon_s"], rel=1e-6)
    assert low["requests"] == high["requests"] == 3000


def test_same_seed_same_json(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sim", "--workload", "mmpp", "--duration-s", "60", "--profile", "pi5", "--json", "--no-store"]
    first = run_json(capsys, [*args, "--seed", "4"])["results"]
    second = run_json(capsys, [*args, "--seed", "4"])["results"]
    other = run_json(capsys, [*args, "--seed", "5"])["results"]
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("decision_us")} for r in rs]  # noqa: E731
    assert strip(first) == strip(second)
    assert strip(first) != strip(other)


def test_table_output_records_the_run_and_writes_the_plot(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "runs.sqlite"
    plot = tmp_path / "sim.png"
    args = ["sim", "--trace", str(trace), "--profile", "pi4", "--store", str(store), "--plot", str(plot)]
    assert main([*args, "--policy", "dart", "--policy", "inference-first:4"]) == 0
    out = capsys.readouterr().out
    assert "dart" in out and "inference-first:4" in out and "recorded as run 1" in out
    assert plot.stat().st_size > 10_000
    with RunStore(store) as runs:
        (info,) = runs.list_runs()
        assert info.kind == "sim"
        assert info.config["profile"] == "pi4" and not any(k.startswith("_") for k in info.config)
        # the profile as run, so that an edited or moved profile file cannot orphan the run
        assert parse_profile(tomllib.loads(info.config["profile_toml"])) == get_profile("pi4")
        results = runs.results(info.run_id)
        assert set(results) == {"dart", "inference-first:4"}
        decisions = runs.decisions(info.run_id, "dart")
        assert decisions and sum(d.trained_samples for d in decisions) == results["dart"]["train_samples"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--policy", "fastest", "--profile", "pi4"], "unknown policy"),
        (["--slo-ms", "-5", "--profile", "pi4"], "--slo-ms"),
        (["--profile", "pi9"], "pi9"),
        (["--profile-file", "/nonexistent/p.toml"], "p.toml"),
        # Each ran until killed: billions of control periods or rounds.
        (["--profile", "pi4", "--rate", "1e-9"], "control periods of 0.25 s, more than the 10,000,000"),
        (["--profile", "pi4", "--period-s", "1e-9"], "control periods of 1e-09 s"),
        (["--profile", "pi4", "--round-s", "1e-9"], "rounds of 1e-09 s"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    trace: Path, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--trace", str(trace), "--no-store", "--json", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert err.startswith("dartfl: error:")


def test_bad_trace_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,task\n0.1,a\noops,b\n")
    assert main(["sim", "--trace", str(bad), "--profile", "pi4", "--no-store"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "bad.csv:3" in err


def test_unix_time_trace_is_bad_input_not_a_decades_long_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    epoch = tmp_path / "epoch.csv"
    epoch.write_text("time_s,task\n1700000000.0,a\n1700000005.5,b\n")
    args = ["sim", "--trace", str(epoch), "--profile", "pi4", "--policy", "dart", "--json", "--no-store"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "looks like Unix time" in err and "subtract the first timestamp" in err


def test_missing_profile_is_bad_input(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--trace", str(trace), "--no-store"]) == 2
    assert "--profile" in capsys.readouterr().err


def test_help_says_a_profile_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--help"]) == 0
    assert "one of --profile or --profile-file is required" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("argv", "prog"), [(["sim", "--nope"], "dartfl sim"), (["fl", "sim", "--nope"], "dartfl fl sim")]
)
def test_an_unknown_flag_points_at_the_subcommands_help(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert f"unrecognized arguments: --nope (see `{prog} --help`)" in capsys.readouterr().err


def test_the_table_shows_an_undefined_harvest_as_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    # Requests that alone need the whole run leave no fluid training time: harvest is
    # undefined (null in JSON), and the table crashed formatting it.
    argv = ["sim", "--profile", "pi4", "--workload", "poisson", "--rate", "2000", "--duration-s", "5"]
    assert main([*argv, "--policy", "static:0.5", "--no-plot", "--no-store"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "static:0.5" in line)
    assert "-" in row.split()


def test_the_fleet_table_shows_an_undefined_harvest_as_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fleet", "--devices", "2", "--duration-s", "5", "--profile", "pi4", "--target-load", "20"]
    assert main([*argv, "--policy", "static:0.5", "--no-store"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "static:0.5" in line)
    assert "- / - / -" in row  # the harvest percentiles of devices without a fluid limit


def test_cores_runs_a_profile_on_fewer_cores_and_a_bad_count_is_bad_input(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "--trace", str(trace), "--target-load", "0.5", "--profile", "pi4", "--slo-ms", "250"]
    args += ["--policy", "dart", "--policy", "cores:2", "--json", "--no-store"]
    whole = {r["policy"]: r for r in run_json(capsys, args)["results"]}
    one = {r["policy"]: r for r in run_json(capsys, [*args, "--cores", "1"])["results"]}
    assert whole["dart"]["cores"] == 4 and one["dart"]["cores"] == 1
    assert whole["cores:2"]["mean_inference_cores"] == 2.0 and whole["cores:2"]["train_samples"] > 0
    assert "core_switches" not in one["dart"]  # one core: nothing to split, today's output
    assert main([*args, "--cores", "5"]) == 2
    assert "--cores must lie in 1..4 for profile 'pi4', got 5" in capsys.readouterr().err


def test_batch_hold_makes_the_simulator_wait_for_company_as_the_agent_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quick = tmp_path / "quick.toml"  # a width-1-like model: a full batch of 32 in 2.6 ms
    quick.write_text(
        'name = "quick"\n[inference]\nbatch-fixed-s = 0.001\nper-request-s = 0.00005\nmax-batch = 32\n'
        "[training]\nmicrobatch-fixed-s = 0.001\nper-sample-s = 0.0003\nmax-microbatch = 32\n"
    )
    args = ["sim", "--workload", "poisson", "--duration-s", "10", "--rate", "1000", "--profile-file"]
    args += [str(quick), "--slo-ms", "150", "--policy", "inference-only", "--json", "--no-store"]
    at_once = run_json(capsys, args)["results"][0]
    held = run_json(capsys, [*args, "--batch-hold"])["results"][0]
    assert at_once["p50_latency_s"] < 0.002
    assert 0.003 < held["p50_latency_s"] < 0.013  # at most one 10 ms hold and a batch behind it
    assert held["completed"] == at_once["completed"] == at_once["requests"]


def test_a_reader_that_goes_away_ends_the_output_quietly() -> None:
    """`dartfl sim --json | head`: the reader has gone before the table is written. No
    BrokenPipeError traceback, and the exit status of a process that SIGPIPE ended."""
    argv = ["sim", "--workload", "poisson", "--duration-s", "5", "--profile", "x86-1core"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dartfl.cli.main",
            *argv,
            "--policy",
            "inference-only",
            "--no-store",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # long before the simulation ends and the JSON is written
    proc.stdout = None
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err


@pytest.mark.parametrize("command", ["sim", "fleet"])
def test_a_task_cost_for_a_task_the_run_lacks_is_named(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt [inference.tasks.NAME] left its task on the default cost without a word (the
    reviewer's `nosuchtask` moved the run's requests by 14%); the warning names both sides."""
    costs = 'name = "typo"\n[inference]\nbatch-fixed-s = 0.004\nper-request-s = 0.002\nmax-batch = 32\n'
    costs += "[training]\nmicrobatch-fixed-s = 0.01\nper-sample-s = 0.006\nmax-microbatch = 32\n"
    task = "[inference.tasks.{}]\nper-request-s = 0.003\n"
    args = [command, "--duration-s", "10", "--tasks", "digits,fashion", "--json", "--no-store"]
    args += ["--policy", "inference-only", "--profile-file"]
    if command == "sim":
        args = [*args[:1], "--workload", "poisson", *args[1:]]
    typo, right = tmp_path / "typo.toml", tmp_path / "right.toml"
    typo.write_text(costs + task.format("fashoin"))
    right.write_text(costs + task.format("fashion"))
    assert main([*args, str(typo)]) == 0
    err = capsys.readouterr().err
    assert "profile 'typo' prices task(s) fashoin that this run does not have" in err
    assert "digits, fashion cost the default [inference]" in err
    assert main([*args, str(right)]) == 0
    assert "prices task(s)" not in capsys.readouterr().err
