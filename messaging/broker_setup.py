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
import os
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from string import Template
from typing import Any, Final

from dartfl.errors import ConfigError
from messaging.accounts import Role, Roster, read_template, render_acl
from messaging.passwords import PasswordChanges, restrict, sync_password_file, write_private

__all__ = [
    "BrokerSettings",
    "SetupResult",
    "check_config_text",
    "read_setup",
    "render_config",
    "write_broker_setup",
]

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
        check_config_text("--tls-address", self.tls_address)
        for name in ("ca_file", "cert_file", "key_file"):
            object.__setattr__(self, name, Path(getattr(self, name)))
            check_config_text(_flag(name), str(getattr(self, name)))
            if not getattr(self, name).is_absolute():
                raise ConfigError(f"{_flag(name)} must be an absolute path (the broker reads it)")
        if type(self.require_certificate) is not bool:
            raise ConfigError(f"require-certificate must be true or false, got {self.require_certificate!r}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-").replace("-file", "file")


def check_config_text(flag: str, value: str) -> str:
    """`value` if it can stand as one value on a line of mosquitto.conf, else ConfigError.

    Mosquitto reads its config a line at a time and trims each line's ends: a newline in a
    value would start a line of its own choosing (`allow_anonymous true`), a control character
    or invalid UTF-8 is refused or misread by the broker, and blanks at either end are lost."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{flag} is not valid UTF-8 ({value!r}); name it in UTF-8") from None
    if not value.isprintable():
        raise ConfigError(
            f"{flag} holds a control character (newline, tab, ...) that would break the Mosquitto "
            f"config: {value!r}; give a plain value"
        )
    if value != value.strip():
        raise ConfigError(f"{flag} starts or ends with a blank, which Mosquitto drops: {value!r}")
    return value


def _check_readable(flag: str, path: Path) -> None:
    """The broker reads `path` at its start: a typo must stop the set-up, not the broker."""
    try:
        exists, is_file = path.exists(), path.is_file()
    except OSError as exc:  # a folder on the way that this user may not enter
        raise ConfigError(f"{flag} {path}: cannot look at it ({exc.strerror}); run as root (sudo)") from None
    if not exists:
        raise ConfigError(f"{flag} {path}: no such file; give the path of the PEM file")
    if not is_file:
        raise ConfigError(f"{flag} {path}: not a file; give the path of the PEM file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag} {path}: not readable by this user; run as its owner or root (sudo)")


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
    try:
        if not path.exists():
            return BrokerSettings(), Roster()
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; remove it and run the set-up again") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); run as root (sudo)") from None
    keys = {f.name.replace("_", "-"): f.name for f in fields(BrokerSettings)}
    known = set(keys) | set(Roster().to_mapping())
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown}; expected {sorted(known)}")
    try:
        settings = BrokerSettings(**{keys[k]: v for k, v in data.items() if k in keys})
    except (ConfigError, TypeError) as exc:
        raise ConfigError(
            f"{path}: {exc} (a saved value: correct its line here, or delete it for the default)"
        ) from None
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
    go, and a new one has none until its ACL block is written. A folder that cannot be one, or
    cannot be written, is a ConfigError naming it, as is every bad value."""
    # 1. The folder: its path goes into the config (password_file, acl_file) too.
    try:
        check_config_text("--dir", str(directory.resolve()))
        if directory.exists() and not directory.is_dir():
            raise ConfigError(
                f"--dir {directory} is a file, not a folder; give a folder for the broker set-up"
            )
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        why = exc.strerror if isinstance(exc, OSError) else exc
        raise ConfigError(f"--dir {directory}: cannot look at it ({why}); give another folder") from None
    # 2. What this run changes, checked before anything is written.
    old_settings, old_roster = read_setup(directory)
    merged = replace(old_settings, **(settings or {}))
    for name in ("ca_file", "cert_file", "key_file"):
        if name in (settings or {}):
            _check_readable(_flag(name), getattr(merged, name))
    adding = {role: list(names) for role, names in (add or {}).items()}
    removing = list(remove)
    both = sorted({name for names in adding.values() for name in names} & set(removing))
    if both:
        raise ConfigError(f"{', '.join(both)}: both added and removed (--remove); give one or the other")
    roster = old_roster.adding(adding).removing(removing)
    if not roster.accounts:
        raise ConfigError(
            "the roster would be empty: add accounts (--device, --requester, --recorder, --dashboard)"
        )
    # 3. The files.
    try:
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
    except OSError as exc:
        where = exc.filename or directory
        raise ConfigError(
            f"--dir {directory}: cannot write the broker set-up ({exc.strerror} at {where}); "
            "give a folder you can create and write (or run with sudo)"
        ) from None
    return SetupResult(directory, merged, roster, changes)
