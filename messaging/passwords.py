"""The broker's password file and each account's password, kept in step with the roster.

Hashes are made by Mosquitto's own `mosquitto_passwd` (so the broker can read them), from a
temporary plain-text file (`mosquitto_passwd -U`): a password never appears on a command line,
where every user of the machine could read it (`ps`). A new or renewed account gets a random
password, written once to `credentials/<account>.env` as `DARTFL_MQTT_PASSWORD=...` (mode
600: the file a device's systemd unit reads with `EnvironmentFile=`). Existing accounts keep
their hashes; accounts gone from the roster are removed from the file.
"""

from __future__ import annotations

import grp
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dartfl.errors import ConfigError
from messaging.security import PASSWORD_ENV

__all__ = ["PasswordChanges", "read_password_file", "restrict", "sync_password_file", "write_private"]

PASSWORD_BYTES: Final = 24  # 32 URL-safe characters
BROKER_GROUP: Final = "mosquitto"  # Debian's broker user and group


@dataclass(frozen=True)
class PasswordChanges:
    created: tuple[str, ...] = ()
    renewed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def read_password_file(path: Path) -> dict[str, str]:
    """account -> its `name:hash` line; empty when the file does not exist yet."""
    if not path.exists():
        return {}
    entries = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, _ = line.partition(":")
        if not sep or not name:
            raise ConfigError(f"{path}:{number}: not a Mosquitto password line (expected name:hash)")
        entries[name] = line
    return entries


def restrict(path: Path, *, broker_reads: bool, directory: bool = False) -> None:
    """Owner-only, or also readable by the broker's group when root can arrange it (Mosquitto
    reads its password and ACL files as the `mosquitto` user)."""
    mode = (0o750 if directory else 0o640) if broker_reads else (0o700 if directory else 0o600)
    if broker_reads and os.geteuid() == 0:
        try:
            os.chown(path, 0, grp.getgrnam(BROKER_GROUP).gr_gid)
        except KeyError:  # no mosquitto group (a broker running as its caller): owner only
            mode &= 0o700
    else:
        mode &= 0o700
    path.chmod(mode)


def sync_password_file(
    path: Path,
    accounts: Sequence[str],
    renew: Collection[str],
    credentials: Path,
    *,
    mosquitto_passwd: str = "mosquitto_passwd",
) -> PasswordChanges:
    """Make `path` hold exactly `accounts`: new ones (and those in `renew`) with fresh random
    passwords written to `credentials/<name>.env`, the others unchanged."""
    existing = read_password_file(path)
    unknown = sorted(set(renew) - set(accounts))
    if unknown:
        raise ConfigError(f"cannot renew {', '.join(unknown)}: not in the roster")
    fresh = [name for name in accounts if name not in existing or name in renew]
    passwords = {name: secrets.token_urlsafe(PASSWORD_BYTES) for name in fresh}
    hashed = _hash(passwords, path.parent, mosquitto_passwd)
    lines = [hashed[name] if name in hashed else existing[name] for name in accounts]
    write_private(path, "".join(f"{line}\n" for line in lines), broker_reads=True)
    credentials.mkdir(parents=True, exist_ok=True)
    restrict(credentials, broker_reads=False, directory=True)
    for name, password in passwords.items():
        write_private(credentials / f"{name}.env", f"{PASSWORD_ENV}={password}\n", broker_reads=False)
    removed = sorted(set(existing) - set(accounts))
    for name in removed:
        (credentials / f"{name}.env").unlink(missing_ok=True)
    return PasswordChanges(
        created=tuple(n for n in fresh if n not in existing),
        renewed=tuple(n for n in fresh if n in existing),
        kept=tuple(n for n in accounts if n not in passwords),
        removed=tuple(removed),
    )


def _hash(passwords: dict[str, str], folder: Path, mosquitto_passwd: str) -> dict[str, str]:
    """name -> `name:hash` line, by `mosquitto_passwd -U` on a private temporary file."""
    if not passwords:
        return {}
    binary = shutil.which(mosquitto_passwd)
    if binary is None:
        raise ConfigError(f"{mosquitto_passwd!r} not found on PATH: install it (`apt-get install mosquitto`)")
    fd, name = tempfile.mkstemp(prefix=".passwd-", dir=folder)  # mode 600
    plain = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.writelines(f"{account}:{password}\n" for account, password in passwords.items())
        done = subprocess.run(
            [binary, "-U", str(plain)], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise ConfigError(f"mosquitto_passwd -U failed: {(done.stderr or done.stdout).strip()}")
        return read_password_file(plain)
    finally:
        plain.unlink(missing_ok=True)


def write_private(path: Path, text: str, *, broker_reads: bool) -> None:
    """Write `text` to `path` atomically, restricted before it holds anything."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        restrict(tmp, broker_reads=broker_reads)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
