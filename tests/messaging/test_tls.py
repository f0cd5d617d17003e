"""MQTT over TLS against a real Mosquitto with a TLS listener (throwaway CA made by openssl):
request/reply round trips over mqtts://, and every way the settings can be wrong failing at
once with a message that names the cause. One broker checks only the server's certificate;
a strict one also requires a client certificate and a password."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError
from messaging.brokers import BrokerHandle, parse_broker_address
from messaging.link import MqttConnectError, MqttSecurityError, connect
from messaging.security import MqttSecurity
from tests.messaging import mqtt_fixtures as fx
from tests.messaging import tls_fixtures as tls

pytestmark = pytest.mark.integration

TASKS = ("digits", "fashion")


def _url(broker: BrokerHandle) -> str:
    assert broker.tls_url is not None
    return broker.tls_url


def _round_trips(url: str, device_security: MqttSecurity, requester_security: MqttSecurity) -> None:
    device = fx.EchoDevice(url, "tls-dev", TASKS, security=device_security)
    requester = fx.Requester(url, "tls-req", security=requester_security)
    try:
        images = np.random.default_rng(1).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
        for i, image in enumerate(images):
            reply, _ = requester.ask("tls-dev", TASKS[i % 2], image)
            assert (reply.status, reply.label) == ("ok", fx.expected_label(image))
    finally:
        requester.close()
        device.close()


def test_mqtts_urls_default_to_port_8883() -> None:
    address = parse_broker_address("mqtts://broker.example")
    assert (address.host, address.port, address.tls) == ("broker.example", 8883, True)
    assert not parse_broker_address("mqtt://broker.example").tls


def test_requests_round_trip_over_tls(tls_broker: BrokerHandle, tls_files: tls.TlsFiles) -> None:
    security = MqttSecurity(ca_file=tls_files.ca)
    _round_trips(_url(tls_broker), security, security)


def test_a_wrong_ca_fails_at_once_naming_it(tls_broker: BrokerHandle, tls_files: tls.TlsFiles) -> None:
    with pytest.raises(MqttSecurityError, match=r"not trusted by the CA in .*other-ca\.crt \(wrong CA\?"):
        connect(
            _url(tls_broker),
            "wrong-ca",
            on_message=print,
            security=MqttSecurity(tls_files.other_ca),
            timeout=10,
        )


def test_the_system_store_does_not_trust_a_private_ca(tls_broker: BrokerHandle) -> None:
    with pytest.raises(MqttSecurityError, match="not trusted by the system CA store"):
        connect(_url(tls_broker), "no-ca", on_message=print, timeout=10)


def test_a_host_name_the_certificate_does_not_list_is_a_mismatch(
    tls_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    # The broker's certificate names 127.0.0.1 only; localhost reaches the same listener.
    url = _url(tls_broker).replace("127.0.0.1", "localhost")
    with pytest.raises(MqttSecurityError, match="hostname mismatch"):
        connect(url, "mismatch", on_message=print, security=MqttSecurity(tls_files.ca), timeout=10)


def test_mqtts_to_a_plain_listener_hints_at_the_port(
    tls_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    url = tls_broker.url.replace("mqtt://", "mqtts://")
    with pytest.raises(MqttConnectError, match="is it a TLS listener"):
        connect(url, "plain-port", on_message=print, security=MqttSecurity(tls_files.ca), timeout=2.5)


def test_client_certificate_and_login_round_trip(
    strict_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    requester = tls.client_login(tls_files, user=tls.REQUESTER_USER)  # one connection per account
    _round_trips(_url(strict_broker), tls.client_login(tls_files), requester)


def test_a_broker_requiring_a_client_certificate_says_so(
    strict_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    no_cert = MqttSecurity(tls_files.ca, username=tls.CLIENT_USER, password=tls.CLIENT_PASSWORD)
    with pytest.raises(MqttSecurityError, match="requires a client certificate"):
        connect(_url(strict_broker), "no-cert", on_message=print, security=no_cert, timeout=10)


def test_a_wrong_password_is_refused_with_a_hint(
    strict_broker: BrokerHandle, tls_files: tls.TlsFiles
) -> None:
    with pytest.raises(MqttSecurityError, match=r"Not authorized \(check --mqtt-username and \$DARTFL_MQTT"):
        connect(
            _url(strict_broker),
            "bad-pw",
            on_message=print,
            security=tls.client_login(tls_files, "nope"),
            timeout=10,
        )


# --- settings that cannot work fail before any connection ------------------------------------


def test_tls_files_with_a_plain_url_are_refused(tls_files: tls.TlsFiles) -> None:
    with pytest.raises(ConfigError, match="apply to mqtts:// brokers only"):
        connect("mqtt://127.0.0.1:1", "x", on_message=print, security=MqttSecurity(tls_files.ca))


def test_missing_and_unreadable_files_are_named(tls_files: tls.TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--mqtt-ca-file .*nope\.crt: no such file"):
        MqttSecurity(tmp_path / "nope.crt").check("mqtts://h", tls=True)
    with pytest.raises(ConfigError, match="not a file"):
        MqttSecurity(tmp_path).check("mqtts://h", tls=True)
    with pytest.raises(ConfigError, match=r"--mqtt-key-file .* needs --mqtt-cert-file"):
        MqttSecurity(tls_files.ca, key_file=tls_files.client_key)
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.key"
        locked.write_bytes(tls_files.client_key.read_bytes())
        locked.chmod(0)
        with pytest.raises(ConfigError, match="cannot read it"):
            MqttSecurity(tls_files.ca, tls_files.client_cert, locked).check("mqtts://h", tls=True)


def test_a_key_of_another_certificate_or_an_encrypted_key_is_refused(
    tls_files: tls.TlsFiles, tmp_path: Path
) -> None:
    mismatched = MqttSecurity(tls_files.ca, tls_files.client_cert, tls_files.server_key)
    with pytest.raises(ConfigError, match="does not belong to the client certificate"):
        connect("mqtts://127.0.0.1:1", "x", on_message=print, security=mismatched)
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            str(tls_files.client_key),
            "-aes256",
            "-passout",
            "pass:secret",
            "-out",
            str(encrypted),
        ],
        check=True,
        capture_output=True,
    )
    with pytest.raises(ConfigError, match="is encrypted"):
        connect(
            "mqtts://127.0.0.1:1",
            "x",
            on_message=print,
            security=MqttSecurity(tls_files.ca, tls_files.client_cert, encrypted),
        )


def test_mqtts_without_a_ca_file_needs_a_system_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="needs --mqtt-ca-file: this system has no CA store"):
        MqttSecurity().check("mqtts://broker.example", tls=True)


def test_the_password_never_shows_in_a_repr_or_the_environment(tls_files: tls.TlsFiles) -> None:
    security = tls.client_login(tls_files)
    assert tls.CLIENT_PASSWORD not in repr(security)
    assert tls.CLIENT_PASSWORD not in str(security.to_env())
    again = MqttSecurity.from_env({**security.to_env(), "DARTFL_MQTT_PASSWORD": tls.CLIENT_PASSWORD})
    assert again == security
