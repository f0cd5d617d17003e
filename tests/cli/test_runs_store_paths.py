"""The run store's path as given: a mistyped one is said, not read as an empty store; one too
long is one line, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.paths import STORE_ENV
from tests.cli_fixtures import one_line_error

LONG_NAME = "x" * 300  # past the 255 bytes a file name may have


@pytest.mark.parametrize("action", [["list"], ["list", "--json"], ["show", "1"], ["delete", "1"]])
def test_a_missing_store_given_by_store_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: list[str]
) -> None:
    path = tmp_path / "nosuch.sqlite"
    assert main(["runs", *action, "--store", str(path)]) == 2
    err = one_line_error(capsys)
    assert f"run store {path} (from --store) does not exist; check the path" in err
    assert "~/.local/share/dartfl/runs.sqlite" in err
    assert not path.exists()


def test_a_missing_store_given_by_the_environment_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nosuch.sqlite"
    monkeypatch.setenv(STORE_ENV, str(path))
    assert main(["runs", "list"]) == 2
    assert f"run store {path} (from ${STORE_ENV}) does not exist" in one_line_error(capsys)


def test_a_missing_default_store_lists_no_runs_and_says_none_is_made_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = tmp_path / "data" / "dartfl" / "runs.sqlite"
    assert main(["runs", "list"]) == 0
    assert capsys.readouterr().out.startswith(f"no run store yet at {default};")
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", "show", "1"]) == 2
    assert "does not exist: no run is recorded yet" in one_line_error(capsys)
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", "--store", LONG_NAME],
        ["runs", "show", "1", "--store", LONG_NAME],
        ["fleet", "--profile", "pi4", "--duration-s", "5", "--store", LONG_NAME],
    ],
)
def test_a_store_name_too_long_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    said = capsys.readouterr().err
    err = said.splitlines()[-1]  # fleet says a note first
    assert err.startswith("dartfl: error: ") and "Traceback" not in said
    assert f"run store {LONG_NAME}: the name is too long" in err and "pick a shorter one" in err
