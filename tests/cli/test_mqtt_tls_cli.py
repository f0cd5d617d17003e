"""Every MQTT-speaking command over TLS against a real Mosquitto (throwaway CA): a real
`dartfl edge run` agent behind a broker that wants a client certificate and a password,
requests to it, `dartfl edge replay` and `dartfl record` with the same flags, and the
dashboard's settings; wrong settings exit 2 with the cause."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dartfl.cli.main import build_parser, main
from dartfl.profiles import get_profile, profile_to_toml
from dartfl.store import RunStore
from messaging.brokers import BrokerHandle
from messaging.security import PASSWORD_ENV
from tests.messaging import mqtt_fixtures as fx
from tests.messaging import tls_fixtures as tls

pytestmark = pytest.mark.integration

DEVICE = "tls-agent"


def _flags(url: str | None, tls_files: tls.TlsFiles) -> list[str]:
    flags = ["--mqtt-ca-file", str(tls_files.ca), "--mqtt-cert-file", str(tls_files.client_cert)]
    flags += ["--mqtt-key-file", str(tls_files.client_key), "--mqtt-username", tls.CLIENT_USER]
    return (["--broker", url] if url else []) + flags


@pytest.fixture(scope="module")
def agent(
    strict_broker: BrokerHandle, tls_files: tls.TlsFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[str]]:
    """`dartfl edge run` as a process, its password in the environment only."""
    work = tmp_path_factory.mktemp("agent")
    profile = work / "profile.toml"
    profile.write_text(profile_to_toml(get_profile("x86-1core")))  # known costs: no calibration
    args = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", *_flags(strict_broker.tls_url, tls_files)]
    args += ["--device", DEVICE, "--profile-file", str(profile), "--max-train", "300", "--telemetry-s", "0.2"]
    env = {**os.environ, PASSWORD_ENV: tls.CLIENT_PASSWORD, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1])["device"] == DEVICE  # its final report


def _ask_until_served(url: str, tls_files: tls.TlsFiles, agent: subprocess.Popen[str]) -> None:
    requester = fx.Requester(url, "tls-cli", security=tls.client_login(tls_files))
    try:
        image = np.zeros((28, 28), dtype=np.uint8)
        deadline = time.monotonic() + 180  # the agent loads data and exports its model first
        while True:
            assert agent.poll() is None, agent.stderr.read() if agent.stderr else "agent exited"
            try:
                reply, _ = requester.ask(DEVICE, "digits", image)
                break
            except Exception:  # queue.Empty until the agent subscribes
                if time.monotonic() > deadline:
                    raise
        assert reply.status == "ok" and reply.label is not None and 0 <= reply.label < 10
    finally:
        requester.close()


def test_agent_replay_and_recorder_over_tls_with_client_certificate_and_login(
    strict_broker: BrokerHandle,
    tls_files: tls.TlsFiles,
    agent: subprocess.Popen[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    url = strict_broker.tls_url
    assert url is not None
    _ask_until_served(url, tls_files, agent)

    monkeypatch.setenv(PASSWORD_ENV, tls.CLIENT_PASSWORD)
    replay = ["edge", "replay", *_flags(url, tls_files), "--device", DEVICE, "--workload", "poisson"]
    replay += ["--duration-s", "3", "--rate", "20", "--json", "--no-store"]
    assert main(replay) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] > 20
    assert summary["replies"] == summary["requests"] and summary["lost"] == 0

    store = tmp_path / "runs.sqlite"
    record = [
        "record",
        *_flags(url, tls_files),
        "--store",
        str(store),
        "--duration-s",
        "2",
        "--flush-s",
        "0.5",
    ]
    assert main(record) == 0
    with RunStore(store) as runs:
        assert DEVICE in {d.device for d in runs.telemetry_devices()}


def test_a_wrong_ca_exits_2_naming_the_cause(
    tls_broker: BrokerHandle, tls_files: tls.TlsFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    url = tls_broker.tls_url
    assert url is not None
    args = [
        "edge",
        "replay",
        "--broker",
        url,
        "--mqtt-ca-file",
        str(tls_files.other_ca),
        "--workload",
        "poisson",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "wrong CA?" in err and len(err.strip().splitlines()) == 1


def test_record_gives_up_on_a_hostname_mismatch(
    tls_broker: BrokerHandle, tls_files: tls.TlsFiles, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = (tls_broker.tls_url or "").replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1
    args = [
        "record",
        "--broker",
        url,
        "--mqtt-ca-file",
        str(tls_files.ca),
        "--store",
        str(tmp_path / "s.sqlite"),
    ]
    assert main([*args, "--duration-s", "30", "--flush-s", "0.2"]) == 2
    assert "hostname mismatch" in capsys.readouterr().err


def test_every_mqtt_command_takes_the_same_security_flags() -> None:
    flags = ["--mqtt-ca-file", "ca.pem", "--mqtt-cert-file", "c.pem", "--mqtt-key-file", "k.pem"]
    flags += ["--mqtt-username", "dev-1"]
    for command in (["edge", "run"], ["edge", "replay"], ["record", "--broker", "mqtts://h"], ["dashboard"]):
        args = build_parser().parse_args([*command, *flags])
        got = (args.mqtt_ca_file, args.mqtt_cert_file, args.mqtt_key_file, args.mqtt_username)
        assert got == (Path("ca.pem"), Path("c.pem"), Path("k.pem"), "dev-1"), command


def test_dashboard_hands_tls_settings_to_the_app_but_not_the_password(
    tls_broker: BrokerHandle, tls_files: tls.TlsFiles, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dartfl.cli.dashboard_cmd import streamlit_command
    from dashboard.config import DashboardConfig
    from dashboard.feed import LiveFeed

    monkeypatch.setenv(PASSWORD_ENV, "only-in-the-environment")
    url = tls_broker.tls_url
    args = build_parser().parse_args(
        [
            "dashboard",
            "--store",
            str(tmp_path / "s.sqlite"),
            "--broker",
            str(url),
            "--mqtt-ca-file",
            str(tls_files.ca),
        ]
    )
    _, env = streamlit_command(args)
    cfg = DashboardConfig.from_env(env)
    assert cfg.mqtt_security is not None and cfg.mqtt_security.ca_file == tls_files.ca
    assert "only-in-the-environment" not in json.dumps(cfg.to_env())
    feed = LiveFeed(str(cfg.broker_url), retry_s=0.5, security=cfg.mqtt_security)
    try:
        deadline = time.monotonic() + 10
        while not feed.state().connected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed.state().connected, feed.state().error
    finally:
        feed.close()
