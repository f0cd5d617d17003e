"""Bad input from the command line reads as one line in the user's terms: the file once, the
flag or TOML key they wrote (never a Python identifier), and the fix."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

import orchestration.agent_watch
from dartfl.cli import replay_cmd
from dartfl.cli.main import main
from dartfl.policies import EDGE_POLICIES
from tests.dartfl.test_profiles import CONTRACT_EXAMPLE as PROFILE_TOML
from tests.store_fixtures import damaged_copy, healthy_store
from workloads.registry import GENERATOR_NAMES

README = Path(__file__).resolve().parents[2] / "README.md"
# Python spellings that once leaked into generator messages.
IDENTIFIERS = ("duration_s", "rate_per_s", "rotate_s", "zipf_s", "zipf exponent", "rotation period must")


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("dartfl: error: ")
    return err.removeprefix("dartfl: error: ").rstrip("\n")


def _never(step: str) -> Any:
    def reached(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError(f"{step} started before the run store was checked")

    return reached


# --- profile files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "complaint"),
    [
        (
            "count = 2\ninference-speedup = [2.0, 1.59]",
            "cores.inference-speedup must be a list of at least 2 speedups starting at 1.0",
        ),
        ("count = 0", "cores.count must be an integer >= 1 (e.g. count = 4), got 0"),
        ("count = 2\ninference-speedup = [1.0, inf]", "cores.inference-speedup must be"),
    ],
)
def test_a_bad_cores_table_names_the_profile_file_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cores: str, complaint: str
) -> None:
    path = tmp_path / "cores_not1.toml"
    path.write_text(PROFILE_TOML + "[cores]\n" + cores + "\n")
    argv = ["sim", "--workload", "poisson", "--duration-s", "2", "--profile-file", str(path), "--no-store"]
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"{path}: ") and line.count("cores_not1.toml") == 1, line
    assert complaint in line


def test_a_table_key_at_the_top_level_is_pointed_to_its_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # It was answered with "(did you mean request-path?)".
    path = tmp_path / "p.toml"
    path.write_text("per-request-s = 0.002\n" + PROFILE_TOML)
    argv = ["sim", "--workload", "poisson", "--duration-s", "2", "--profile-file", str(path), "--no-store"]
    with caplog.at_level(logging.WARNING, logger="dartfl.profiles"):
        assert main([*argv, "--json"]) == 0
    assert "ignoring unknown profile key per-request-s (did you mean inference.per-request-s?)" in caplog.text
    assert "request-path?" not in caplog.text


# --- generator flags ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--duration-s", "0"], "--duration-s"),
        (["--duration-s", "nan"], "--duration-s"),
        (["--rate", "0"], "--rate"),
        (["--rate", "-5"], "--rate"),
        (["--rotate-s", "0"], "--rotate-s"),
        (["--zipf", "-1"], "--zipf"),
        (["--duration-s", "1e9", "--rate", "1e9"], "--rate or --duration-s"),
        (["--param", "branching=2"], "--param branching"),
        (["--param", "kernel_s=-1"], "--param kernel-s"),
    ],
)
@pytest.mark.parametrize("command", ["generate", "sim"])
def test_generator_errors_name_the_flag_not_the_python_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flags: list[str], flag: str
) -> None:
    if command == "generate":
        argv = ["workload", "generate", "hawkes", *flags, "-o", str(tmp_path / "w.csv")]
    else:
        argv = ["sim", "--workload", "hawkes", "--profile", "pi4", "--no-store", *flags]
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert flag in line
    assert not any(name in line for name in IDENTIFIERS), line


def test_a_parameter_range_that_depends_on_the_duration_names_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["workload", "generate", "step", "--duration-s", "60", "--param", "at-s=70"]
    assert main([*argv, "-o", str(tmp_path / "w.csv")]) == 2
    line = _one_line_error(capsys)
    assert line == "step parameter at-s (--param at-s=...) must be in [0, 60] (the --duration-s), got 70.0"


# --- edge replay and the run store --------------------------------------------------------------


def test_replay_names_a_damaged_store_before_a_broker_or_an_agent_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It replayed the whole workload first, then found the store damaged.
    store = damaged_copy(healthy_store(tmp_path / "healthy.sqlite"), tmp_path, "truncated")
    monkeypatch.setattr(replay_cmd, "start_local_broker", _never("a broker"))
    monkeypatch.setattr(replay_cmd, "_spawn", _never("an agent"))
    monkeypatch.setattr(orchestration.agent_watch, "wait_for_agent", _never("waiting for an agent"))
    sim = ["sim", "--profile", "pi4", "--workload", "poisson", "--duration-s", "2", "--policy", "dart"]
    assert main([*sim, "--store", str(store)]) == 2
    said_by_sim = _one_line_error(capsys)
    assert f"{store} is damaged" in said_by_sim
    for where in (["--spawn-agent"], ["--broker", "mqtt://127.0.0.1:9"]):
        argv = ["edge", "replay", *where, "--workload", "poisson", "--duration-s", "2"]
        assert main([*argv, "--store", str(store)]) == 2
        assert _one_line_error(capsys) == said_by_sim


def test_sim_and_fleet_name_a_read_only_store_before_they_simulate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A read-only store (a read-only mount: root ignores file modes, so the kernel's answer is
    # stood in for) was found only when the finished run was recorded.
    import dartfl.cli.simulation
    import dartfl.sim.fleet
    from dartfl.store import connection

    store = healthy_store(tmp_path / "ro.sqlite")
    real_access = connection.os.access
    monkeypatch.setattr(
        connection.os, "access", lambda p, mode: mode != connection.os.W_OK and real_access(p, mode)
    )
    monkeypatch.setattr(dartfl.cli.simulation, "run_policies", _never("a simulation"))
    monkeypatch.setattr(dartfl.sim.fleet, "run_fleet", _never("a fleet simulation"))
    for argv in (
        ["sim", "--profile", "pi4", "--workload", "poisson", "--duration-s", "2", "--policy", "dart"],
        ["fleet", "--devices", "2", "--duration-s", "10", "--profile", "pi4", "--cores", "1"],
    ):
        assert main([*argv, "--store", str(store)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write {store}: the file or its directory is read-only" in err


# --- help and README ----------------------------------------------------------------------------


def test_top_level_help_says_runs_can_also_delete(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("runs ")]
    assert "delete" in line


@pytest.mark.parametrize("action", ["list", "show", "delete"])
def test_runs_help_names_every_default_store_location(
    capsys: pytest.CaptureFixture[str], action: str
) -> None:
    assert main(["runs", action, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    text = text.replace("- ", "-")  # argparse may break a line after a hyphen
    for place in ("$DARTFL_STORE", "per-user data dir", "$XDG_DATA_HOME/dartfl/runs.sqlite"):
        assert place in text
    assert "~/.local/share/dartfl/runs.sqlite" in text


def test_readme_lists_every_generator_and_every_policy() -> None:
    text = README.read_text(encoding="utf-8")
    generators = text.split("- Generators:", 1)[1].split("\n- ", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", generators)) == set(GENERATOR_NAMES)
    table = text.split("**Policies**", 1)[1].split("\n\n", 2)[1]
    specs = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    assert {re.split(r"[:\[]", spec, maxsplit=1)[0] for spec in specs} == set(EDGE_POLICIES.names)
    assert "`cores:<k>[,m]`" in table
