"""`dartfl dc sim|run`: bad input exits 2 with one line before anything runs (the contract
and the plots are tested in tests/dartfl/datacenter/test_dc_cli.py)."""

from __future__ import annotations

import pytest

from dartfl.cli.main import main


@pytest.mark.parametrize("action", [["sim", "--gpus", "8"], ["run"]])
def test_negative_seed_exits_2_instead_of_a_numpy_traceback(
    capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    assert main(["dc", *action, "--seed", "-1", "--steps", "2", "--no-store", "--no-plot"]) == 2
    assert capsys.readouterr().err.strip() == "dartfl: error: --seed must be an integer >= 0, got -1"
