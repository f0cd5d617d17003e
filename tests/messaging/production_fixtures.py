"""A real Mosquitto on the shipped production set-up, for the security and end-to-end tests.

The set-up is written by the same function as `dartfl broker setup` (messaging.broker_setup:
the shipped config and ACL templates, passwords by mosquitto_passwd), with tls_fixtures'
throwaway CA. Only the test's own lines differ from production: the listener ports (free ones,
TLS bound to 127.0.0.1) and a main config that runs the broker as the caller, without
persistence, logging to stderr, and including the set-up's folder as Debian's main config
includes /etc/mosquitto/conf.d. `start_production_broker(..., watcher=True)` adds a test-only
account that reads every topic, to see what would otherwise be out of sight.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from messaging.accounts import Role
from messaging.broker_setup import write_broker_setup
from messaging.brokers import LOOPBACK, BrokerHandle, free_port, start_mosquitto_with_config
from messaging.security import PASSWORD_ENV, MqttSecurity
from tests.messaging.tls_fixtures import TlsFiles

__all__ = ["WATCHER", "ProductionBroker", "start_production_broker"]

WATCHER = "watcher"  # test only: reads everything (its block is appended to the shipped ACL)


@dataclass(frozen=True)
class ProductionBroker:
    handle: BrokerHandle
    directory: Path
    tls: TlsFiles
    require_certificate: bool

    @property
    def url(self) -> str:
        """The TLS listener."""
        assert self.handle.tls_url is not None
        return self.handle.tls_url

    @property
    def loopback_url(self) -> str:
        """The plain listener on 127.0.0.1 (the same accounts and ACL)."""
        return self.handle.url

    def password(self, account: str) -> str:
        line = (self.directory / "credentials" / f"{account}.env").read_text().strip()
        name, _, password = line.partition("=")
        assert name == PASSWORD_ENV, line
        return password

    def login(self, account: str, *, tls: bool = True) -> MqttSecurity:
        """What a client of `account` passes: the CA (and a client certificate when the broker
        requires one) for TLS, and the account's password."""
        if not tls:
            return MqttSecurity(username=account, password=self.password(account))
        cert = self.tls.client_cert if self.require_certificate else None
        key = self.tls.client_key if self.require_certificate else None
        return MqttSecurity(self.tls.ca, cert, key, account, self.password(account))

    def stop(self) -> None:
        self.handle.stop()


def start_production_broker(
    directory: Path,
    tls: TlsFiles,
    accounts: Mapping[Role, Sequence[str]],
    *,
    require_certificate: bool = False,
    watcher: bool = False,
) -> ProductionBroker:
    loopback_port, tls_port = free_port(), free_port()
    settings = {
        "ca_file": tls.ca,
        "cert_file": tls.server_cert,
        "key_file": tls.server_key,
        "tls_port": tls_port,
        "tls_address": LOOPBACK,
        "loopback_port": loopback_port,
        "require_certificate": require_certificate,
    }
    add = {role: list(names) for role, names in accounts.items()}
    if watcher:
        add.setdefault("recorder", []).append(WATCHER)
    setup = directory / "broker"
    write_broker_setup(setup, settings=settings, add=add)
    if watcher:
        with (setup / "acl").open("a") as acl:
            acl.write(f"\n# test only\nuser {WATCHER}\ntopic read #\n")
    main = [
        f"user {getpass.getuser()}",  # not the mosquitto user: the test's files are private
        "persistence false",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        f"include_dir {setup}",
    ]
    handle = start_mosquitto_with_config("\n".join([*main, ""]), loopback_port, tls_port=tls_port)
    return ProductionBroker(handle, setup, tls, require_certificate)
