"""`dartfl edge profile|run|replay` from the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dartfl.cli import replay_cmd
from dartfl.cli.main import main
from dartfl.errors import ConfigError, DartflError
from dartfl.profiles import load_profile_toml
from messaging.brokers import BrokerHandle
from orchestration.agent_watch import wait_for_status
from tests.messaging import mqtt_fixtures as fx


@pytest.fixture
def broker() -> Iterator[BrokerHandle]:
    yield from fx.mosquitto_broker()


def test_profile_writes_a_toml_that_sim_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "edge.toml"
    assert (
        main(["edge", "profile", "--quick", "--max-train", "200", "-o", str(out), "--name", "test-box"]) == 0
    )
    profile = load_profile_toml(out)
    assert profile.name == "test-box"
    assert profile.inference.per_request_s > 0 and profile.training.per_sample_s > 0
    # Training a sample costs more than answering a request (forward + backward).
    assert profile.training.per_sample_s > profile.inference.per_request_s
    capsys.readouterr()
    args = ["sim", "--workload", "poisson", "--duration-s", "20", "--target-load", "0.5"]
    assert main([*args, "--profile-file", str(out), "--no-store", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]


TWO_CPUS = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


@pytest.mark.skipif(not TWO_CPUS, reason="needs two CPUs it may pin to")
def test_profile_with_cores_writes_a_cores_table_the_simulator_splits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "edge.toml"
    argv = ["edge", "profile", "--quick", "--max-train", "200", "--width", "0.5", "--cores", "2"]
    assert main([*argv, "-o", str(out)]) == 0
    profile = load_profile_toml(out)
    assert profile.cores.count == 2 and profile.cores.can_split
    capsys.readouterr()
    args = ["sim", "--workload", "poisson", "--duration-s", "20", "--target-load", "0.5"]
    assert main([*args, "--policy", "cores:1", "--profile-file", str(out), "--no-store", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["cores"] == 2


def test_profile_help_shows_where_it_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["edge", "profile", "--help"]) == 0
    assert "profile TOML to write (default edge-profile.toml)" in " ".join(capsys.readouterr().out.split())


def test_replay_needs_a_broker_or_a_spawned_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["edge", "replay", "--workload", "poisson", "--no-store"]) == 2
    assert "--spawn-agent" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # --seed: tests/cli/test_dc_cmd.py checks every command's, word for word
        (["run", "--round-target", "-1"], "--round-target must be >= 0, got -1"),
        (["run", "--publish-every-s", "-1"], "--publish-every-s must be >= 0, got -1"),
        (["run", "--publish-every-s", "inf"], "--publish-every-s must be >= 0, got inf"),
        (["run", "--slo-ms", "-5"], "--slo-ms must be > 0, got -5"),  # the flag and unit typed
        (["run", "--telemetry-s", "0"], "--telemetry-s must be > 0, got 0"),
        (["run", "--width", "nan"], "--width must be > 0, got nan"),
        (["run", "--queue-capacity", "0"], "--queue-capacity must be an integer >= 1, got 0"),
        (["profile", "--max-train", "0"], "--max-train must be an integer >= 1, got 0"),
        (["run", "--training-threads", "0"], "--training-threads must be an integer >= 1, got 0"),
    ],
)
def test_bad_agent_flags_exit_2_naming_the_flag_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # A broker nobody listens on: a check that came too late would fail differently.
    where = ["--broker", "mqtt://127.0.0.1:9"] if argv[0] == "run" else ["-o", str(tmp_path / "p.toml")]
    assert main(["edge", *argv, *where]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"dartfl: error: {message}"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policy", "nope", "--workload", "poisson"], "unknown policy 'nope'"),
        (["--workload", "nope"], "unknown workload 'nope'"),
        (["--trace", "/nonexistent/t.csv"], "no such file"),
        (["--workload", "poisson", "--slo-ms", "0"], "--slo-ms must be > 0, got 0"),
        (["--workload", "poisson", "--seed", "-1"], "--seed: must be an integer >= 0"),
        # --target-load waits for the agent's profile, but the rest is checked before it starts
        (["--workload", "poisson", "--target-load", "0.5", "--param", "x=1"], "unknown parameter 'x'"),
    ],
)
def test_replay_checks_its_flags_before_starting_a_broker_or_an_agent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    def no_broker() -> None:
        raise AssertionError("a broker was started before the flags were checked")

    monkeypatch.setattr(replay_cmd, "start_local_broker", no_broker)
    assert main(["edge", "replay", "--spawn-agent", "--no-store", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("code", "error"), [(2, ConfigError), (3, DartflError)])
def test_waiting_for_a_spawned_agent_stops_when_it_exits(
    monkeypatch: pytest.MonkeyPatch, code: int, error: type[Exception]
) -> None:
    waits = []

    def never_online(*_args: Any, **kwargs: Any) -> dict[str, Any]:
        waits.append(kwargs["timeout_s"])  # one wait, on one broker connection
        deadline = time.monotonic() + kwargs["timeout_s"]
        while time.monotonic() < deadline:
            kwargs["check"]()
            time.sleep(0.1)
        raise DartflError("did not report 'online'")

    monkeypatch.setattr("orchestration.agent_watch.wait_for_agent", never_online)
    script = f"import sys; sys.stderr.write('loading\\nbad flag --x\\n'); sys.exit({code})"
    with tempfile.TemporaryFile() as agent_log:
        agent = subprocess.Popen([sys.executable, "-c", script], stderr=agent_log)
        started = time.monotonic()
        with pytest.raises(error, match=f"^the spawned agent exited with code {code}: bad flag --x$"):
            replay_cmd._wait_for_spawned_agent(agent, agent_log, "mqtt://127.0.0.1:9", "edge-1")
    assert time.monotonic() - started < 30  # not the 120 s an agent may take to come online
    assert waits == [replay_cmd.AGENT_ONLINE_TIMEOUT_S]  # not a reconnect every second


@pytest.mark.integration
def test_replay_fails_at_once_when_the_spawned_agent_dies(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["edge", "replay", "--spawn-agent", "--workload", "poisson", "--duration-s", "2", "--no-store"]
    started = time.monotonic()
    assert main([*argv, "--agent-arg=--no-such-flag"]) == 2
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dartfl: error: the spawned agent exited with code 2: ")
    assert err[-1].endswith("unrecognized arguments: --no-such-flag (see `dartfl edge run --help`)")


@pytest.mark.integration
def test_agent_process_stops_cleanly_on_sigterm_and_reports(broker: BrokerHandle, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", "--broker", broker.url, "--device", "sig"]
    cmd += ["--max-train", "200", "--profile-file", str(_x86_profile(tmp_path))]
    agent = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        status = wait_for_status(broker.url, "sig", "online", timeout_s=60)
        assert status.profile is not None and status.profile.name == "x86-1core"
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, err.decode()[-2000:]
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["device"] == "sig" and report["rejected_at_shutdown"] == 0
    offline = wait_for_status(broker.url, "sig", "offline", timeout_s=10)
    assert offline.report is not None and offline.report.device == "sig"


def _x86_profile(folder: Path) -> Path:
    from dartfl.profiles import get_profile, profile_to_toml

    path = folder / "x86.toml"
    path.write_text(profile_to_toml(get_profile("x86-1core")))
    return path


def test_edge_run_without_a_broker_and_without_mosquitto_says_what_to_install_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # It used to start loading data, print a thread traceback and, 38 s later, "Connection
    # refused". Now: one line, before anything loads (a data load would take seconds).
    import messaging.brokers

    monkeypatch.setattr(messaging.brokers.shutil, "which", lambda *args, **kwargs: None)
    started = time.monotonic()
    assert main(["edge", "run", "--device", "lonely"]) == 1
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - started < 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("dartfl: failed: no --broker given, so the agent would start its own Mosquitto")
    assert "sudo apt-get install mosquitto" in err and "--broker mqtt://HOST:1883" in err


@pytest.mark.integration
def test_edge_run_without_a_broker_serves_through_its_own_mosquitto_and_stops_it(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", "--device", "solo", "--tasks", "digits"]
    cmd += ["--max-train", "200", "--publish-every-s", "0", "--profile-file", str(_x86_profile(tmp_path))]
    agent = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url, reply, out, _ = fx.ask_then_stop(agent, "solo", timeout_s=120)
    assert reply.status == "ok" and reply.label is not None and 0 <= reply.label <= 9
    assert agent.returncode == 0
    assert json.loads(out.strip().splitlines()[-1])["device"] == "solo"
    port = int(url.rsplit(":", 1)[1])
    from messaging.brokers import _probe_mqtt

    assert not _probe_mqtt(port)  # its private Mosquitto went with it


@pytest.mark.integration
def test_an_agent_started_before_its_broker_waits_for_it_then_serves(tmp_path: Path) -> None:
    # It exited after its connection attempts timed out ("not connected and subscribed").
    from messaging.brokers import free_port, start_mosquitto

    port = free_port()
    cmd = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", "--broker", f"mqtt://127.0.0.1:{port}"]
    cmd += ["--device", "early", "--max-train", "200", "--profile-file", str(_x86_profile(tmp_path))]
    log_path = tmp_path / "agent.log"
    with log_path.open("wb") as log_file:
        agent = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file)
    try:
        deadline = time.monotonic() + 120
        while "not reachable yet" not in log_path.read_text(errors="replace"):
            assert agent.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.2)
        time.sleep(6)  # past the 5 s the old wait allowed
        with start_mosquitto(port) as broker:
            wait_for_status(broker.url, "early", "online", timeout_s=30)
            agent.send_signal(signal.SIGTERM)
            agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0
    text = log_path.read_text()
    assert text.count("not reachable yet") == 1 and "MQTT 3.1.1" not in text
