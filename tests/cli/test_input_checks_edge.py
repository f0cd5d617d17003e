"""`dartfl edge run|profile|replay`: bad input exits 2 with one line before anything slow starts
(the data and the model, the measuring, a broker or an agent), each slow step replaced by one
that fails the test if it is reached."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from dartfl.cli import replay_cmd
from dartfl.cli.main import build_parser, main
from edge_client.agent import Agent, AgentConfig
from edge_client.core_pinning import available_cpus
from edge_client.runtime import ModelRuntime
from tests.cli_fixtures import never, one_line_error

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Agent, "create", never("the agent (data, model)"))


@pytest.fixture
def no_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ModelRuntime, "build", never("the measuring"))


class MeasuringError(Exception):
    """Raised where measuring would start: the checks before it have passed."""


@pytest.fixture
def measuring_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    def measuring(*_args: Any, **_kwargs: Any) -> None:
        raise MeasuringError

    monkeypatch.setattr(ModelRuntime, "build", measuring)


@pytest.mark.usefixtures("no_agent")
@pytest.mark.parametrize(
    ("model_dir", "complaint"),
    [
        ("a-file", "--model-dir {dir} is a file; give a directory"),
        ("a-file/sub", "--model-dir {dir} cannot be made (Not a directory)"),
    ],
)
def test_edge_run_refuses_a_model_dir_that_cannot_be_a_directory_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model_dir: str, complaint: str
) -> None:
    # A FileExistsError / NotADirectoryError traceback came once the model had loaded.
    (tmp_path / "a-file").write_text("")
    path = tmp_path / model_dir
    assert main(["edge", "run", "--broker", "mqtt://127.0.0.1:9", "--model-dir", str(path)]) == 2
    assert complaint.format(dir=path) in one_line_error(capsys)


@pytest.mark.usefixtures("no_measuring")
@pytest.mark.parametrize(
    ("output", "complaint"),
    [
        ("new/", "argument -o/--output: {tmp}/new/ names a directory; give a file name inside it"),
        ("a-dir", "-o {tmp}/a-dir is a directory"),
        ("a-file/x.toml", "a-file is a file, so no directory can be made there"),
    ],
)
def test_edge_profile_refuses_an_output_it_cannot_write_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, complaint: str
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    assert main(["edge", "profile", "--quick", "-o", f"{tmp_path}/{output}"]) == 2
    assert complaint.format(tmp=tmp_path) in one_line_error(capsys)


@pytest.mark.usefixtures("no_measuring")
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_edge_profile_refuses_an_output_under_a_place_no_directory_can_be_made(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Root may write anywhere, so only making the directory tells: after 8 s of measuring, once.
    assert main(["edge", "profile", "--quick", "-o", "/proc/nope/x.toml"]) == 2
    assert "/proc/nope" in one_line_error(capsys)


@pytest.mark.usefixtures("measuring_stops")
def test_edge_profile_makes_the_outputs_missing_directories_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(MeasuringError):
        main(["edge", "profile", "--quick", "-o", str(tmp_path / "new" / "parent" / "x.toml")])
    assert (tmp_path / "new" / "parent").is_dir()


@pytest.mark.usefixtures("no_measuring")
@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--cores", "0"], "--cores must lie in 1..{cpus} (the CPUs this process may use), got 0"),
        (["--cores", "-1"], "--cores must lie in 1..{cpus} (the CPUs this process may use), got -1"),
        (["--cores", "999"], "--cores must lie in 1..{cpus} (the CPUs this process may use), got 999"),
        (["--tasks", "digits,digits"], "--tasks must be a comma-separated list of unique names"),
    ],
)
def test_edge_profile_checks_cores_and_tasks_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], complaint: str
) -> None:
    assert main(["edge", "profile", "--quick", "-o", str(tmp_path / "p.toml"), *flags]) == 2
    assert complaint.format(cpus=len(available_cpus())) in one_line_error(capsys)


@pytest.mark.parametrize(
    ("flags", "complaint"),
    [
        (["--target-load", "0"], "target load must be a finite number > 0"),
        (["--target-load", "-1"], "target load must be a finite number > 0"),
        (["--target-load", "nan"], "target load must be a finite number > 0"),
        (["--rate", "10", "--target-load", "0.5"], "--rate and --target-load both set the mean rate"),
        (["--policy", "clairvoyant"], "policy 'clairvoyant' needs future arrivals"),
    ],
)
def test_replay_checks_target_load_and_policy_before_a_broker_or_an_agent_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], complaint: str
) -> None:
    # They were found 22-27 s later, by the agent or once its profile came; clairvoyant twice.
    monkeypatch.setattr(replay_cmd, "start_local_broker", never("a broker"))
    monkeypatch.setattr(replay_cmd, "_spawn", never("an agent"))
    argv = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "5", "--no-store"]
    assert main([*argv, *flags]) == 2
    assert complaint in one_line_error(capsys)


def test_replay_refuses_clairvoyant_in_the_words_of_the_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exception, match="needs future arrivals") as agent:
        AgentConfig(policy="clairvoyant")
    argv = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--policy", "clairvoyant"]
    assert main([*argv, "--no-store"]) == 2
    assert one_line_error(capsys) == f"dartfl: error: {agent.value}"


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def _edge_run_flags() -> set[str]:
    run = _subcommand(_subcommand(build_parser(), "edge"), "run")
    return {flag for action in run._actions for flag in action.option_strings if flag.startswith("--")}


def test_the_docs_flag_table_of_edge_run_lists_every_flag() -> None:
    text = (DOCS / "edge.md").read_text()
    table = text.split("## Flags of `dartfl edge run`", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(--[a-z-]+)`", table))
    assert _edge_run_flags() - {"--help"} - documented == set()


def test_edge_run_help_and_the_docs_say_the_same_of_publish_every_s_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # --help said "0: only after FL rounds", the docs "0 turns it off".
    assert main(["edge", "run", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    docs = " ".join((DOCS / "edge.md").read_text().split())
    for text in (help_text, docs):
        assert "0: never" in text
    assert "0 turns it off" not in docs and "only after FL rounds" not in help_text


@pytest.mark.usefixtures("no_measuring")
@pytest.mark.parametrize("width", ["1e9", "64.5", "inf"])
def test_edge_profile_checks_the_models_widest_width_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], width: str
) -> None:
    # fltask's "model width must be a number in (0, 64]" came after 5.5 s of data loading.
    assert main(["edge", "profile", "--quick", "-o", str(tmp_path / "p.toml"), "--width", width]) == 2
    expected = "> 0" if width == "inf" else "<= 64 (the widest model)"
    assert one_line_error(capsys) == f"dartfl: error: --width must be {expected}, got {float(width):g}"


def test_the_width_bound_is_the_models() -> None:
    import math

    from dartfl.cli.edge_cmd import MAX_WIDTH
    from dartfl.errors import ConfigError
    from fltask.model import MultitaskCNN

    with pytest.raises(ConfigError, match=rf"in \(0, {MAX_WIDTH:g}\]"):
        MultitaskCNN({"a": 10}, math.nextafter(MAX_WIDTH, math.inf))


@pytest.mark.usefixtures("no_measuring")
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_edge_profile_refuses_a_place_that_takes_no_new_file_before_measuring(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Root passes every permission check, so only making the file tells: it told after 9 s
    # of measuring, with a FileNotFoundError traceback.
    assert main(["edge", "profile", "--quick", "-o", "/proc/e.toml"]) == 2
    assert one_line_error(capsys) == (
        "dartfl: error: -o /proc/e.toml: cannot write into /proc (No such file or directory); "
        "pick a writable directory"
    )


@pytest.mark.usefixtures("measuring_stops")
def test_checking_the_output_up_front_leaves_no_file_and_keeps_an_existing_one(tmp_path: Path) -> None:
    new, old = tmp_path / "new.toml", tmp_path / "old.toml"
    old.write_text("name = 'kept'\n")
    for path in (new, old):
        with pytest.raises(MeasuringError):
            main(["edge", "profile", "--quick", "-o", str(path)])
    assert not new.exists() and old.read_text() == "name = 'kept'\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_edge_profile_says_in_one_line_when_writing_the_profile_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # /dev/full passes every check up front and refuses only the write: an OSError traceback
    # came after the measuring. The measuring is replaced by the built-in x86 figures.
    import contextlib
    from types import SimpleNamespace

    import edge_client.request_path
    import messaging.link
    from dartfl.profiles import get_profile
    from dartfl.types import RequestPathCost

    runtime = SimpleNamespace(calibrate=lambda **_kw: get_profile("x86-1core"), close=lambda: None)
    monkeypatch.setattr(ModelRuntime, "build", lambda *_a: runtime)
    broker = contextlib.nullcontext(SimpleNamespace(url="mqtt://127.0.0.1:9"))
    monkeypatch.setattr(replay_cmd, "start_local_broker", lambda: broker)
    monkeypatch.setattr(messaging.link, "connect", lambda *_a, **_k: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(edge_client.request_path, "measure_request_path", lambda *_a: RequestPathCost())
    assert main(["edge", "profile", "--quick", "-o", "/dev/full"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(
        "dartfl: failed: -o /dev/full: writing the measured profile failed (No space left on device); "
        "free space or pick another file, then measure again\n"
    )
    assert "Traceback" not in err
