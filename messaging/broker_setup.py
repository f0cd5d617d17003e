"""The production Mosquitto set-up (docs/deployment.md section 5), written into one folder from
the files shipped in messaging/mosquitto/, by `dartfl broker setup`:

- `dartfl.conf`: the broker config (dartfl.conf.template with this site's files and ports);
- `acl`: the rights of every account (acl.template, one block per account of the roster);
- `passwd`: the accounts' password hashes (`mosquitto_passwd`);
- `setup.toml`: the listener settings and the roster, so that a later run changes only what
  its flags say (defaults < setup.toml < flags);
- `credentials/<account>.env`: the password of each new or renewed account, for its host.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from string import Template
from typing import Any, Final

from dartfl.errors import ConfigError
from messaging.accounts import Role, Roster, read_template, render_acl
from messaging.passwords import PasswordChanges, restrict, sync_password_file, write_private

__all__ = ["BrokerSettings", "SetupResult", "read_setup", "render_config", "write_broker_setup"]

CONFIG_NAME: Final = "dartfl.conf"
ACL_NAME: Final = "acl"
PASSWD_NAME: Final = "passwd"
SETUP_NAME: Final = "setup.toml"
CREDENTIALS_NAME: Final = "credentials"
_CERTS: Final = Path("/etc/mosquitto/certs")


@dataclass(frozen=True)
class BrokerSettings:
    """What the broker's listeners use; each field is a `dartfl broker setup` flag."""

    ca_file: Path = _CERTS / "ca.crt"
    cert_file: Path = _CERTS / "broker.pem"
    key_file: Path = _CERTS / "broker.key"
    tls_port: int = 8883
    tls_address: str = ""  # "": every address of the host
    loopback_port: int = 1883
    require_certificate: bool = False

    def __post_init__(self) -> None:
        for name in ("tls_port", "loopback_port"):
            port = getattr(self, name)
            if not (type(port) is int and 1 <= port <= 65535):
                raise ConfigError(f"{_flag(name)} must be a port 1-65535, got {port!r}")
        if self.tls_port == self.loopback_port:
            raise ConfigError(f"--tls-port and --loopback-port must differ, both are {self.tls_port}")
        if not isinstance(self.tls_address, str) or any(c.isspace() for c in self.tls_address):
            raise ConfigError(f"--tls-address must be one host address, got {self.tls_address!r}")
        for name in ("ca_file", "cert_file", "key_file"):
            object.__setattr__(self, name, Path(getattr(self, name)))
            if not getattr(self, name).is_absolute():
                raise ConfigError(f"{_flag(name)} must be an absolute path (the broker reads it)")
        if type(self.require_certificate) is not bool:
            raise ConfigError(f"require-certificate must be true or false, got {self.require_certificate!r}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-").replace("-file", "file")


@dataclass(frozen=True)
class SetupResult:
    directory: Path
    settings: BrokerSettings
    roster: Roster
    passwords: PasswordChanges


def render_config(directory: Path, settings: BrokerSettings) -> str:
    """dartfl.conf of a set-up in `directory`: the shipped template, its paths and ports filled in."""
    listener = f"{settings.tls_port} {settings.tls_address}".strip()
    return Template(read_template("dartfl.conf.template")).substitute(
        password_file=(directory / PASSWD_NAME).resolve(),
        acl_file=(directory / ACL_NAME).resolve(),
        loopback_port=settings.loopback_port,
        tls_listener=listener,
        ca_file=settings.ca_file,
        cert_file=settings.cert_file,
        key_file=settings.key_file,
        require_certificate=str(settings.require_certificate).lower(),
    )


def read_setup(directory: Path) -> tuple[BrokerSettings, Roster]:
    """The settings and the roster a previous run left in `directory` (defaults and an empty
    roster the first time)."""
    path = directory / SETUP_NAME
    if not path.exists():
        return BrokerSettings(), Roster()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    keys = {f.name.replace("_", "-"): f.name for f in fields(BrokerSettings)}
    known = set(keys) | set(Roster().to_mapping())
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown}; expected {sorted(known)}")
    try:
        settings = BrokerSettings(**{keys[k]: v for k, v in data.items() if k in keys})
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return settings, Roster.from_mapping(data, str(path))


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return f"[{', '.join(_toml_value(v) for v in value)}]"
    return json.dumps(str(value))  # a TOML basic string


def _setup_toml(settings: BrokerSettings, roster: Roster) -> str:
    lines = ["# The broker set-up of `dartfl broker setup`: change it with that command."]
    lines += [
        f"{f.name.replace('_', '-')} = {_toml_value(getattr(settings, f.name))}" for f in fields(settings)
    ]
    lines += [f"{key} = {_toml_value(names)}" for key, names in roster.to_mapping().items()]
    return "\n".join([*lines, ""])


def write_broker_setup(
    directory: Path,
    *,
    settings: Mapping[str, Any] | None = None,
    add: Mapping[Role, Iterable[str]] | None = None,
    remove: Iterable[str] = (),
    renew: Collection[str] = (),
    mosquitto_passwd: str = "mosquitto_passwd",
) -> SetupResult:
    """Change the set-up in `directory` (`settings`: BrokerSettings fields to change; accounts
    to add, remove or renew) and (re)write every file of it.

    The password file goes first: a removed account can no longer log in before its rights
    go, and a new one has none until its ACL block is written."""
    old_settings, old_roster = read_setup(directory)
    merged = replace(old_settings, **(settings or {}))
    roster = old_roster.adding(add or {}).removing(remove)
    if not roster.accounts:
        raise ConfigError(
            "the roster would be empty: add accounts (--device, --requester, --recorder, --dashboard)"
        )
    if not directory.exists():
        directory.mkdir(parents=True)
        restrict(directory, broker_reads=True, directory=True)
    changes = sync_password_file(
        directory / PASSWD_NAME,
        roster.accounts,
        renew,
        directory / CREDENTIALS_NAME,
        mosquitto_passwd=mosquitto_passwd,
    )
    write_private(directory / SETUP_NAME, _setup_toml(merged, roster), broker_reads=False)
    write_private(directory / ACL_NAME, render_acl(roster), broker_reads=True)
    write_private(directory / CONFIG_NAME, render_config(directory, merged), broker_reads=True)
    return SetupResult(directory, merged, roster, changes)
