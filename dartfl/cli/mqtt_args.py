"""The MQTT security flags every broker-speaking command shares (`edge run`, `edge replay`,
`record`, `dashboard`), and the one function that turns them into an `MqttSecurity`.

    --broker mqtts://broker.example:8883 --mqtt-ca-file ca.crt \\
        [--mqtt-cert-file dev.crt --mqtt-key-file dev.key] [--mqtt-username dev-1]

The password comes from $DARTFL_MQTT_PASSWORD only: a command line is readable by every user
of the machine (`ps`). Everything is checked here, before a command loads anything heavy, so a
typo exits 2 at once with the flag and the fix.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dartfl.errors import ConfigError

if TYPE_CHECKING:
    from messaging.security import MqttSecurity

log = logging.getLogger(__name__)

__all__ = ["add_mqtt_arguments", "mqtt_security_from_args"]


def add_mqtt_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "MQTT security",
        "TLS with an mqtts://HOST:8883 broker URL; the password is read from $DARTFL_MQTT_PASSWORD",
    )
    g.add_argument(
        "--mqtt-ca-file",
        type=Path,
        metavar="PEM",
        help="CA certificate(s) that signed the broker's certificate (default: the system's CA store)",
    )
    g.add_argument(
        "--mqtt-cert-file", type=Path, metavar="PEM", help="client certificate, for brokers that require one"
    )
    g.add_argument(
        "--mqtt-key-file", type=Path, metavar="PEM", help="the client certificate's private key (unencrypted)"
    )
    g.add_argument(
        "--mqtt-username", metavar="NAME", help="broker account; its password from $DARTFL_MQTT_PASSWORD"
    )


def mqtt_security_from_args(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> MqttSecurity | None:
    """The checked security settings for `args.broker` (None: no broker given, so the command
    starts its own plain loopback one). Raises ConfigError."""
    from messaging.brokers import parse_broker_address
    from messaging.security import PASSWORD_ENV, MqttSecurity

    flags = (args.mqtt_ca_file, args.mqtt_cert_file, args.mqtt_key_file, args.mqtt_username)
    url = getattr(args, "broker", None)
    if not url:
        if any(flag is not None for flag in flags):
            raise ConfigError("the --mqtt-* flags need --broker URL (the broker they are for)")
        return None
    address = parse_broker_address(url)
    env = os.environ if env is None else env
    password = env.get(PASSWORD_ENV) or None
    if password is not None and args.mqtt_username is None:
        log.warning("$%s is set but --mqtt-username is not: connecting without a login", PASSWORD_ENV)
        password = None
    if args.mqtt_username is not None and password is None:
        log.warning(
            "--mqtt-username %s without $%s: logging in without a password", args.mqtt_username, PASSWORD_ENV
        )
    if password is not None and not address.tls and not _is_loopback(address.host):
        log.warning("the MQTT password goes to %s unencrypted: use mqtts://", address.host)
    security = MqttSecurity(
        ca_file=args.mqtt_ca_file,
        cert_file=args.mqtt_cert_file,
        key_file=args.mqtt_key_file,
        username=args.mqtt_username,
        password=password,
    )
    security.check(url, tls=address.tls)
    return security


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
