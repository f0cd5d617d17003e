"""`dartfl dc sim|run`: bad input exits 2 with one line before anything runs (the contract
and the plots are tested in tests/dartfl/datacenter/test_dc_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dartfl.cli.dc_cmd import MODEL_SIZE_NAMES
from dartfl.cli.main import main
from dartfl.datacenter.model import ALIASES, MODEL_SIZES, model_spec
from dartfl.errors import DartflError
from dartfl.store import RunStore


@pytest.mark.parametrize(
    "argv",
    [
        ["dc", "sim", "--gpus", "8"],
        ["dc", "run"],
        ["sim", "--profile", "pi4"],
        ["fleet", "--profile", "pi4"],
        ["fl", "sim"],
        ["edge", "run"],
        ["edge", "profile"],
    ],
)
def test_a_negative_seed_exits_2_instead_of_a_numpy_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # One argparse type for every --seed, so no command can forget the check.
    assert main([*argv, "--seed", "-1"]) == 2  # main() turns argparse's exit into a code
    prog = "dartfl " + " ".join(a for a in argv if not a.startswith("-") and a not in ("8", "pi4"))
    expected = f"dartfl: error: argument --seed: must be an integer >= 0, got -1 (see `{prog} --help`)"
    assert capsys.readouterr().err.strip() == expected


def test_model_size_help_lists_every_accepted_size_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(MODEL_SIZE_NAMES) == set(MODEL_SIZES) | set(ALIASES)
    for name in MODEL_SIZE_NAMES:
        model_spec(name)
    assert main(["dc", "sim", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"model size, one of: {', '.join(MODEL_SIZE_NAMES)} (default 7b)" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["dc", "sim", "--gpus", "8", "--steps", "5", "--policy", "sync", "--policy", "sync"],
        [
            "sim",
            "--workload",
            "poisson",
            "--duration-s",
            "5",
            "--profile",
            "pi4",
            "--policy",
            "dart",
            "--policy",
            "dart",
        ],
        [
            "fleet",
            "--devices",
            "2",
            "--duration-s",
            "5",
            "--profile",
            "pi4",
            "--policy",
            "static:0.5",
            "--policy",
            "static:0.5",
        ],
    ],
)
def test_a_policy_given_twice_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    # Results are keyed by the spec: a repeat ran twice and the store kept one result, with the
    # decisions of both runs mixed under one name.
    assert main([*argv, "--no-store"]) == 2
    assert capsys.readouterr().err.strip().endswith("is given twice; give each --policy once")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--gpus", "100000000"], "--gpus must be an integer from 2 to 100,000, got 100000000"),
        (  # the largest cluster, with a batch over the limit (was a MemoryError at 10^8 GPUs)
            ["--gpus", "100000", "--group-size", "16"],
            "more than the 4,194,304 the simulator holds in memory; lower --group-size or --gpus (4 prompts "
            "per GPU) or --batch-prompts",
        ),
        (["--gpus", "8", "--period-s", "1e-6"], "--period-s must be a finite number >= 0.1"),  # ran for hours
    ],
)
def test_a_run_too_large_to_hold_or_finish_exits_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    assert main(["dc", "sim", "--steps", "5", *extra, "--no-store", "--no-plot"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_two_static_splits_that_run_the_same_gpus_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # static:0.47 and static:0.5 both run 8 of 16 GPUs: two identical rows under two names.
    argv = ["dc", "sim", "--gpus", "16", "--steps", "2", "--no-store", "--no-plot"]
    assert main([*argv, "--policy", "static:0.47", "--policy", "static:0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "dartfl: error: static:0.47 and static:0.5 both run 8 of 16 GPUs on rollout (splits move in "
        "engines of 1): the same run twice; give one of them"
    )


def test_a_static_split_that_cannot_be_met_says_what_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # static:0.99 ran 13 of 16 GPUs and static:0.01 one, each under the fraction asked for.
    argv = ["dc", "sim", "--gpus", "16", "--steps", "2", "--no-store", "--no-plot", "--json"]
    assert main([*argv, "--policy", "static:0.99", "--policy", "static:0.01", "--policy", "static:0.5"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line]
    assert warnings == [
        "dartfl: warning: static:0.99 runs 13 of 16 GPUs on rollout (0.812): the trainer keeps at least "
        "3 GPUs",
        "dartfl: warning: static:0.01 runs 1 of 16 GPUs on rollout (0.0625): rollout keeps at least one "
        "engine of 1 GPU",
    ]


def test_the_sweeps_best_split_is_named_by_what_it_ran(capsys: pytest.CaptureFixture[str]) -> None:
    # On 4 GPUs every fraction from 0.1 to 0.35 runs one GPU of four: that is static:0.25.
    argv = ["dc", "sim", "--gpus", "4", "--steps", "4", "--no-store", "--no-plot", "--json"]
    assert main([*argv, "--policy", "dart", "--sweep-static"]) == 0
    out = json.loads(capsys.readouterr().out)
    fractions = [point["fraction"] for point in out["static_sweep"]]
    assert fractions == [0.25, 0.5, 0.75][: len(fractions)] and 0.1 not in fractions
    for result in out["results"][1:]:
        assert float(result["policy"].partition(":")[2]) == result["rollout_gpu_fraction"]


def test_one_policy_that_fails_leaves_the_others_results_standing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A policy that stalled threw away every other policy's minutes of simulation with it.
    import dartfl.datacenter

    real = dartfl.datacenter.simulate

    def simulate(config: Any, policy: Any, *rest: Any) -> Any:
        if policy.name == "static:0.5":
            raise DartflError("static:0.5: the run stalled at t=12 s")
        return real(config, policy, *rest)

    monkeypatch.setattr(dartfl.datacenter, "simulate", simulate)
    store = tmp_path / "runs.sqlite"
    argv = ["dc", "sim", "--gpus", "16", "--steps", "2", "--no-plot", "--json", "--store", str(store)]
    assert main([*argv, "--policy", "static:0.5", "--policy", "sync"]) == 1
    out = capsys.readouterr()
    assert "dartfl: failed: static:0.5: the run stalled at t=12 s" in out.err
    report = json.loads(out.out)
    assert [r["policy"] for r in report["results"]] == ["sync"]
    assert report["failed"] == [{"policy": "static:0.5", "error": "static:0.5: the run stalled at t=12 s"}]
    with RunStore(store) as runs:
        run = runs.get_run(report["run_id"])
        assert run is not None and run.status == "failed" and run.config["failed"] == report["failed"]
        assert set(runs.results(report["run_id"])) == {"sync"}
    assert main([*argv, "--policy", "static:0.5"]) == 1  # nothing to show: the failure alone
    out = capsys.readouterr()
    assert out.out == "" and out.err == "dartfl: failed: static:0.5: the run stalled at t=12 s\n"
