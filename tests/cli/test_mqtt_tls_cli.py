"""Every MQTT-speaking command over TLS against a real Mosquitto (throwaway CA). The legitimate
flows run against the shipped production set-up (`dartfl broker setup`: its config and ACL,
client ids bound to accounts, a client certificate and a password for every account): a real
`dartfl edge run` agent serving a requester, `dartfl edge replay`, `dartfl record` and the
dashboard's live feed, each with its own account; a requester cannot make the agent publish
its reply elsewhere; wrong settings exit 2 with the cause."""

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

from dartfl import protocol
from dartfl.cli.main import build_parser, main
from dartfl.profiles import get_profile, profile_to_toml
from dartfl.store import RunStore
from messaging.brokers import BrokerHandle
from messaging.security import PASSWORD_ENV
from tests.messaging import mqtt_fixtures as fx
from tests.messaging import tls_fixtures as tls
from tests.messaging.production_fixtures import WATCHER, ProductionBroker, start_production_broker

pytestmark = pytest.mark.integration

DEVICE = "tls-agent"
ACCOUNTS = {
    "device": [DEVICE, "other-device"],
    "requester": ["tls-cli", "replayer"],
    "recorder": ["recorder"],
    "dashboard": ["dashboard"],
}


@pytest.fixture(scope="module")
def production(
    tls_files: tls.TlsFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProductionBroker]:
    broker = start_production_broker(
        tmp_path_factory.mktemp("prod"), tls_files, ACCOUNTS, require_certificate=True, watcher=True
    )
    yield broker
    broker.stop()


def _flags(broker: ProductionBroker, account: str) -> list[str]:
    files = broker.tls
    flags = [
        "--broker",
        broker.url,
        "--mqtt-ca-file",
        str(files.ca),
        "--mqtt-cert-file",
        str(files.client_cert),
    ]
    return [*flags, "--mqtt-key-file", str(files.client_key), "--mqtt-username", account]


@pytest.fixture(scope="module")
def agent(
    production: ProductionBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[str]]:
    """`dartfl edge run` as a process, logged in as its device's account, the password in the
    environment only."""
    work = tmp_path_factory.mktemp("agent")
    profile = work / "profile.toml"
    profile.write_text(profile_to_toml(get_profile("x86-1core")))  # known costs: no calibration
    args = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", *_flags(production, DEVICE)]
    args += ["--device", DEVICE, "--profile-file", str(profile), "--max-train", "300", "--telemetry-s", "0.2"]
    env = {**os.environ, PASSWORD_ENV: production.password(DEVICE), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1])["device"] == DEVICE  # its final report
    assert "broker refused" not in err, err[-2000:]  # none of its replies or telemetry


@pytest.fixture(scope="module")
def requester(production: ProductionBroker, agent: subprocess.Popen[str]) -> Iterator[fx.Requester]:
    """A requester account, once the agent answers it."""
    client = fx.Requester(production.url, "tls-cli", security=production.login("tls-cli"))
    image = np.zeros((28, 28), dtype=np.uint8)
    deadline = time.monotonic() + 180  # the agent loads data and exports its model first
    while True:
        assert agent.poll() is None, agent.stderr.read() if agent.stderr else "agent exited"
        try:
            reply, _ = client.ask(DEVICE, "digits", image)
            break
        except Exception:  # queue.Empty until the agent subscribes
            if time.monotonic() > deadline:
                raise
    assert reply.status == "ok" and reply.label is not None and 0 <= reply.label < 10
    assert client.reply_to == protocol.reply_topic("tls-cli")
    yield client
    client.close()


def test_the_agent_serves_a_requester_account_under_the_shipped_acl(requester: fx.Requester) -> None:
    reply, _ = requester.ask(DEVICE, "fashion", np.full((28, 28), 9, dtype=np.uint8))
    assert reply.status == "ok" and reply.task == "fashion"


