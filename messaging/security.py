"""How an MQTT connection is secured: which CAs to trust for an `mqtts://` broker, an optional
client certificate, and an optional username/password.

Plain data and checks, no paho: the CLI and the dashboard build and check an `MqttSecurity`
before anything heavy loads, and `messaging.link` applies it to paho's client. The password
never travels on a command line (anyone can read those in `ps`): entry points take it from
$DARTFL_MQTT_PASSWORD. There is deliberately no "skip certificate checks" switch: a lab CA is
trusted by passing its certificate as the CA file.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from dartfl.errors import ConfigError

__all__ = [
    "PASSWORD_ENV",
    "MqttSecurity",
    "TlsFailure",
    "describe_tls_failure",
    "system_ca_store",
]

PASSWORD_ENV = "DARTFL_MQTT_PASSWORD"
# How `dartfl dashboard` hands the settings to its Streamlit process (the password is
# inherited from the caller's environment as it is).
_FILE_ENVS = {
    "ca_file": "DARTFL_MQTT_CA_FILE",
    "cert_file": "DARTFL_MQTT_CERT_FILE",
    "key_file": "DARTFL_MQTT_KEY_FILE",
}
_USERNAME_ENV = "DARTFL_MQTT_USERNAME"
# The flag that sets each file, so a complaint names what the user typed.
_FLAGS = {"ca_file": "--mqtt-ca-file", "cert_file": "--mqtt-cert-file", "key_file": "--mqtt-key-file"}


@dataclass(frozen=True)
class MqttSecurity:
    """TLS files and credentials for one broker. All None: plain anonymous MQTT, or TLS
    trusting the system's CA store when the URL is mqtts://."""

    ca_file: Path | None = None
    cert_file: Path | None = None  # client certificate (PEM); may hold the key too
    key_file: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.key_file is not None and self.cert_file is None:
            raise ConfigError(f"--mqtt-key-file {self.key_file} needs --mqtt-cert-file (its certificate)")
        if self.username is not None and not self.username:
            raise ConfigError("--mqtt-username is empty; give the broker account's name or leave it out")
        if self.password is not None and self.username is None:
            raise ConfigError(f"an MQTT password (${PASSWORD_ENV}) needs --mqtt-username")

    @property
    def has_tls_files(self) -> bool:
        return any(p is not None for p in (self.ca_file, self.cert_file, self.key_file))

    def check(self, url: str, *, tls: bool) -> None:
        """Raise ConfigError unless these settings can work for broker `url`: TLS files only
        with mqtts://, every file readable, and some CA to trust."""
        if not tls and self.has_tls_files:
            raise ConfigError(
                f"--mqtt-ca-file, --mqtt-cert-file and --mqtt-key-file apply to mqtts:// brokers only; "
                f"{url} is plain MQTT (use mqtts://HOST:8883 for TLS)"
            )
        for name, flag in _FLAGS.items():
            path = getattr(self, name)
            if path is not None:
                _check_readable(flag, path)
        if tls and self.ca_file is None and system_ca_store() is None:
            raise ConfigError(
                f"{url} needs --mqtt-ca-file: this system has no CA store to check the broker's "
                "certificate against (install ca-certificates, or give the CA that signed it)"
            )

    def to_env(self) -> dict[str, str]:
        """The files and the username as environment variables (not the password)."""
        env = {var: str(getattr(self, name)) for name, var in _FILE_ENVS.items() if getattr(self, name)}
        if self.username is not None:
            env[_USERNAME_ENV] = self.username
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MqttSecurity:
        """The inverse of `to_env`, with the password from $DARTFL_MQTT_PASSWORD."""
        files = {name: Path(env[var]) if env.get(var) else None for name, var in _FILE_ENVS.items()}
        username = env.get(_USERNAME_ENV) or None
        password = env.get(PASSWORD_ENV) if username is not None else None
        return cls(**files, username=username, password=password)


def _check_readable(flag: str, path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"{flag} {path}: no such file")
    if not path.is_file():
        raise ConfigError(f"{flag} {path}: not a file (expected a PEM file)")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror}); check its permissions") from None


def system_ca_store() -> str | None:
    """Where OpenSSL finds the system's trusted CAs (a file or a non-empty directory), or None."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile and os.path.isfile(paths.cafile):
        return paths.cafile
    if paths.capath and os.path.isdir(paths.capath) and any(os.scandir(paths.capath)):
        return paths.capath
    return None


class TlsFailure(NamedTuple):
    """What a failed TLS connection attempt most likely means; `permanent`: retrying is useless."""

    message: str
    permanent: bool


def describe_tls_failure(detail: str, *, where: str, ca_file: Path | None) -> TlsFailure | None:
    """Translate an attempt's error text (an ssl exception or paho's socket error) into a
    one-line cause and fix; None when it is not about TLS (e.g. connection refused)."""
    text = detail.upper()
    trusted = f"the CA in {ca_file}" if ca_file is not None else "the system CA store"
    if "HOSTNAME MISMATCH" in text or "IP ADDRESS MISMATCH" in text:
        return TlsFailure(
            f"TLS handshake with {where} failed: hostname mismatch, the broker's certificate does not "
            "name the host in the URL (connect by a name the certificate lists, or reissue it with "
            "this host in its subjectAltName)",
            True,
        )
    if "EXPIRED" in text or "NOT YET VALID" in text:
        return TlsFailure(
            f"TLS handshake with {where} failed: a certificate has expired or is not yet valid "
            "(check the clocks and the certificates' dates)",
            True,
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return TlsFailure(
            f"TLS handshake with {where} failed: the broker's certificate is not trusted by {trusted} "
            "(wrong CA? give --mqtt-ca-file with the CA that signed the broker's certificate)",
            True,
        )
    if "CERTIFICATE_REQUIRED" in text or "ALERT_HANDSHAKE_FAILURE" in text:
        return TlsFailure(
            f"TLS handshake with {where} failed: the broker requires a client certificate "
            "(give --mqtt-cert-file and --mqtt-key-file)",
            True,
        )
    if any(alert in text for alert in ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN")):
        return TlsFailure(
            f"TLS handshake with {where} failed: the broker rejected the client certificate "
            "(it must be signed by a CA in the broker's cafile)",
            True,
        )
    if "WRONG_VERSION_NUMBER" in text or "RECORD_LAYER_FAILURE" in text:
        return TlsFailure(
            f"TLS handshake with {where} failed: the port does not speak TLS "
            "(plain MQTT usually listens on 1883, TLS on 8883)",
            True,
        )
    if "CONNECTION RESET" in text or "EOF" in text:
        # Also what a broker at its connection limit does: a hint, and go on retrying.
        return TlsFailure(
            f"{where} closed the connection during the TLS handshake (is it a TLS listener? "
            "plain MQTT usually listens on 1883, TLS on 8883)",
            False,
        )
    return None
