"""What a client says when the broker refuses it: the refused topic, the account and the fix.

Publishes refused under MQTT 5 are tested against the shipped set-up
(tests/messaging/test_production_broker.py). Mosquitto's ACL file never refuses a
subscription (it drops what an account may not read), so refused subscriptions are tested
here against a Mosquitto whose dynamic-security plugin checks them, as many brokers do.
"""

from __future__ import annotations

import copy
import getpass
import json
import logging
import subprocess
import time
from collections.abc import Iterator
from glob import glob
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from dartfl.cli.main import main
from messaging.brokers import LOOPBACK, BrokerHandle, free_port, start_mosquitto_with_config
from messaging.link import MQTT_V5, MQTT_V311, MqttAclError, connect
from messaging.refusals import PublishRefusals, refused_subscription
from messaging.security import PASSWORD_ENV, MqttSecurity

TELEMETRY = "dartfl/v1/+/telemetry"
NOBODY, PASSWORD = "nobody", "admin-pw"  # its entry is a copy of the admin's, hash included


def _puback(code: int) -> ReasonCode:
    return ReasonCode(PacketTypes.PUBACK, identifier=code)


# -- unit: which topic a refusal was for ------------------------------------------------------


def test_a_refused_puback_names_its_topic_even_when_it_comes_before_the_id_is_noted() -> None:
    # paho calls on_publish with its own lock held, possibly before publish() returns the id.
    refusals = PublishRefusals("test", "app")
    refusals.acked(7, _puback(0x87))
    assert refusals.first is None
    refusals.sent(7, "dartfl/v1/pi-z/req/digits")
    assert refusals.first is not None and refusals.first.topic == "dartfl/v1/pi-z/req/digits"
    refusals.sent(8, "dartfl/v1/pi-1/req/digits")
    refusals.acked(8, _puback(0))
    assert refusals.count == 1


def test_each_refused_topic_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    refusals = PublishRefusals("test", "pi-1")
    with caplog.at_level(logging.ERROR):
        for mid in range(5):
            refusals.sent(mid, "alerts/door")
            refusals.acked(mid, _puback(0x87))
    assert refusals.count == 5 and caplog.text.count("alerts/door") == 1
    assert "device accounts write replies" not in caplog.text  # alerts/ is no reply topic
    assert "account 'pi-1'" in caplog.text


def test_a_refused_subscription_is_the_first_failed_code_in_the_order_subscribed() -> None:
    granted, refused = (
        ReasonCode(PacketTypes.SUBACK, identifier=1),
        ReasonCode(PacketTypes.SUBACK, identifier=0x87),
    )
    refusal = refused_subscription(["dartfl/v1/+/status", TELEMETRY], [granted, refused], "dash")
    assert refusal is not None and refusal.topic == TELEMETRY
    assert "--recorder dash" in str(refusal)
    assert refused_subscription([TELEMETRY], [granted], "dash") is None


# -- a broker that checks subscriptions --------------------------------------------------------


@pytest.fixture(scope="module")
def checking_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHandle]:
    """Mosquitto with its dynamic-security plugin and an account with no role at all."""
    plugins = glob("/usr/lib/*/mosquitto_dynamic_security.so")
    assert plugins, "mosquitto_dynamic_security.so not found (apt-get install mosquitto)"
    folder = tmp_path_factory.mktemp("dynsec")
    state = folder / "dynamic-security.json"
    init = ["mosquitto_ctrl", "dynsec", "init", str(state), "admin", PASSWORD]
    subprocess.run(init, check=True, capture_output=True, timeout=30)
    data = json.loads(state.read_text())
    data["clients"].append({**copy.deepcopy(data["clients"][0]), "username": NOBODY, "roles": []})
    state.write_text(json.dumps(data))
    port = free_port()
    config = [
        f"user {getpass.getuser()}",
        "persistence false",
        f"listener {port} {LOOPBACK}",
        "allow_anonymous false",
        f"plugin {plugins[0]}",
        f"plugin_opt_config_file {state}",
        "log_dest stderr",
    ]
    with start_mosquitto_with_config("\n".join([*config, ""]), port) as broker:
        yield broker


def _nobody() -> MqttSecurity:
    return MqttSecurity(username=NOBODY, password=PASSWORD)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("version", "reason"), [(MQTT_V5, "Not authorized"), (MQTT_V311, "Unspecified error")]
)
def test_a_refused_subscription_fails_the_connection_naming_topic_account_and_fix(
    checking_broker: BrokerHandle, version: str, reason: str
) -> None:
    with pytest.raises(MqttAclError) as info:
        connect(
            checking_broker.url,
            "x",
            on_message=lambda m: None,
            subscriptions=[(TELEMETRY, 1)],
            protocol=version,
            security=_nobody(),
        )
    message = str(info.value)
    assert f"refused account 'nobody' the subscription to '{TELEMETRY}' ({reason})" in message
    assert "dartfl broker setup --recorder nobody" in message


@pytest.mark.integration
def test_a_later_subscription_refused_names_its_topic(checking_broker: BrokerHandle) -> None:
    link = connect(checking_broker.url, "x", on_message=lambda m: None, protocol=MQTT_V5, security=_nobody())
    try:
        with pytest.raises(MqttAclError, match=r"the subscription to 'dartfl/v1/_reply/nobody/r1'"):
            link.subscribe("dartfl/v1/_reply/nobody/r1")
    finally:
        link.close()


@pytest.mark.integration
def test_dartfl_record_refused_its_subscription_exits_2_in_one_line(
    checking_broker: BrokerHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    args = [
        "record",
        "--broker",
        checking_broker.url,
        "--mqtt-username",
        NOBODY,
        "--store",
        str(tmp_path / "s.sqlite"),
    ]
    assert main([*args, "--duration-s", "30", "--flush-s", "0.2"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dartfl:")]
    assert TELEMETRY in line and "--recorder nobody" in line


@pytest.mark.integration
def test_the_dashboard_feed_stops_on_a_refused_subscription_and_shows_why(
    checking_broker: BrokerHandle,
) -> None:
    from dashboard.feed import LiveFeed

    feed = LiveFeed(checking_broker.url, retry_s=0.3, security=_nobody())
    try:
        deadline = time.monotonic() + 10
        while feed.subscriber.fatal_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert isinstance(feed.subscriber.fatal_error, MqttAclError)  # no retrying: settings are wrong
        error = feed.state().error or ""
        assert TELEMETRY in error and "--recorder nobody" in error
    finally:
        feed.close()