def test_replay_and_recorder_work_each_with_its_own_account(
    production: ProductionBroker,
    requester: fx.Requester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, production.password("replayer"))
    replay = ["edge", "replay", *_flags(production, "replayer"), "--device", DEVICE, "--workload", "poisson"]
    replay += ["--duration-s", "3", "--rate", "20", "--json", "--no-store"]
    assert main(replay) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"] > 20
    assert summary["replies"] == summary["requests"] and summary["lost"] == 0
    assert summary["train_samples"] is not None  # it read the agent's telemetry too

    monkeypatch.setenv(PASSWORD_ENV, production.password("recorder"))
    store = tmp_path / "runs.sqlite"
    record = ["record", *_flags(production, "recorder"), "--store", str(store), "--duration-s", "2"]
    assert main([*record, "--flush-s", "0.5"]) == 0
    with RunStore(store) as runs:
        assert DEVICE in {d.device for d in runs.telemetry_devices()}


def test_the_dashboard_account_sees_the_agent_live(
    production: ProductionBroker, requester: fx.Requester
) -> None:
    from dashboard.feed import LiveFeed

    feed = LiveFeed(production.url, retry_s=0.5, security=production.login("dashboard"))
    try:
        deadline = time.monotonic() + 20
        while DEVICE not in feed.state().devices and time.monotonic() < deadline:
            time.sleep(0.05)
        state = feed.state()
        assert state.connected and state.error is None
        assert state.devices[DEVICE].snapshot.device == DEVICE and not state.devices[DEVICE].offline
    finally:
        feed.close()


def test_a_requester_cannot_have_the_agent_reflect_a_reply_onto_another_topic(
    production: ProductionBroker, requester: fx.Requester
) -> None:
    # The request asks for its reply on a topic of the requester's choosing. The broker would
    # refuse the device that write anyway (its ACL); the agent must not even try: it counts
    # the request as an error, which only its own telemetry shows.
    watcher = fx.Requester(production.url, WATCHER, security=production.login(WATCHER))
    watcher.link.subscribe("alerts/#")
    watcher.link.subscribe(protocol.telemetry_topic(DEVICE))
    try:
        errors_before = _next_snapshot(watcher).errors or 0
        obj = json.loads(protocol.encode_request("reflect", np.zeros((28, 28), np.uint8), requester.reply_to))
        obj["reply_to"] = "alerts/door"
        requester.send_raw(protocol.request_topic(DEVICE, "digits"), json.dumps(obj).encode())
        reply, _ = requester.ask(DEVICE, "digits", np.zeros((28, 28), np.uint8))  # served after it
        assert reply.status == "ok"
        deadline = time.monotonic() + 10
        while (_next_snapshot(watcher).errors or 0) < errors_before + 1:
            assert time.monotonic() < deadline, "the agent did not count the reflecting request"
    finally:
        watcher.close()


def _next_snapshot(watcher: fx.Requester) -> protocol.Telemetry:
    while True:
        _, message = watcher.wait_reply(10)
        assert not message.topic.startswith("alerts/"), "the agent published a reflected reply"
        if message.topic == protocol.telemetry_topic(DEVICE):
            return protocol.decode_telemetry(message.payload, message.topic)


def test_replay_with_an_account_that_may_not_send_requests_names_the_refused_topic(
    production: ProductionBroker,
    requester: fx.Requester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The recorder may read the agent's telemetry (so the replay finds it alive), not request.
    monkeypatch.setenv(PASSWORD_ENV, production.password("recorder"))
    replay = ["edge", "replay", *_flags(production, "recorder"), "--device", DEVICE, "--workload", "poisson"]
    assert main([*replay, "--duration-s", "2", "--rate", "5", "--no-store"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dartfl:")]
    assert f"the publish to 'dartfl/v1/{DEVICE}/req/" in line and "account 'recorder'" in line
    assert f"--requester recorder --device {DEVICE}" in line


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
