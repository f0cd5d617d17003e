"""`dartfl fl sim|deploy-local|run|app`: bad input exits 2 with one line before anything starts
(a SuperLink, Flower, agents), each slow step replaced by one that fails the test if reached."""

from __future__ import annotations

from pathlib import Path

import pytest

import orchestration.deploy_local
import orchestration.flower_processes
import orchestration.remote_run
from dartfl.cli.fl_cmd import _DEPLOY_OWNED, _SIM_OWNED
from dartfl.cli.main import main
from dartfl.errors import ConfigError
from edge_client.agent_config import AgentConfig
from tests.cli_fixtures import never, one_line_error
from tests.store_fixtures import damaged_copy, healthy_store


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orchestration.flower_processes, "LocalSuperLink", never("a SuperLink"))
    monkeypatch.setattr(orchestration.deploy_local, "deploy_local", never("a deployment"))
    monkeypatch.setattr(orchestration.remote_run, "submit_run", never("a submission"))


def _agents_refusal() -> str:
    with pytest.raises(ConfigError) as refused:
        AgentConfig(policy="clairvoyant")
    return f"dartfl: error: {refused.value}"


@pytest.mark.parametrize("directory", ["a-file/sub", "/proc/x"])
def test_fl_app_refuses_a_dir_that_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], directory: str
) -> None:
    # NotADirectoryError / FileNotFoundError tracebacks.
    if directory.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc")
    (tmp_path / "a-file").write_text("")
    target = Path(directory) if directory.startswith("/") else tmp_path / directory
    assert main(["fl", "app", str(target)]) == 2
    assert f"cannot write {target / 'pyproject.toml'}: " in one_line_error(capsys)


def test_fl_sim_names_a_damaged_store_at_once_as_sim_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It ran the whole simulation, then said only "the run of dart wrote no results".
    store = damaged_copy(healthy_store(tmp_path / "healthy.sqlite"), tmp_path, "truncated")
    sim = ["sim", "--profile", "pi4", "--workload", "poisson", "--duration-s", "5", "--policy", "dart"]
    assert main([*sim, "--store", str(store)]) == 2
    said_by_sim = one_line_error(capsys)
    assert main(["fl", "sim", "--clients", "2", "--rounds", "1", "--store", str(store)]) == 2
    assert one_line_error(capsys) == said_by_sim
    assert f"{store} is damaged" in said_by_sim


@pytest.mark.parametrize(
    "command", [["sim"], ["deploy-local"], ["run", "--superlink", "127.0.0.1:9", "--insecure"]]
)
@pytest.mark.parametrize("timeout_s", ["0", "-1", "nan", "inf"])
def test_fl_commands_refuse_a_timeout_that_is_not_a_positive_number(
    capsys: pytest.CaptureFixture[str], command: list[str], timeout_s: str
) -> None:
    assert (
        main(["fl", *command, "--no-store" if command == ["sim"] else "--json", "--timeout-s", timeout_s])
        == 2
    )
    expected = f"dartfl: error: --timeout-s must be a finite number > 0 (seconds), got {float(timeout_s):g}"
    assert one_line_error(capsys) == expected


def test_fl_app_refuses_the_policy_agents_refuse_in_their_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = _agents_refusal()
    assert main(["fl", "app", str(tmp_path / "app"), "--set", "policy=clairvoyant"]) == 2
    assert one_line_error(capsys) == refusal
    assert not (tmp_path / "app").exists()


def test_fl_deploy_local_refuses_the_policy_agents_refuse(capsys: pytest.CaptureFixture[str]) -> None:
    refusal = _agents_refusal()
    assert main(["fl", "deploy-local", "--policy", "clairvoyant"]) == 2
    assert one_line_error(capsys) == refusal


@pytest.mark.parametrize(("command", "owned"), [("sim", _SIM_OWNED), ("deploy-local", _DEPLOY_OWNED)])
def test_set_help_names_the_keys_the_command_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, owned: dict[str, str]
) -> None:
    # It said "any run-config key", and then refused policy, seed, store, ...
    monkeypatch.setenv("COLUMNS", "1000")  # no key broken at its hyphen
    assert main(["fl", command, "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "any run-config key" not in help_text
    assert "docs/fl-config.md" in help_text
    for key in owned:
        assert key in help_text
