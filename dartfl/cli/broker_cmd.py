"""`dartfl broker setup`: write the production Mosquitto set-up (docs/deployment.md section 5).

    sudo dartfl broker setup --dir /etc/mosquitto/dartfl \\
        --device pi-01 --device pi-02 --requester replayer --recorder recorder --dashboard dashboard

writes dartfl.conf, acl, passwd, setup.toml and credentials/<account>.env for each new
account into --dir (messaging.broker_setup). Run it again to add (`--device pi-03`), remove
(`--remove pi-01`) or renew (`--renew pi-02`) accounts, or change a listener flag: the rest
stays as setup.toml has it, and the other accounts keep their passwords.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/etc/mosquitto/dartfl")
_CERTS = Path("/etc/mosquitto/certs")  # messaging.broker_setup.BrokerSettings' defaults


def register(sub: Any) -> None:
    broker = sub.add_parser("broker", help="the production MQTT broker (Mosquitto): config and accounts")
    broker_sub = broker.add_subparsers(dest="broker_command", metavar="COMMAND", required=True)
    p = broker_sub.add_parser(
        "setup",
        help="write the Mosquitto config, ACL and accounts of a fleet",
        description="Write the production Mosquitto set-up into --dir: the config (TLS, logins, "
        "client ids bound to accounts, no anonymous access), the ACL of every account, the "
        "password file, and each new account's password in credentials/<account>.env.",
    )
    p.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"where the files go (default {DEFAULT_DIR})"
    )
    roles = p.add_argument_group("accounts (each flag repeatable; kept in --dir/setup.toml)")
    roles.add_argument(
        "--device", action="append", default=[], metavar="NAME", help="a device (its device id)"
    )
    roles.add_argument("--requester", action="append", default=[], metavar="NAME", help="sends requests")
    roles.add_argument("--recorder", action="append", default=[], metavar="NAME", help="runs `dartfl record`")
    roles.add_argument(
        "--dashboard", action="append", default=[], metavar="NAME", help="runs `dartfl dashboard`"
    )
    roles.add_argument("--remove", action="append", default=[], metavar="NAME", help="remove an account")
    roles.add_argument("--renew", action="append", default=[], metavar="NAME", help="give it a new password")
    listen = p.add_argument_group("listeners (kept in --dir/setup.toml: give a flag only to change it)")
    listen.add_argument("--cafile", type=Path, help=f"the CA (default {_CERTS / 'ca.crt'})")
    listen.add_argument(
        "--certfile", type=Path, help=f"the broker's certificate (default {_CERTS / 'broker.pem'})"
    )
    listen.add_argument("--keyfile", type=Path, help=f"its key (default {_CERTS / 'broker.key'})")
    listen.add_argument("--tls-port", type=int, help="TLS listener (default 8883)")
    listen.add_argument("--tls-address", help="bind the TLS listener to this address (default: all)")
    listen.add_argument(
        "--loopback-port", type=int, help="plain listener on 127.0.0.1, same logins (default 1883)"
    )
    listen.add_argument(
        "--require-certificate",
        action=argparse.BooleanOptionalAction,
        help="clients also need a certificate signed by the CA (default: no)",
    )
    p.set_defaults(handler=_setup)


# flag dest -> BrokerSettings field
_SETTINGS = {
    "cafile": "ca_file",
    "certfile": "cert_file",
    "keyfile": "key_file",
    "tls_port": "tls_port",
    "tls_address": "tls_address",
    "loopback_port": "loopback_port",
    "require_certificate": "require_certificate",
}


def _setup(args: argparse.Namespace) -> int:
    from messaging.accounts import ROLES
    from messaging.broker_setup import write_broker_setup

    settings = {
        field: getattr(args, dest) for dest, field in _SETTINGS.items() if getattr(args, dest) is not None
    }
    add = {role: getattr(args, role) for role in ROLES}  # --device NAME ... per role
    result = write_broker_setup(args.dir, settings=settings, add=add, remove=args.remove, renew=args.renew)
    changes = result.passwords
    print(f"dartfl broker setup: {args.dir} ({result.roster.summary()})")
    for label, names in (
        ("new", changes.created),
        ("renewed", changes.renewed),
        ("removed", changes.removed),
        ("kept", changes.kept),
    ):
        if names:
            print(f"  {label:8s} {', '.join(names)}")
    if changes.created or changes.renewed:
        print(f"  passwords of new and renewed accounts: {args.dir / 'credentials'}/<account>.env")
    print(
        f"next: link {args.dir / 'dartfl.conf'} into /etc/mosquitto/conf.d/ and restart Mosquitto "
        "the first time; reload it (SIGHUP) after account changes"
    )
    return 0
