"""`dartfl dc sim|run`: bad input exits 2 with one line before anything runs (the contract
and the plots are tested in tests/dartfl/datacenter/test_dc_cli.py)."""

from __future__ import annotations

import pytest

from dartfl.cli.dc_cmd import MODEL_SIZE_NAMES
from dartfl.cli.main import main
from dartfl.datacenter.model import ALIASES, MODEL_SIZES, model_spec


@pytest.mark.parametrize("action", [["sim", "--gpus", "8"], ["run"]])
def test_negative_seed_exits_2_instead_of_a_numpy_traceback(
    capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    assert main(["dc", *action, "--seed", "-1", "--steps", "2", "--no-store", "--no-plot"]) == 2
    assert capsys.readouterr().err.strip() == "dartfl: error: --seed must be an integer >= 0, got -1"


def test_model_size_help_lists_every_accepted_size_and_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(MODEL_SIZE_NAMES) == set(MODEL_SIZES) | set(ALIASES)
    for name in MODEL_SIZE_NAMES:
        model_spec(name)
    with pytest.raises(SystemExit):
        main(["dc", "sim", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"model size, one of: {', '.join(MODEL_SIZE_NAMES)} (default 7b)" in text
