"""The packaged Flower app (orchestration.flower_app): valid for Flower, code-free, equal to the
repository's own app in pyproject.toml, and written by `dartfl fl app DIR`."""

from __future__ import annotations

import importlib
import io
import tomllib
import zipfile
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk
from flwr.cli.config_utils import load_and_validate
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

import dartfl
from dartfl.cli.main import main
from orchestration.flower_app import (
    CLIENT_APP,
    INSTALLED_PACKAGES,
    REPOSITORY_PACKAGES,
    SERVER_APP,
    app_table,
    default_run_config,
    write_app,
)

ROOT = Path(__file__).resolve().parents[2]


def _repo_pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_repository_app_names_the_same_components_and_defaults() -> None:
    # `flwr run .` in a checkout and the packaged app must run the same thing with the same
    # defaults; a rename of a module, or a changed default, must change both.
    flwr_app = _repo_pyproject()["tool"]["flwr"]["app"]  # type: ignore[index]
    packaged = app_table()
    assert flwr_app["components"] == packaged["components"]
    assert flwr_app["publisher"] == packaged["publisher"]
    assert flwr_app["config"] == default_run_config()


def test_the_repository_package_list_is_the_one_pyproject_builds() -> None:
    include = _repo_pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]  # type: ignore[index]
    assert {pattern.rstrip("*") for pattern in include} == set(REPOSITORY_PACKAGES)


def test_a_checkout_imports_its_folders_under_their_own_names() -> None:
    # The wheel's names (dartfl_server...) are tests/test_wheel_contents.py's business.
    assert INSTALLED_PACKAGES == REPOSITORY_PACKAGES
    assert (SERVER_APP, CLIENT_APP) == ("server.server_app:app", "edge_client.client_app:app")


@pytest.mark.parametrize(("ref", "kind"), [(SERVER_APP, ServerApp), (CLIENT_APP, ClientApp)])
def test_the_components_are_the_apps(ref: str, kind: type) -> None:
    module, _, attribute = ref.partition(":")
    assert isinstance(getattr(importlib.import_module(module), attribute), kind)


def test_the_written_app_is_valid_for_flower_and_carries_no_code(tmp_path: Path) -> None:
    app = write_app(tmp_path / "dartfl")
    config, warnings = load_and_validate(app / "pyproject.toml")  # finds the component modules too
    assert warnings == []
    assert config["project"]["version"] == dartfl.__version__
    assert config["tool"]["flwr"]["app"]["config"] == default_run_config()
    fab = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(app)))
    assert [name for name in fab.namelist() if not name.startswith(".info/")] == ["pyproject.toml"]


def test_fl_app_writes_the_app_with_overridden_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "myapp"
    assert main(["fl", "app", str(target), "--set", "num-server-rounds=3", "--set", "policy=static:0.5"]) == 0
    assert "flwr run . --stream" in capsys.readouterr().out
    config = tomllib.loads((target / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert (config["num-server-rounds"], config["policy"]) == (3, "static:0.5")
    assert main(["fl", "app", str(target)]) == 2  # exists: not overwritten without --force
    assert "--force" in capsys.readouterr().err
    assert main(["fl", "app", str(target), "--force"]) == 0
    config = tomllib.loads((target / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config["num-server-rounds"] == default_run_config()["num-server-rounds"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [("no-such-key=1", "unknown run-config key"), ("num-server-rounds=0", "num-server-rounds must be >= 1")],
)
def test_fl_app_refuses_bad_defaults_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str, complaint: str
) -> None:
    assert main(["fl", "app", str(tmp_path / "app"), "--set", setting]) == 2
    assert complaint in capsys.readouterr().err
    assert not (tmp_path / "app").exists()
