"""The shipped production Mosquitto set-up (`dartfl broker setup`: config, ACL, accounts, TLS)
against a real broker: the attacks of issue 16 are refused, and each refusal is one a client
can see. Hostile clients are plain paho clients, with their own client ids and wills: an
attacker does not use messaging.link (which would bind its id to its account).

A test that shows nothing arrived orders its check after a message that must arrive: the
broker sends what a subscriber may read in the order it handles it, so a refused message that
had been delivered would come before the marker that follows it. A test that shows a
connection survived has it acknowledge a publish: a broker that closed it (a takeover is done
before the new client's CONNACK) can acknowledge nothing on it, and the client sees the close
first.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import paho.mqtt.client as paho
import pytest

from dartfl import protocol
from dartfl.protocol import DeviceStatus
from dashboard import synthetic
from messaging.link import MQTT_V5, MQTT_V311, Message, MqttLink, MqttSecurityError, Will, connect
from messaging.refusals import Refusal
from messaging.security import MqttSecurity
from tests.messaging import tls_fixtures as tls
from tests.messaging.production_fixtures import (
    WATCHER,
    Listener,
    ProductionBroker,
    RawClient,
    start_production_broker,
)

pytestmark = pytest.mark.integration

ACCOUNTS = {
    "device": ["pi-a", "pi-b"],
    "requester": ["app", "other-app"],
    "recorder": ["recorder"],
    "dashboard": ["dash"],
}
IMAGE = np.zeros((28, 28), dtype=np.uint8)


@pytest.fixture(scope="module")
def broker(tls_files: tls.TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionBroker]:
    started = start_production_broker(tmp_path_factory.mktemp("prod"), tls_files, ACCOUNTS, watcher=True)
    yield started
    started.stop()


def _device(broker: ProductionBroker, device: str, *, tls: bool = True) -> MqttLink:
    """A device as the agent connects: its requests, its offline will, its online status."""
    offline = protocol.encode_status(DeviceStatus(device, online=False))
    link = connect(
        broker.url if tls else broker.loopback_url,
        f"dartfl-agent-{device}",
        on_message=lambda m: None,
        subscriptions=[(protocol.request_subscription(device), 1)],
        will=Will(protocol.status_topic(device), offline),
        protocol=MQTT_V5,
        security=broker.login(device, tls=tls),
    )
    online = protocol.encode_status(DeviceStatus(device, online=True, t=time.time()))
    link.publish(protocol.status_topic(device), online, retain=True)
    assert link.flush() and link.refusal is None
    return link


def _snapshot(device: str, step: int = 0) -> bytes:
    return protocol.encode_telemetry(synthetic.snapshot(device, time.time(), step))


def _refusal(link: MqttLink, timeout_s: float = 10.0) -> Refusal:
    deadline = time.monotonic() + timeout_s
    while link.refusal is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert link.refusal is not None, "the broker acknowledged a publish its ACL should refuse"
    return link.refusal


def _as(broker: ProductionBroker, account: str, *, version: str = MQTT_V5, tls: bool = True) -> MqttLink:
    url = broker.url if tls else broker.loopback_url
    return connect(
        url, "ignored", on_message=lambda m: None, protocol=version, security=broker.login(account, tls=tls)
    )


# -- client-id takeover -------------------------------------------------------------------------


def _victim(broker: ProductionBroker, device: str, *, tls: bool = True) -> RawClient:
    """A connected device with its offline will and its online status retained."""
    offline = protocol.encode_status(DeviceStatus(device, online=False))
    victim = RawClient(
        broker, device, f"dartfl-agent-{device}", tls=tls, will=(protocol.status_topic(device), offline)
    )
    online = protocol.encode_status(DeviceStatus(device, online=True, t=time.time()))
    assert victim.acknowledged(protocol.status_topic(device), online, retain=True)
    return victim


@pytest.mark.parametrize("tls_listener", [True, False], ids=["tls", "loopback"])
def test_no_other_account_can_take_over_a_device_connection(
    broker: ProductionBroker, tls_listener: bool
) -> None:
    victim = _victim(broker, "pi-a", tls=tls_listener)
    try:
        # The agent's predictable id, and the device's own name, from other accounts.
        for account, client_id in [
            ("app", "dartfl-agent-pi-a"),
            ("pi-b", "pi-a"),
            ("recorder", "dartfl-agent-pi-a"),
        ]:
            attacker = RawClient(broker, account, client_id, tls=tls_listener)
            assert attacker.reason == "Success"  # let in, under its own account's id
            attacker.close()
        assert RawClient(broker, None, "dartfl-agent-pi-a", tls=tls_listener).reason == "Not authorized"
        assert victim.acknowledged(protocol.telemetry_topic("pi-a"), _snapshot("pi-a"))
        assert victim.disconnects == [], "the broker closed the victim's connection for another account"
    finally:
        victim.close()
    watcher = Listener(broker, WATCHER, [protocol.status_topic("pi-a")])
    retained = watcher.next()
    watcher.close()
    assert protocol.decode_status(retained.payload, retained.topic).online  # no last will fired


def test_the_takeover_check_sees_a_takeover_where_there_is_one(broker: ProductionBroker) -> None:
    # One account is one connection: the device's own account, connecting again, does replace
    # the first connection. This is what the test above would see if another account could.
    victim = _victim(broker, "pi-b")
    try:
        RawClient(broker, "pi-b", "anything").close()
        victim.acknowledged(protocol.telemetry_topic("pi-b"), _snapshot("pi-b"))
        # paho marks the connection lost before its network thread runs on_disconnect, so the
        # publish can fail before the callback has run: wait for the callback, not the publish.
        assert victim.closed.wait(10)
    finally:
        victim.close()


# -- spoofed retained status --------------------------------------------------------------------


def test_only_the_device_account_can_write_its_retained_status(broker: ProductionBroker) -> None:
    device = _device(broker, "pi-a")
    spoof = protocol.encode_status(DeviceStatus("pi-a", online=False, t=time.time() + 1000))
    try:
        for account in ("app", "pi-b", "dash", "recorder"):  # MQTT 5: the refusal is visible
            link = _as(broker, account)
            link.publish(protocol.status_topic("pi-a"), spoof, retain=True)
            refusal = _refusal(link)
            assert refusal.topic == protocol.status_topic("pi-a") and refusal.reason == "Not authorized"
            link.close()
        quiet = _as(broker, "app", version=MQTT_V311)  # 3.1.1: acknowledged, dropped
        quiet.publish(protocol.status_topic("pi-a"), spoof, retain=True)
        assert quiet.flush()
        quiet.close()
        # A last will on the device's status, left by a connection that vanishes.
        RawClient(broker, "app", "x", will=(protocol.status_topic("pi-a"), spoof)).drop()
        RawClient(broker, "app", "x").close()  # same account: its dropped connection is settled first
        watcher = Listener(broker, WATCHER, [protocol.status_topic("pi-a")])
        retained = watcher.next()
        watcher.close()
        assert retained.retain and protocol.decode_status(retained.payload, retained.topic).online
    finally:
        device.close()


# -- cross-device publish -----------------------------------------------------------------------


def test_a_device_account_can_neither_speak_for_another_device_nor_read_its_requests(
    broker: ProductionBroker,
) -> None:
    for topic in (protocol.telemetry_topic("pi-a"), protocol.status_topic("pi-a")):
        pi_b = _as(broker, "pi-b")
        pi_b.publish(topic, _snapshot("pi-a"), retain=topic.endswith("status"))
        assert _refusal(pi_b).topic == topic
        pi_b.close()
    requests: queue.Queue[Message] = queue.Queue()
    wanted = [(protocol.request_subscription("pi-a"), 1), (protocol.request_subscription("pi-b"), 1)]
    login = broker.login("pi-b")
    pi_b = connect(broker.url, "x", on_message=requests.put, subscriptions=wanted, security=login)
    app = _as(broker, "app")
    try:
        payload = protocol.encode_request("r1", IMAGE, protocol.reply_topic("app"))
        app.publish(protocol.request_topic("pi-a", "digits"), payload)  # first: must not arrive
        app.publish(protocol.request_topic("pi-b", "digits"), payload)
        assert requests.get(timeout=10).topic == protocol.request_topic("pi-b", "digits")
    finally:
        pi_b.close()
        app.close()


# -- anonymous access ---------------------------------------------------------------------------


@pytest.mark.parametrize("tls_listener", [True, False], ids=["tls", "loopback"])
def test_no_listener_lets_an_anonymous_client_in(broker: ProductionBroker, tls_listener: bool) -> None:
    url = broker.url if tls_listener else broker.loopback_url
    security = MqttSecurity(broker.tls.ca) if tls_listener else None
    with pytest.raises(MqttSecurityError, match="Not authorized"):
        connect(url, "anonymous", on_message=lambda m: None, security=security, timeout=10)
    assert (
        RawClient(broker, None, "anonymous", tls=tls_listener, version=paho.MQTTv311).reason
        == "Not authorized"
    )


def test_the_loopback_listener_has_the_same_accounts_and_acl(broker: ProductionBroker) -> None:
    watcher = Listener(broker, WATCHER, [protocol.telemetry_topic("pi-a")])
    app = _as(broker, "app", tls=False)
    device = _as(broker, "pi-a", tls=False)
    try:
        app.publish(protocol.telemetry_topic("pi-a"), _snapshot("pi-a", 1))
        assert _refusal(app).topic == protocol.telemetry_topic("pi-a")
        device.publish(protocol.telemetry_topic("pi-a"), _snapshot("pi-a", 2))
        assert protocol.decode_telemetry(watcher.next().payload).device == "pi-a"
        assert watcher.inbox.empty()  # the requester's snapshot never came
    finally:
        for link in (app, device):
            link.close()
        watcher.close()


# -- replies ------------------------------------------------------------------------------------


def test_a_device_writes_replies_only_in_the_reply_namespace_and_only_their_requester_reads_them(
    broker: ProductionBroker,
) -> None:
    mine, theirs = protocol.reply_topic("app", "run1"), protocol.reply_topic("other-app", "run1")
    app = Listener(broker, "app", [mine])
    snoop = Listener(broker, "other-app", [f"{protocol.REPLY_ROOT}/#"])  # wider than its own
    device = _as(broker, "pi-a")
    try:
        device.publish("alerts/door", b"reflected")
        assert _refusal(device).topic == "alerts/door"
        device.publish(mine, protocol.encode_reply("r1", "digits", 3, 1.0, "1"))
        device.publish(theirs, protocol.encode_reply("r2", "digits", 4, 1.0, "1"))
        assert protocol.decode_reply(app.next().payload).id == "r1"
        assert protocol.decode_reply(snoop.next().payload).id == "r2"  # its own, not app's before it
    finally:
        device.close()
        app.close()
        snoop.close()


def test_a_refused_publish_names_the_account_the_topic_and_the_fix(broker: ProductionBroker) -> None:
    app = _as(broker, "app")
    try:
        payload = protocol.encode_request("r1", IMAGE, protocol.reply_topic("app"))
        app.publish(protocol.request_topic("pi-z", "digits"), payload)  # not in the roster
        message = str(_refusal(app))
    finally:
        app.close()
    assert "account 'app'" in message and "'dartfl/v1/pi-z/req/digits'" in message
    assert "dartfl broker setup --requester app --device pi-z" in message


# -- silence made loud --------------------------------------------------------------------------


@pytest.fixture
def publishing(broker: ProductionBroker) -> Iterator[None]:
    """pi-a publishing telemetry every 0.1 s while the test runs."""
    device = _as(broker, "pi-a")
    stop = threading.Event()

    def loop() -> None:
        step = 0
        while not stop.wait(0.1):
            device.publish(protocol.telemetry_topic("pi-a"), _snapshot("pi-a", step))
            step += 1

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    yield
    stop.set()
    worker.join(5)
    device.close()


def _record(broker: ProductionBroker, account: str, store: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    from dartfl.cli.main import main
    from messaging.security import PASSWORD_ENV

    monkeypatch.setenv(PASSWORD_ENV, broker.password(account))
    flags = ["--broker", broker.url, "--mqtt-ca-file", str(broker.tls.ca), "--mqtt-username", account]
    return main(["record", *flags, "--store", str(store), "--duration-s", "2", "--flush-s", "0.2"])


def test_record_without_the_right_to_read_telemetry_fails_naming_the_topic_and_the_fix(
    broker: ProductionBroker,
    publishing: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _record(broker, "pi-b", tmp_path / "denied.sqlite", monkeypatch) == 1
    out, err = capsys.readouterr()
    assert "0 snapshots written" in out
    (line,) = err.strip().splitlines()
    assert "dartfl/v1/+/telemetry" in line and "account 'pi-b'" in line and "--recorder pi-b" in line
    assert _record(broker, "recorder", tmp_path / "allowed.sqlite", monkeypatch) == 0
    written = re.search(r"(\d+) snapshots written", capsys.readouterr().out)
    assert written is not None and int(written.group(1)) > 0


def test_two_clients_on_one_account_are_told_why_they_keep_losing_the_connection(
    broker: ProductionBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # The same account is the same client id: each reconnect closes the other's connection.
    first = _as(broker, "other-app")
    try:
        with caplog.at_level(logging.ERROR):
            second = _as(broker, "other-app")
            deadline = time.monotonic() + 30
            while "one account is one connection" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
            second.close()
        assert "is another process logged in as 'other-app'" in caplog.text
    finally:
        first.close()
