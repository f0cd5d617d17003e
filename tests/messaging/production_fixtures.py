"""A real Mosquitto on the shipped production set-up, for the security and end-to-end tests.

The set-up is written by the same function as `dartfl broker setup` (messaging.broker_setup:
the shipped config and ACL templates, passwords by mosquitto_passwd), with tls_fixtures'
throwaway CA. Only the test's own lines differ from production: the listener ports (free ones,
TLS bound to 127.0.0.1) and a main config that runs the broker as the caller, without
persistence, logging to stderr, and including the set-up's folder as Debian's main config
includes /etc/mosquitto/conf.d. `start_production_broker(..., watcher=True)` adds a test-only
account that reads every topic, to see what would otherwise be out of sight. `Listener` and
`RawClient` are its clients: one as the project connects, one as anyone could write it.
"""

from __future__ import annotations

import getpass
import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from messaging.accounts import Role
from messaging.broker_setup import write_broker_setup
from messaging.brokers import (
    LOOPBACK,
    BrokerHandle,
    free_port,
    parse_broker_address,
    start_mosquitto_with_config,
)
from messaging.link import Message, connect
from messaging.security import PASSWORD_ENV, MqttSecurity
from tests.messaging.tls_fixtures import TlsFiles

__all__ = ["WATCHER", "Listener", "ProductionBroker", "RawClient", "start_production_broker"]

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


class Listener:
    """A client of `account` that keeps every message it receives, in order."""

    def __init__(
        self, broker: ProductionBroker, account: str, topics: list[str], *, tls: bool = True
    ) -> None:
        self.inbox: queue.Queue[Message] = queue.Queue()
        url = broker.url if tls else broker.loopback_url
        subscriptions = [(topic, 1) for topic in topics]
        self.link = connect(
            url,
            "ignored",
            on_message=self.inbox.put,
            subscriptions=subscriptions,
            security=broker.login(account, tls=tls),
        )

    def next(self, timeout_s: float = 10.0) -> Message:
        return self.inbox.get(timeout=timeout_s)

    def close(self) -> None:
        self.link.close()


class RawClient:
    """A paho client as anyone could write it: any client id, any will, any protocol."""

    def __init__(
        self,
        broker: ProductionBroker,
        account: str | None,
        client_id: str,
        *,
        tls: bool = True,
        will: tuple[str, bytes] | None = None,
        version: int = paho.MQTTv5,
    ) -> None:
        address = parse_broker_address(broker.url if tls else broker.loopback_url)
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version)
        if tls:
            self.client.tls_set(ca_certs=str(broker.tls.ca))
        if account is not None:
            self.client.username_pw_set(account, broker.password(account))
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1, retain=True)
        self.connack: queue.Queue[str] = queue.Queue()
        self.disconnects: list[str] = []
        self.closed = threading.Event()
        self.client.on_connect = lambda c, u, f, reason, p: self.connack.put(str(reason))
        self.client.on_disconnect = self._on_disconnect
        self.client.connect(address.host, address.port)
        self.client.loop_start()
        self.reason = self.connack.get(timeout=10)

    def _on_disconnect(
        self, client: paho.Client, userdata: object, flags: object, reason: object, props: object
    ) -> None:
        self.disconnects.append(str(reason))
        self.closed.set()

    def acknowledged(self, topic: str, payload: bytes, *, retain: bool = False) -> bool:
        """Publish at QoS 1 and wait for the broker's PUBACK on this connection."""
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        try:
            info.wait_for_publish(10)
        except RuntimeError:  # not connected (any more)
            return False
        return info.is_published()

    def drop(self) -> None:
        """Vanish without a DISCONNECT: the broker then publishes the will, if it may."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
