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
