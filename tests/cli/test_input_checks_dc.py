"""`dartfl dc sim`: bad input exits 2 with one line naming the flag, before any simulating (the
simulator replaced by one that fails the test if it is reached); inputs that only show as a
run too long to finish end it with the same kind of line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import dartfl.datacenter
from dartfl.cli import dc_cmd
from dartfl.cli.main import main
from dartfl.datacenter import simulator
from dartfl.store import RunStore
from tests.cli_fixtures import never, one_line_error

QUICK = ["dc", "sim", "--gpus", "8", "--steps", "2", "--no-plot", "--no-store"]


@pytest.fixture
def no_simulating(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dartfl.datacenter, "simulate", never("the simulation"))


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize("cost", ["1e300", "1e7", "3601", "inf", "nan", "-1"])
def test_a_switch_cost_beyond_an_hour_exits_2_before_simulating(
    capsys: pytest.CaptureFixture[str], cost: str
) -> None:
    # 1e300 ticked through the dead time second by second, for ever, its series growing.
    assert main([*QUICK, "--policy", "verl-dynamic", "--switch-cost-s", cost]) == 2
    assert "--switch-cost-s must be a number of seconds from 0 to 3600 (published role switches " in (
        one_line_error(capsys)
    )


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize("steps", ["99999999999999999999999", "1000001", "0"])
def test_steps_beyond_a_million_exit_2_before_simulating(
    capsys: pytest.CaptureFixture[str], steps: str
) -> None:
    # 10^23 steps ran until memory ran out.
    assert main([*QUICK, "--steps", steps]) == 2
    assert f"--steps must be an integer from 1 to 1,000,000, got {steps}" in one_line_error(capsys)


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize("gpus", ["10000000000", "100001", "1"])
def test_gpus_beyond_a_hundred_thousand_exit_2_before_simulating(
    capsys: pytest.CaptureFixture[str], gpus: str
) -> None:
    # With one prompt a step the batch limit let any cluster through: 10^8 GPUs took a minute a
    # step, 10^12 a numpy MemoryError (7.28 TiB) from DART's candidate splits.
    assert main([*QUICK, "--gpus", gpus, "--batch-prompts", "1", "--policy", "dart"]) == 2
    assert one_line_error(capsys).endswith(f"--gpus must be an integer from 2 to 100,000, got {gpus}")


def test_the_largest_cluster_allowed_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dc", "sim", "--gpus", "100000", "--batch-prompts", "1", "--steps", "1", "--no-store"]
    assert main([*argv, "--policy", "dart", "--json"]) == 0
    assert '"steps": 1' in capsys.readouterr().out


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--median-tokens", "0"], "--median-tokens must be a number >= 1, got 0"),  # was "median length"
        (["--median-tokens", "nan"], "--median-tokens must be a number >= 1, got nan"),
        (["--max-tokens", "0"], "--max-tokens must be an integer >= 1, got 0"),  # was "max length"
        # ran, every length clipped to 0 tokens
        (["--lengths", "trace", "--max-tokens", "0"], "--max-tokens must be an integer >= 1, got 0"),
    ],
)
def test_length_bounds_name_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], complaint: str
) -> None:
    assert main([*QUICK, "--policy", "dart", *flags]) == 2
    assert one_line_error(capsys) == f"dartfl: error: {complaint}"


@pytest.mark.usefixtures("no_simulating")
def test_median_tokens_with_trace_lengths_exits_2_instead_of_being_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The trace sets the lengths: 100 and 5,000 gave the same numbers as no --median-tokens.
    assert main([*QUICK, "--lengths", "trace", "--median-tokens", "100"]) == 2
    assert one_line_error(capsys).endswith(
        "--median-tokens applies to --lengths lognormal, not --lengths trace (the trace gives the "
        "lengths); drop --median-tokens"
    )


@pytest.mark.parametrize(
    ("limit", "value", "complaint"),
    [
        ("MAX_SPAN_S", 100.0, "dart: the run passed 100 simulated seconds at step "),
        ("MAX_PERIODS", 3, "dart: the run passed 3 control periods of 10 s at step "),
    ],
)
def test_a_run_too_long_to_finish_exits_2_with_what_to_lower(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    value: float,
    complaint: str,
) -> None:
    # The last resort for inputs each within bounds (the limits are lowered here to keep the
    # test short): a run of more simulated time or control periods than the limits ends.
    monkeypatch.setattr(simulator, limit, value)
    assert main([*QUICK, "--steps", "50", "--policy", "dart"]) == 2
    err = one_line_error(capsys)
    assert complaint in err and "of 50, more than the simulator runs; " in err
    assert "lower --steps, --switch-cost-s, --group-size, --batch-prompts or the token lengths" in err


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (  # was numpy's _ArrayMemoryError (93 GiB)
            ["--max-tokens", "99999999999"],
            "--max-tokens 99,999,999,999: a sequence of up to 100,000,000,511 tokens (with --prompt-tokens "
            "512) does not fit the 920,758-token KV cache of one 7b rollout engine; lower --max-tokens or "
            "--prompt-tokens",
        ),
        (  # was "ValueError: Maximum allowed dimension exceeded"
            ["--prompt-tokens", "99999999999999999999999"],
            "--prompt-tokens 99,999,999,999,999,999,999,999 does not fit the 920,758-token KV cache of one "
            "7b rollout engine; lower --prompt-tokens",
        ),
        (  # the next three stalled after 10,001 simulated seconds, exit 1
            ["--median-tokens", "1000000", "--max-tokens", "1000000"],
            "--max-tokens 1,000,000: a sequence of up to 1,000,512 tokens",
        ),
        (
            ["--prompt-tokens", "10000000"],
            "--prompt-tokens 10,000,000 does not fit the 920,758-token KV cache",
        ),
        (
            ["--group-size", "100000"],
            "--group-size 100,000: a group's samples start together, but even with all 8 GPUs rolling "
            "out, their 8 engines hold at most 2,048 7b sequences of 1,024 tokens; lower --group-size, "
            "--prompt-tokens or --median-tokens, or add --gpus",
        ),
        (
            ["--group-size", "600", "--workload", "agentic", "--prompt-tokens", "300000"],
            "--group-size 600: a group's samples start together, but even with all 8 GPUs rolling out, "
            "their 8 engines hold at most 16 7b sequences of 450,000 tokens",
        ),
        (  # the cause was blamed on --gpus or --batch-prompts
            ["--group-size", "99999999999999999999999"],
            "(32 prompts x --group-size 99,999,999,999,999,999,999,999) is more than the 4,194,304 the "
            "simulator holds in memory; lower --group-size",
        ),
    ],
)
def test_lengths_and_groups_the_engines_cannot_hold_exit_2_before_simulating(
    capsys: pytest.CaptureFixture[str], flags: list[str], complaint: str
) -> None:
    assert main([*QUICK, "--policy", "dart", *flags]) == 2
    assert complaint in one_line_error(capsys)


def test_a_big_batch_names_the_flags_that_set_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QUICK, "--batch-prompts", "999999999"]) == 2
    assert one_line_error(capsys).endswith("holds in memory; lower --group-size or --batch-prompts")


def test_a_group_that_fits_the_engines_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # The group check refuses only what can never start: 2,048 slots hold a group of 2,000.
    assert main([*QUICK, "--policy", "sync", "--group-size", "2000", "--batch-prompts", "1", "--json"]) == 0
    assert '"steps": 2' in capsys.readouterr().out


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_a_plot_path_nothing_can_be_written_to_exits_2_before_simulating(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Root passes the permission check on /proc, so this was a FileNotFoundError traceback from
    # the image writer once every policy had run.
    argv = ["dc", "sim", "--gpus", "8", "--steps", "2", "--no-store", "--policy", "dart"]
    assert main([*argv, "--plot", "/proc/x.png"]) == 2
    assert "--plot /proc/x.png: cannot write into /proc" in one_line_error(capsys)


def test_a_failed_plot_write_is_one_line_and_leaves_no_run_in_the_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The run was recorded before the plot's write failed (with a traceback).
    def disk_full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dc_cmd, "plot_dc", disk_full)
    store, plot = tmp_path / "runs.db", tmp_path / "dc.png"
    argv = ["dc", "sim", "--gpus", "8", "--steps", "2", "--policy", "static:0.5"]
    assert main([*argv, "--store", str(store), "--plot", str(plot)]) == 2
    assert one_line_error(capsys) == (
        f"dartfl: error: --plot {plot}: cannot write the plot (No space left on device); pick a writable "
        "directory, or --no-plot"
    )
    with RunStore(store) as runs:
        assert runs.list_runs() == []


@pytest.mark.usefixtures("no_simulating")
def test_a_damaged_store_exits_2_before_simulating(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # It failed only when the finished run was recorded.
    store = tmp_path / "runs.db"
    store.write_text("not a database\n")
    argv = ["dc", "sim", "--gpus", "8", "--steps", "2", "--no-plot", "--policy", "dart"]
    assert main([*argv, "--store", str(store)]) == 2
    assert f"{store} is not an SQLite database, so not a run store" in one_line_error(capsys)


@pytest.mark.usefixtures("no_simulating")
@pytest.mark.parametrize(
    ("first", "again"),
    [("static:0.5", "static:0.50"), ("dart:kappa=1", "dart:kappa=1.0"), ("one-step:0.5", "one-step:f=0.5")],
)
def test_two_spellings_of_one_policy_exit_2_before_simulating(
    capsys: pytest.CaptureFixture[str], first: str, again: str
) -> None:
    # Both ran, the same simulation twice under two names.
    assert main([*QUICK, "--policy", first, "--policy", again]) == 2
    assert one_line_error(capsys).endswith(
        f"policy {again!r} sets the same knobs as {first!r}, so it is given twice; give each --policy once"
    )


def test_help_says_when_a_plot_is_written_and_what_the_switch_cost_does_not_touch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["dc", "sim", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: dartfl-dc.png; with --json, none unless given)" in text
    assert (
        "0 to 3600 s (default: by model size); not used by sync, whose offload/onload between phases "
        "is a fixed 3 s" in text
    )


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import ray_engine` fails: a spec must be refused before Ray and PyTorch load."""
    monkeypatch.setitem(sys.modules, "ray_engine", None)


@pytest.mark.usefixtures("no_ray")
def test_dc_run_lists_dart_with_only_the_knobs_the_ray_engine_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The list offered dart's smooth=W, which the Ray engine then refused.
    assert main(["dc", "run", "--policy", "one-step", "--no-store", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "unknown Ray engine policy 'one-step'; valid policies:" in err
    assert "  dart[:kappa=K,hysteresis=H,hold=P]  drift-plus-penalty" in err and "smooth" not in err


@pytest.mark.usefixtures("no_ray")
def test_dc_run_refuses_dart_smooth_as_an_unknown_knob_naming_the_valid_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["dc", "run", "--policy", "dart:smooth=0.5", "--no-store", "--no-plot"]) == 2
    assert one_line_error(capsys).endswith(
        "policy 'dart:smooth=0.5': unknown key 'smooth'; valid: kappa, hysteresis, hold"
    )


@pytest.mark.usefixtures("no_simulating")
def test_dc_sim_still_lists_dart_smooth(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QUICK, "--policy", "greedy"]) == 2
    assert "dart[:kappa=K,hysteresis=H,hold=P,smooth=W]" in capsys.readouterr().err
