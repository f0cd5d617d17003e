"""Applying an `MqttSecurity` to a paho client: TLS through paho's own `tls_set` (certificate
and host name always checked) and the username/password, with unusable files turned into
one-line ConfigErrors before any connection is tried; and `FailedAttempts`, which turns the
errors of failed attempts into a likely cause."""

from __future__ import annotations

import ssl

import paho.mqtt.client as paho

from dartfl.errors import ConfigError
from messaging.security import MqttSecurity, describe_tls_failure

__all__ = ["FailedAttempts", "apply_security"]


def apply_security(client: paho.Client, security: MqttSecurity, *, tls: bool) -> None:
    """Set up `client` for an mqtts:// (`tls`) or plain broker; call before connecting."""
    if tls:
        _use_tls(client, security)
    if security.username is not None:
        client.username_pw_set(security.username, security.password)


class FailedAttempts:
    """Why the attempts to connect failed so far (paho retries by itself until a deadline)."""

    def __init__(self, where: str, security: MqttSecurity, *, tls: bool) -> None:
        self.where = where
        self.last: str | None = None
        self._ca_file = security.ca_file
        self._tls = tls

    def note(self, detail: str) -> str | None:
        """Record one failed attempt; return the message when TLS says retrying cannot help."""
        self.last = detail
        failure = describe_tls_failure(detail, where=self.where, ca_file=self._ca_file)
        if not self._tls or failure is None:
            return None
        self.last = failure.message
        return failure.message if failure.permanent else None


class _EncryptedKeyError(Exception):
    """The client key asks for a passphrase (OpenSSL would otherwise prompt on the terminal)."""


def _refuse_passphrase() -> str:
    raise _EncryptedKeyError


def _use_tls(client: paho.Client, security: MqttSecurity) -> None:
    """paho's TLS with certificate and host name checks on; files turned into clear errors."""
    files = f"CA {security.ca_file or 'system store'}"
    if security.cert_file is not None:
        files += f", certificate {security.cert_file}, key {security.key_file or security.cert_file}"
    try:
        client.tls_set(
            ca_certs=None if security.ca_file is None else str(security.ca_file),
            certfile=None if security.cert_file is None else str(security.cert_file),
            keyfile=None if security.key_file is None else str(security.key_file),
            keyfile_password=_refuse_passphrase,  # type: ignore[arg-type]
        )
    except _EncryptedKeyError:
        raise ConfigError(
            f"--mqtt-key-file {security.key_file or security.cert_file} is encrypted; a device agent "
            "cannot type its passphrase: store it decrypted, readable by the agent's user only"
        ) from None
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if "KEY_VALUES_MISMATCH" in reason:
            why = "the key does not belong to the client certificate"
        elif "NO_CERTIFICATE" in reason:
            why = "the CA file holds no PEM certificate"
        else:
            why = f"not PEM certificates/keys ({reason})"
        raise ConfigError(f"cannot load the MQTT TLS files ({files}): {why}") from None
