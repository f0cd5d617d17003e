"""Helpers of the CLI's input-check tests: a stand-in for slow work that must not start, and
the one-line error every refusal must be."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["never", "one_line_error"]


def never(step: str) -> Any:
    """A stand-in for `step` (the simulation, the agent) that fails the test if it is reached:
    bad input must be refused before it starts."""

    def reached(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError(f"{step} started before the input was checked")

    return reached


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, checked to be one `dartfl: error:` line and no traceback."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("dartfl: error: ")
    return err.strip()
