"""`dartfl dc sim|run`: bad input exits 2 with one line before anything runs (the contract
and the plots are tested in tests/dartfl/datacenter/test_dc_cli.py)."""

from __future__ import annotations

import pytest

from dartfl.cli.dc_cmd import MODEL_SIZE_NAMES
from dartfl.cli.main import main
from dartfl.datacenter.model import ALIASES, MODEL_SIZES, model_spec


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
